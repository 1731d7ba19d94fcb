"""Seeded mate-in-1 and mate-in-2 puzzles with a unique key move, proven by full search.

Positions are random endgame placements: the defending king on the board's edge, the
attacker's king with one to three pieces, and up to two defending pieces or pawns; either
colour may attack. A position becomes a puzzle when search over every legal line proves:

  mate in 1: exactly one legal move gives checkmate.
  mate in 2: no move mates at once, and exactly one move (the key move) leaves the defender only
    replies after which some move mates. The reference line is key, reply, mate, with the
    reply that leaves the attacker the fewest mates (then the lowest UCI) and the lowest-UCI
    mate after it; on the final move any mate is accepted (see chess_puzzles).

  puzzles = chess_mates.generate_mate_puzzles(count=10, mate_in=2, seed=0)
  puzzles[0] == {"id": "mate2:0:0", "fen": ..., "solution": ["e1e8", "g8h7", "e8h8"],
                 "trigger": None, "rating": None, "themes": ["mateIn2"]}
"""
import random

import chess

ATTACKING_PIECES = (chess.QUEEN, chess.ROOK, chess.ROOK, chess.BISHOP, chess.KNIGHT)
DEFENDING_PIECES = (chess.PAWN, chess.PAWN, chess.KNIGHT, chess.BISHOP, chess.ROOK)
MAX_TRIES_PER_PUZZLE = 200_000


def mating_moves(board):
  """Every legal move of the side to move that checkmates, in board order."""
  mates = []
  for move in list(board.legal_moves):
    board.push(move)
    if board.is_checkmate():
      mates.append(move)
    board.pop()
  return mates


def _has_mate(board):
  for move in list(board.legal_moves):
    board.push(move)
    mate = board.is_checkmate()
    board.pop()
    if mate:
      return True
  return False


def mate_in_two_first_moves(board):
  """Every move after which all defender replies allow a mate in one (none if it mates now)."""
  first_moves = []
  for move in list(board.legal_moves):
    board.push(move)
    forced = not board.is_game_over()
    if forced:
      for reply in list(board.legal_moves):
        board.push(reply)
        forced = _has_mate(board)
        board.pop()
        if not forced:
          break
    board.pop()
    if forced:
      first_moves.append(move)
  return first_moves


def _random_position(random_state):
  attacker = random_state.choice([chess.WHITE, chess.BLACK])
  board = chess.Board(None)
  edge = [s for s in chess.SQUARES
          if chess.square_rank(s) in (0, 7) or chess.square_file(s) in (0, 7)]
  defending_king = random_state.choice(edge)
  board.set_piece_at(defending_king, chess.Piece(chess.KING, not attacker))
  free = [s for s in chess.SQUARES if s != defending_king]
  random_state.shuffle(free)
  attackers = [chess.KING] + random_state.sample(ATTACKING_PIECES, random_state.randint(1, 3))
  defenders = random_state.sample(DEFENDING_PIECES, random_state.randint(0, 2))
  for piece_type in attackers:
    board.set_piece_at(free.pop(), chess.Piece(piece_type, attacker))
  for piece_type in defenders:
    square = free.pop()
    if piece_type == chess.PAWN and chess.square_rank(square) in (0, 7):
      continue
    board.set_piece_at(square, chess.Piece(piece_type, not attacker))
  board.turn = attacker
  return board if board.is_valid() else None


def _mate_in_one_line(board):
  mates = mating_moves(board)
  return [mates[0].uci()] if len(mates) == 1 else None


def _mate_in_two_line(board):
  if _has_mate(board):
    return None
  first_moves = mate_in_two_first_moves(board)
  if len(first_moves) != 1:
    return None
  first_move = first_moves[0]
  board.push(first_move)
  options = []
  for reply in list(board.legal_moves):
    board.push(reply)
    mates = sorted(move.uci() for move in mating_moves(board))
    board.pop()
    options.append((len(mates), reply.uci(), mates[0]))
  board.pop()
  _, reply, mate = min(options)
  return [first_move.uci(), reply, mate]


def generate_mate_puzzles(count, mate_in, seed=0):
  """`count` distinct puzzles (by FEN) whose key move is unique, in generation order."""
  if mate_in not in (1, 2):
    raise ValueError(f"mate_in={mate_in!r}: the generator makes mate-in-1 and mate-in-2 "
                     "puzzles; use 1 or 2.")
  find_line = _mate_in_one_line if mate_in == 1 else _mate_in_two_line
  random_state = random.Random(f"mate{mate_in}:{seed}")
  puzzles, seen = [], set()
  for _ in range(MAX_TRIES_PER_PUZZLE * max(count, 1)):
    if len(puzzles) == count:
      break
    board = _random_position(random_state)
    if board is None:
      continue
    fen = board.fen()
    if fen in seen:
      continue
    line = find_line(board)
    if line is None:
      continue
    seen.add(fen)
    puzzles.append({"id": f"mate{mate_in}:{seed}:{len(puzzles)}", "fen": fen, "solution": line,
                    "trigger": None, "rating": None, "themes": [f"mateIn{mate_in}"]})
  return puzzles
