"""Chess puzzles: the Lichess puzzle CSV, the board a solver plays on, and line scoring.

A puzzle is {"id", "fen", "solution", "trigger", "rating", "themes"}: `fen` is the position
the solver faces, `solution` the reference line from there (solver move, opponent reply,
solver move, ...), `trigger` the opponent move that led to `fen` (None for composed puzzles).

Lichess rows (PuzzleId, FEN, Moves, Rating, RatingDeviation, Popularity, NbPlays, Themes,
GameUrl, OpeningTags; with or without the header line): FEN is the position before the
opponent's first move Moves[0]; that move is applied as the trigger and the solver must play
Moves[1], Moves[3], ... while the opponent's replies Moves[2], Moves[4], ... are applied.

Scoring (1 only for the full line): each solver move must equal the reference move, except
that a move giving checkmate always solves the puzzle (Lichess accepts any mating move on the
last move of a mate puzzle; a mate earlier than the reference's ends the game just as well).
Any other legal move that differs fails the puzzle at once; it cannot be taken back.
Malformed and illegal moves change nothing: retrying them is the harness's business.
Moves are read as UCI ("e2e4", "e7e8q") and, failing that, as SAN ("e4", "Qxf7#").
"""
import csv
import os
import re

import chess

from whale_jax.harness.tools import chess_board
from whale_jax.tasks.record_files import read_records

_UCI = re.compile(r"^([a-h][1-8][a-h][1-8][qrbn]?|0000)$", re.IGNORECASE)
_SAN = re.compile(r"^([KQRBN]?[a-h]?[1-8]?x?[a-h][1-8](=?[QRBN])?|[O0]-[O0](-[O0])?)[+#]?[!?]*$")
LICHESS_COLUMNS = ("PuzzleId", "FEN", "Moves", "Rating", "RatingDeviation", "Popularity",
                   "NbPlays", "Themes", "GameUrl", "OpeningTags")


def lichess_puzzle(row, source="lichess"):
  """A puzzle from one Lichess CSV row (a dict with at least PuzzleId, FEN and Moves)."""
  moves = str(row.get("Moves") or "").split()
  if len(moves) < 2:
    raise ValueError(f"{source} puzzle {row.get('PuzzleId')!r} has Moves={row.get('Moves')!r}; "
                     "a Lichess puzzle needs the trigger move and at least one solver move.")
  board = chess.Board(row["FEN"])
  for i, move in enumerate(moves):
    parsed = chess.Move.from_uci(move)
    if parsed not in board.legal_moves:
      raise ValueError(f"{source} puzzle {row.get('PuzzleId')!r}: move {i} ({move}) is illegal "
                       f"in {board.fen()}; check the FEN and Moves columns.")
    board.push(parsed)
    if i == 0:
      fen = board.fen()
  rating = row.get("Rating")
  return {"id": f"lichess:{row['PuzzleId']}", "fen": fen, "solution": moves[1:],
          "trigger": moves[0], "rating": int(rating) if rating not in (None, "") else None,
          "themes": str(row.get("Themes") or "").split()}


def load_lichess_puzzles(path, min_rating=None, max_rating=None, max_solution_plies=None,
                         themes=None):
  """Puzzles from a Lichess puzzle CSV (or .jsonl/.parquet with the same columns).

  Args:
    min_rating, max_rating: keep puzzles rated within these bounds.
    max_solution_plies: keep puzzles whose solution (after the trigger) is at most this long
      (WHALE: 1-9 plies).
    themes: keep puzzles tagged with at least one of these Lichess themes.
  """
  path = os.fspath(path)
  rows = read_records(path)
  if rows and path.endswith(".csv") and "PuzzleId" not in rows[0]:
    rows = _headerless_rows(path)
  puzzles = []
  for row in rows:
    puzzle = lichess_puzzle(row, path)
    rating = puzzle["rating"]
    if min_rating is not None and (rating is None or rating < min_rating):
      continue
    if max_rating is not None and (rating is None or rating > max_rating):
      continue
    if max_solution_plies is not None and len(puzzle["solution"]) > max_solution_plies:
      continue
    if themes and not set(themes) & set(puzzle["themes"]):
      continue
    puzzles.append(puzzle)
  return puzzles


def _headerless_rows(path):
  with open(path, encoding="utf-8", newline="") as file:
    return [dict(zip(LICHESS_COLUMNS, row)) for row in csv.reader(file) if row]


def parse_move(board, text):
  """(move, status) for a move written in UCI or SAN; status is "ok", "illegal" or "malformed".

  The move is None unless the status is "ok". "illegal" means it reads as a move (UCI, SAN or
  the null move "0000") that cannot be played here; "malformed" that it does not read as one.
  """
  move = chess_board.parse_move(board, text)
  if move:  # the null move ("0000", "--") is falsy: never playable in a puzzle
    return move, "ok"
  looks_like_a_move = isinstance(text, str) and (
      _UCI.match(text.strip()) or _SAN.match(text.strip()))
  return None, "illegal" if looks_like_a_move else "malformed"


def observation(board, last_opponent_move=None, moves_played=()):
  """What a solver may see of the position: JSON-serializable, no reference moves."""
  fen = board.fen()
  return {"fen": fen, "side_to_move": "white" if board.turn else "black",
          "board": chess_board.board_ascii(fen), "legal_moves": chess_board.legal_moves(fen),
          "last_opponent_move": last_opponent_move, "moves_played": list(moves_played)}


def _initial_board(puzzle):
  return chess.Board(puzzle["fen"])


def puzzle_observation(puzzle):
  """The observation at the start of a puzzle (the trigger already played)."""
  return observation(_initial_board(puzzle), puzzle.get("trigger"))


class PuzzleBoard:
  """One episode's board: the solver plays moves, the reference replies. Lives on the host.

  move(text) returns {"status", "message", ...}:
    "correct": the move was right; the opponent replied ("opponent_move") and
      "observation" shows the new position.
    "solved": the line is complete (or the move mated); the episode should end.
    "wrong": a legal move that is not the solution; the puzzle is failed.
    "illegal" / "malformed": nothing changed; "observation" shows the position again.
    "finished": the puzzle was already solved or failed.
  """

  def __init__(self, puzzle):
    self.puzzle = puzzle
    self.board = _initial_board(puzzle)
    self.solution = list(puzzle["solution"])
    self.ply = 0  # index into solution of the solver's next move
    self.moves_played = []
    self.last_opponent_move = puzzle.get("trigger")
    self.status = "playing"

  def observe(self):
    return observation(self.board, self.last_opponent_move, self.moves_played)

  def move(self, text):
    if self.status != "playing":
      return {"status": "finished", "message": f"The puzzle is already {self.status}; no more "
              "moves are accepted."}
    move, parse_status = parse_move(self.board, text)
    if parse_status != "ok":
      problem = "not a move" if parse_status == "malformed" else "not a legal move here"
      side = "white" if self.board.turn else "black"
      example = next(iter(self.board.legal_moves)).uci()
      return {"status": parse_status, "observation": self.observe(),
              "message": f"{str(text)[:40]!r} is {problem}; {side} to move. Give one of the "
              f"legal moves in UCI, e.g. {example}."}
    expected = chess.Move.from_uci(self.solution[self.ply])
    self.board.push(move)
    self.moves_played.append(move.uci())
    if self.board.is_checkmate() or (move == expected and self.ply + 1 >= len(self.solution)):
      self.status = "solved"
      return {"status": "solved", "message": "Puzzle solved."}
    if move != expected:
      self.status = "failed"
      return {"status": "wrong", "message": f"{move.uci()} is not the solution; the puzzle is "
              "failed."}
    reply = chess.Move.from_uci(self.solution[self.ply + 1])
    reply_san = self.board.san(reply)
    self.board.push(reply)
    self.last_opponent_move = reply.uci()
    self.ply += 2
    if self.ply >= len(self.solution):  # a reference line that ends on the opponent's move
      self.status = "solved"
      return {"status": "solved", "message": "Puzzle solved."}
    return {"status": "correct", "opponent_move": reply.uci(), "opponent_move_san": reply_san,
            "observation": self.observe(),
            "message": f"Correct. The opponent replied {reply.uci()} ({reply_san})."}


def score_line(puzzle, moves):
  """1.0 if playing `moves` (the solver's moves, UCI or SAN) solves the puzzle, else 0.0.

  Malformed and illegal entries are skipped, as a board would refuse them.
  """
  board = PuzzleBoard(puzzle)
  for text in moves:
    if board.move(text)["status"] in ("solved", "wrong", "finished"):
      break
  return 1.0 if board.status == "solved" else 0.0
