"""Chess board helpers on python-chess, with JSON arguments and results (positions as FEN).

  legal_moves(fen)            [{"uci": "e2e4", "san": "e4"}, ...] sorted by UCI
  format_legal_moves(fen)     "- [e2e4] SAN=e4" lines, the WHALE observation's legal-move list
  board_ascii(fen)            the board with rank and file labels, White at the bottom
  describe_board(fen)         side to move, FEN, board and legal moves: one observation text
  is_legal_move(fen, move)    move in UCI ("e2e4", "e7e8q") or SAN ("e4", "Nf3")
  play_move(fen, move)        {"fen", "uci", "san", "is_check", "is_checkmate", "is_game_over"}
  chess_tools()               these as a domain's tools dict
"""
import chess


def _board(fen):
  if not isinstance(fen, str):
    raise TypeError(f"fen must be a FEN string; got {type(fen).__name__}.")
  try:
    return chess.Board(fen)
  except ValueError as error:
    raise ValueError(f"Invalid FEN {fen!r}: {error}.") from None


def parse_move(board, move):
  """The legal chess.Move that `move` (UCI or SAN) names on board, or None."""
  if not isinstance(move, str) or not move.strip():
    return None
  move = move.strip()
  try:
    parsed = chess.Move.from_uci(move.lower())
    if parsed in board.legal_moves:
      return parsed
  except ValueError:
    pass
  try:
    parsed = board.parse_san(move)
  except ValueError:
    return None
  return parsed if parsed else None  # parse_san accepts the null move ("0000", "--")


def legal_moves(fen):
  board = _board(fen)
  moves = sorted(board.legal_moves, key=lambda move: move.uci())
  return [{"uci": move.uci(), "san": board.san(move)} for move in moves]


def format_legal_moves(fen):
  return "\n".join(f"- [{move['uci']}] SAN={move['san']}" for move in legal_moves(fen))


def board_ascii(fen):
  board = _board(fen)
  files = "  " + " ".join("abcdefgh")
  rows = [files]
  for rank in range(7, -1, -1):
    pieces = [board.piece_at(chess.square(file, rank)) for file in range(8)]
    cells = " ".join(piece.symbol() if piece else "." for piece in pieces)
    rows.append(f"{rank + 1} {cells} {rank + 1}")
  return "\n".join(rows + [files])


def describe_board(fen):
  board = _board(fen)
  side = "White" if board.turn == chess.WHITE else "Black"
  return (f"Side to move: {side}\nFEN: {board.fen()}\nBoard:\n{board_ascii(fen)}\n"
          f"Legal moves:\n{format_legal_moves(fen)}")


def is_legal_move(fen, move):
  return parse_move(_board(fen), move) is not None


def play_move(fen, move):
  """Plays a legal move; raises ValueError (listing the legal moves) for an illegal one."""
  board = _board(fen)
  parsed = parse_move(board, move)
  if parsed is None:
    allowed = ", ".join(m["uci"] for m in legal_moves(fen))
    raise ValueError(f"{move!r} is not a legal move in {board.fen()}; legal moves (UCI): "
                     f"{allowed}.")
  san = board.san(parsed)
  board.push(parsed)
  return {"fen": board.fen(), "uci": parsed.uci(), "san": san, "is_check": board.is_check(),
          "is_checkmate": board.is_checkmate(), "is_game_over": board.is_game_over()}


def chess_tools():
  """name -> function, for Episode(tools=...)."""
  return {"describe_board": describe_board, "legal_moves": legal_moves,
          "is_legal_move": is_legal_move, "play_move": play_move, "board_ascii": board_ascii}
