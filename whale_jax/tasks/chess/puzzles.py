"""Chess puzzles: the Lichess puzzle CSV, the board a solver plays on, and line scoring.

A puzzle is {"id", "fen", "solution", "trigger", "rating", "themes"}: `fen` is the position
the solver faces, `solution` the reference line from there (solver move, opponent reply,
solver move, ...), `trigger` the opponent move that led to `fen` (None for composed puzzles).

Lichess rows (PuzzleId, FEN, Moves, Rating, RatingDeviation, Popularity, NbPlays, Themes,
GameUrl, OpeningTags; with or without the header line): FEN is the position before the
opponent's first move Moves[0]; that move is applied as the trigger and the solver must play
Moves[1], Moves[3], ... while the opponent's replies Moves[2], Moves[4], ... are applied.
The full Lichess CSV (about 4M rows) is streamed, filtered and its parsed pool cached
(load_lichess_puzzles).

Scoring (1 only for the full line): each solver move must equal the reference move, except
that, with accept_any_mate (the default), a move giving checkmate always solves the puzzle
(Lichess accepts any mating move on the last move of a mate puzzle; a mate earlier than the
reference's ends the game just as well). WHALE's verifier (SPEC 1.8) accepts only the
reference line: accept_any_mate=False.
Any other legal move that differs fails the puzzle at once; it cannot be taken back.
Malformed and illegal moves change nothing: retrying them is the harness's business.
Moves are read as UCI ("e2e4", "e7e8q") and, failing that, as SAN ("e4", "Qxf7#").
"""
import concurrent.futures
import csv
import hashlib
import heapq
import json
import multiprocessing
import os
import re

from absl import logging
import chess

from whale_jax import atomic_files
from whale_jax.harness.tools import chess_board
from whale_jax.tasks.record_files import read_records

_UCI = re.compile(r"^([a-h][1-8][a-h][1-8][qrbn]?|0000)$", re.IGNORECASE)
_SAN = re.compile(r"^([KQRBN]?[a-h]?[1-8]?x?[a-h][1-8](=?[QRBN])?|[O0]-[O0](-[O0])?)[+#]?[!?]*$")
LICHESS_COLUMNS = ("PuzzleId", "FEN", "Moves", "Rating", "RatingDeviation", "Popularity",
                   "NbPlays", "Themes", "GameUrl", "OpeningTags")


def lichess_puzzle(row, source="lichess"):
  """A puzzle from one Lichess CSV row (a dict with at least PuzzleId, FEN and Moves).

  source names the row in errors (e.g. "lichess_db_puzzle.csv line 12").
  """
  moves = str(row.get("Moves") or "").split()
  if len(moves) < 2:
    raise ValueError(f"{source}: puzzle {row.get('PuzzleId')!r} has Moves={row.get('Moves')!r}; "
                     "a Lichess puzzle needs the trigger move and at least one solver move.")
  try:
    board = chess.Board(row["FEN"])
  except (ValueError, TypeError, KeyError) as error:
    raise ValueError(f"{source}: puzzle {row.get('PuzzleId')!r} has FEN={row.get('FEN')!r}, "
                     f"which is not a valid FEN ({error}).") from None
  for i, move in enumerate(moves):
    try:
      parsed = chess.Move.from_uci(move)
    except ValueError:
      parsed = None
    if parsed is None or not board.is_legal(parsed):
      raise ValueError(f"{source}: puzzle {row.get('PuzzleId')!r}: move {i} ({move}) is illegal "
                       f"in {board.fen()}; check the FEN and Moves columns.")
    board.push(parsed)
    if i == 0:
      fen = board.fen()
  rating = row.get("Rating")
  try:
    rating = int(rating) if rating not in (None, "") else None
  except ValueError:
    raise ValueError(f"{source}: puzzle {row.get('PuzzleId')!r} has Rating={rating!r}; "
                     "expected an integer.") from None
  return {"id": f"lichess:{row['PuzzleId']}", "fen": fen, "solution": moves[1:],
          "trigger": moves[0], "rating": rating,
          "themes": str(row.get("Themes") or "").split()}


CACHE_VERSION = 1
CACHE_MIN_BYTES = 8 << 20  # smaller CSVs parse in seconds: not cached unless cache_dir is given
_PARALLEL_MIN_ROWS = 50_000
_CHUNK_ROWS = 20_000
_MAX_WORKERS = 16


def load_lichess_puzzles(path, min_rating=None, max_rating=None, max_solution_plies=None,
                         themes=None, min_solution_plies=None, max_puzzles=None, seed=0,
                         cache_dir=None, num_workers=None):
  """Puzzles from a Lichess puzzle CSV (or .jsonl/.parquet with the same columns).

  A CSV is streamed: each row is split, filtered on its columns (rating, solution length,
  themes) and only the rows kept are parsed and checked with python-chess, in num_workers
  processes when there are many (default: the CPU count). The parsed pool of a CSV of
  CACHE_MIN_BYTES or more (or any CSV when cache_dir is given) is cached in cache_dir (default
  $WHALE_JAX_CACHE_DIR or ~/.cache/whale_jax), keyed by the file's path, size and
  modification time and by these arguments, and written atomically; the next load reads it.

  Args:
    min_rating, max_rating: keep puzzles rated within these bounds.
    min_solution_plies, max_solution_plies: keep puzzles whose solution (after the trigger)
      has this many plies (WHALE: 1 to 9).
    themes: keep puzzles tagged with at least one of these Lichess themes.
    num_workers: parsing processes (default: the CPU count, at most 16).
    max_puzzles: keep at most this many of the puzzles that pass the filters, drawn uniformly
      by a hash of (seed, PuzzleId) (the same draw whatever the row order), in file order.
  Raises:
    FileNotFoundError naming a missing file; ValueError naming the file, the line and what
    is wrong with a malformed row.
  """
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"Lichess puzzle file {path} does not exist; download "
                            "lichess_db_puzzle.csv (database.lichess.org) or fix the path.")
  filters = dict(min_rating=min_rating, max_rating=max_rating,
                 min_solution_plies=min_solution_plies, max_solution_plies=max_solution_plies,
                 themes=sorted(themes) if themes else None, max_puzzles=max_puzzles, seed=seed)
  if not path.endswith(".csv"):
    rows = [(f"{path} row {i + 1}", row) for i, row in enumerate(read_records(path))]
    kept = [(where, row) for where, row in rows if _keep(row, filters, where)]
    return [lichess_puzzle(row, where) for where, row in _sample(kept, filters)]
  cache_path = _cache_path(path, filters, cache_dir)
  if cache_path is not None and os.path.isfile(cache_path):
    try:
      with open(cache_path, encoding="utf-8") as file:
        return json.load(file)["puzzles"]
    except (OSError, ValueError, KeyError) as error:
      logging.warning("Ignoring the unreadable puzzle cache %s (%s); parsing %s again.",
                      cache_path, error, path)
  kept = (item for item in _csv_rows(path) if _keep(item[1], filters, item[0]))
  puzzles = _parse_all(_sample_stream(kept, filters), num_workers)
  if cache_path is not None:
    atomic_files.write_text(cache_path, json.dumps({"source": path, "filters": filters,
                                                    "puzzles": puzzles}))
  return puzzles


_KEPT_COLUMNS = ("PuzzleId", "FEN", "Moves", "Rating", "Themes")


def _csv_rows(path):
  """(location, row dict) per data line of a Lichess CSV, with or without the header."""
  with open(path, encoding="utf-8", newline="") as file:
    reader = csv.reader(file)
    columns = LICHESS_COLUMNS
    try:
      for row in reader:
        if not row:
          continue
        if reader.line_num == 1 and row[0] == "PuzzleId":
          columns = tuple(row)
          missing = [c for c in ("PuzzleId", "FEN", "Moves") if c not in columns]
          if missing:
            raise ValueError(f"{path} line 1: the header lacks the column(s) {missing}; a "
                             f"Lichess puzzle CSV has {', '.join(LICHESS_COLUMNS)}.")
          continue
        if len(row) < 3:
          raise ValueError(f"{path} line {reader.line_num}: {len(row)} field(s) "
                           f"{row!r:.80}; expected {len(columns)} comma-separated fields "
                           f"({', '.join(columns)}).")
        yield (path, reader.line_num), dict(zip(columns, row))
    except (csv.Error, UnicodeDecodeError) as error:
      raise ValueError(f"{path} line {reader.line_num}: not readable as CSV ({error}).") from None


def _compact(item):
  """(location, row) with only the columns a puzzle uses (the pool of 4M rows stays small)."""
  location, row = item
  return location, tuple(row.get(column) for column in _KEPT_COLUMNS)


def _keep(row, filters, where):
  """Whether a row passes the column filters (cheap: no chess parsing)."""
  num_plies = len(str(row.get("Moves") or "").split()) - 1
  if filters["min_solution_plies"] is not None and num_plies < filters["min_solution_plies"]:
    return False
  if filters["max_solution_plies"] is not None and num_plies > filters["max_solution_plies"]:
    return False
  if filters["min_rating"] is not None or filters["max_rating"] is not None:
    rating = row.get("Rating")
    try:
      rating = int(rating) if rating not in (None, "") else None
    except ValueError:
      raise ValueError(f"{_where(where)}: Rating={rating!r}; expected an integer.") from None
    if filters["min_rating"] is not None and (rating is None or rating < filters["min_rating"]):
      return False
    if filters["max_rating"] is not None and (rating is None or rating > filters["max_rating"]):
      return False
  if filters["themes"] and not set(filters["themes"]) & set(str(row.get("Themes") or "").split()):
    return False
  return True


def _where(location):
  return location if isinstance(location, str) else f"{location[0]} line {location[1]}"


def _draw(seed, puzzle_id):
  """A row's place in the uniform draw: a hash of (seed, PuzzleId), as an int."""
  digest = hashlib.blake2b(f"{seed}\0{puzzle_id}".encode(), digest_size=8).digest()
  return int.from_bytes(digest, "big")


def _sample(kept, filters):
  """At most max_puzzles of the kept rows, drawn by a hash of (seed, PuzzleId); file order."""
  return _sample_stream(iter(kept), filters, compact=False)


def _sample_stream(kept, filters, compact=True):
  """_sample over an iterator, holding at most max_puzzles rows (a bounded heap)."""
  take = _compact if compact else (lambda item: item)
  max_puzzles, seed = filters["max_puzzles"], filters["seed"]
  if max_puzzles is None:
    return [take(item) for item in kept]
  heap = []  # (-draw, -order, item): a max-heap of the max_puzzles smallest (draw, order)
  for order, item in enumerate(kept):
    entry = (-_draw(seed, item[1].get("PuzzleId")), -order, take(item))
    if len(heap) < max_puzzles:
      heapq.heappush(heap, entry)
    elif entry[:2] > heap[0][:2]:
      heapq.heapreplace(heap, entry)
  return [item for _, _, item in sorted(heap, key=lambda entry: -entry[1])]


def _parse_chunk(chunk):
  puzzles = []
  for location, row in chunk:
    if isinstance(row, tuple):
      row = dict(zip(_KEPT_COLUMNS, row))
    puzzles.append(lichess_puzzle(row, _where(location)))
  return puzzles


def _parse_all(kept, num_workers):
  """lichess_puzzle of each (location, row), in worker processes when there are many."""
  num_workers = num_workers or min(os.cpu_count() or 1, _MAX_WORKERS)
  if num_workers == 1 or len(kept) < _PARALLEL_MIN_ROWS:
    return _parse_chunk(kept)
  chunks = [kept[i:i + _CHUNK_ROWS] for i in range(0, len(kept), _CHUNK_ROWS)]
  # spawn, not fork: the calling process may run JAX's threads. (As with any spawn, a script
  # calling this must keep its top-level code under `if __name__ == "__main__":`.)
  context = multiprocessing.get_context("spawn")
  with concurrent.futures.ProcessPoolExecutor(num_workers, mp_context=context) as pool:
    return [puzzle for part in pool.map(_parse_chunk, chunks) for puzzle in part]


def _cache_path(path, filters, cache_dir):
  """The cache file of (path as it is now, filters), or None when not caching."""
  stat = os.stat(path)
  if cache_dir is None:
    if stat.st_size < CACHE_MIN_BYTES:
      return None
    cache_dir = os.environ.get("WHALE_JAX_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "whale_jax")
  key = json.dumps({"path": os.path.abspath(path), "size": stat.st_size,
                    "mtime_ns": stat.st_mtime_ns, "filters": filters,
                    "version": CACHE_VERSION}, sort_keys=True)
  digest = hashlib.sha256(key.encode()).hexdigest()[:16]
  stem = os.path.splitext(os.path.basename(path))[0]
  return os.path.join(os.fspath(cache_dir), f"lichess_{stem}_{digest}.json")


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

  def __init__(self, puzzle, accept_any_mate=True):
    self.puzzle = puzzle
    self.accept_any_mate = accept_any_mate
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
    mated = self.accept_any_mate and self.board.is_checkmate()
    if mated or (move == expected and self.ply + 1 >= len(self.solution)):
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


def score_line(puzzle, moves, accept_any_mate=True):
  """1.0 if playing `moves` (the solver's moves, UCI or SAN) solves the puzzle, else 0.0.

  Malformed and illegal entries are skipped, as a board would refuse them. accept_any_mate:
  see the module docstring.
  """
  board = PuzzleBoard(puzzle, accept_any_mate)
  for text in moves:
    if board.move(text)["status"] in ("solved", "wrong", "finished"):
      break
  return 1.0 if board.status == "solved" else 0.0
