"""Chess puzzles as a domain: a board tool on the host, the full line or nothing.

  domain = chess_domain(puzzles="lichess_db_puzzle.csv", max_solution_plies=9)
  domain = chess_domain()          # offline: generated mate-in-1 and mate-in-2 puzzles

Instances: public = the starting observation (chess_puzzles.observation: fen, side_to_move,
ASCII board, legal moves as UCI and SAN, the trigger as last_opponent_move, moves_played);
reference = the puzzle (its solution line).
Tools, one board per episode: move(move) plays a UCI (or SAN) move and answers "correct" (with
the opponent's reply and the new observation), "solved", "wrong" (the puzzle is failed),
"illegal" or "malformed" (nothing changed) or "finished"; board() returns the observation.
Verifier: the moves the episode played through tools.move, replayed against the reference
(chess_puzzles.score_line): 1 only for the whole line; any mate accepted with
accept_any_mate (the default; WHALE's verifier accepts the reference line only). An episode
that never called move is scored on its returned answer read as space-separated moves.
Extra metrics: legal_move_rate (submitted moves that were legal), moves_per_episode.
"""
import os
import zlib

import numpy as np

from whale_jax.harness import static_checks
from whale_jax.tasks import behaviour
from whale_jax.tasks import seed_harnesses
from whale_jax.tasks import splits as splits_lib
from whale_jax.tasks.chess import edits
from whale_jax.tasks.chess import mates as chess_mates
from whale_jax.tasks.chess import puzzles as chess_puzzles
from whale_jax.tasks.domain import Domain
from whale_jax.tasks.domain import Instance
from whale_jax.tasks.record_files import as_paths

EDIT_CATALOGUE = edits.CATALOGUE  # the Domain's edit_catalogue (registry.edit_catalogue)
INSTRUCTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "instructions",
                            "chess.md")  # steering text of agentic proposers
DEFAULT_SPLIT_SIZES = {"weight": 256, "harness": 64, "validation": 64, "test": 128}
DESCRIPTION = """\
Task: solve a chess puzzle: play the winning line for the side to move, one move at a time;
the opponent's replies are played for you.
task = {"fen", "side_to_move", "board" (ASCII, white in capitals, rank 8 first),
        "legal_moves": [{"uci", "san"}], "last_opponent_move", "moves_played"}.
tools.move(move) -> {"status", "message", ...}: plays one move (UCI like "e2e4", or SAN).
  "correct": right; "opponent_move" is the reply and "observation" the new position.
  "solved": the puzzle is solved. "wrong": a legal move that is not the solution; the puzzle
  is lost and no further moves count. "illegal"/"malformed": refused, nothing changed.
tools.board() -> the current observation.
The harness must not choose moves itself (no engines or move search): the model decides.
run returns the moves it played, space-separated. Score: 1 only if the whole solution line was
played{any_mate}, else 0.
"""
ANY_MATE_NOTE = " (any mating move counts)"
MOVE_STATUSES_LEGAL = ("correct", "solved", "wrong")


def puzzle_instance(puzzle):
  """An Instance whose public fields are the puzzle's starting observation."""
  return Instance(id=puzzle["id"], public=chess_puzzles.puzzle_observation(puzzle),
                  reference=puzzle)


def board_tools(accept_any_mate=True):
  """tools(instance) of the domain: a fresh board for one episode, {"move", "board"}."""
  def tools(instance):
    board = chess_puzzles.PuzzleBoard(instance.reference, accept_any_mate)

    def move(move):
      return board.move(move)

    def observe():
      return board.observe()
    return {"move": move, "board": observe}
  return tools


def played_moves(trajectory):
  """The move arguments of the episode's tools.move calls, in order."""
  return [str(event.arguments.get("move", (event.arguments.get("args") or [""])[0]))
          for event in behaviour.tool_events(trajectory, "move")]


def chess_verifier(accept_any_mate=True):
  """verify(instance, answer, trajectory) of the domain (see the module docstring)."""
  def verify(instance, answer, trajectory=None):
    moves = played_moves(trajectory) if trajectory is not None else []
    if not moves:
      moves = answer.split() if isinstance(answer, str) else []
    return chess_puzzles.score_line(instance.reference, moves, accept_any_mate)
  return verify


chess_verify = chess_verifier()


def chess_metrics(instances, trajectories, scores):
  metrics = behaviour.episode_metrics(
      trajectories, scores,
      lambda answer: isinstance(answer, str) and bool(answer.split()))
  statuses = [event.result.get("status") for t in trajectories
              for event in behaviour.tool_events(t, "move")
              if not event.error and isinstance(event.result, dict)]
  submitted = [s for s in statuses if s in MOVE_STATUSES_LEGAL + ("illegal", "malformed")]
  metrics["legal_move_rate"] = (sum(s in MOVE_STATUSES_LEGAL for s in submitted) /
                                len(submitted) if submitted else 0.0)
  metrics["moves_per_episode"] = len(submitted) / max(len(trajectories), 1)
  return metrics


def generated_puzzles(count, seed, mate_in_two_fraction=0.5):
  """count generated puzzles, mate-in-2 for mate_in_two_fraction of them, mixed by seed."""
  num_mate_in_two = round(count * mate_in_two_fraction)
  return (chess_mates.generate_mate_puzzles(count - num_mate_in_two, mate_in=1, seed=seed) +
          chess_mates.generate_mate_puzzles(num_mate_in_two, mate_in=2, seed=seed))


def chess_domain(puzzles=None, split_puzzles=None, split_sizes=None, seed=0, min_rating=None,
                 max_rating=None, max_solution_plies=None, themes=None,
                 mate_in_two_fraction=0.5, accept_any_mate=True, split_pool_sizes=None):
  """Chess puzzles from Lichess CSV file(s) or, without files, generated mates.

  Args:
    puzzles: Lichess puzzle file(s) of the shared pool.
    split_puzzles: {split: file(s)} for splits with their own source.
    split_sizes: {split: size}; -1 takes the rest of a file pool.
    seed: split seed (and generator seed offline).
    min_rating, max_rating, max_solution_plies, themes: Lichess filters (load_lichess_puzzles).
    mate_in_two_fraction: share of mate-in-2 among generated puzzles.
    accept_any_mate: a mating move solves the puzzle even where the reference line has
      another (Lichess's rule); False scores the reference line only (WHALE's verifier).
    split_pool_sizes: {split: pool size}: the split is first drawn as a pool of this size,
      then split_sizes[split] of the pool at random (WHALE's chess test: 256 of a 1,024
      pool). The pool's other instances go to no split.
  """
  split_sizes = dict(DEFAULT_SPLIT_SIZES if split_sizes is None else split_sizes)
  split_pool_sizes = dict(split_pool_sizes or {})
  for split, pool_size in split_pool_sizes.items():
    size = split_sizes.get(split, 0)
    if not isinstance(pool_size, int) or size < 0 or pool_size < size:
      raise ValueError(f"split_pool_sizes[{split!r}]={pool_size!r} must be an int at least "
                       f"split_sizes[{split!r}]={size!r} (and that size not -1).")
  paths = as_paths(puzzles)
  offline = not paths and not split_puzzles
  if offline and any(size < 0 for size in split_sizes.values()):
    raise ValueError(f"split_sizes={split_sizes} asks for 'the rest' (-1), but offline puzzles "
                     "are generated to size; give every split a size.")
  filters = dict(min_rating=min_rating, max_rating=max_rating,
                 max_solution_plies=max_solution_plies, themes=themes)

  def load(files):
    return [puzzle_instance(p) for path in as_paths(files)
            for p in chess_puzzles.load_lichess_puzzles(path, **filters)]

  drawn_sizes = {**split_sizes, **split_pool_sizes}

  def make_splits():
    if offline:
      pool = [puzzle_instance(p) for p in generated_puzzles(
          sum(drawn_sizes.values()), seed, mate_in_two_fraction)]
      splits = splits_lib.split_instances(pool, drawn_sizes, seed)
    else:
      fixed = {split: load(files) for split, files in (split_puzzles or {}).items()}
      splits = splits_lib.split_instances(load(paths), drawn_sizes, seed, fixed=fixed)
    for split in split_pool_sizes:  # split_sizes[split] of the pool, in the pool's order
      order = np.random.default_rng([seed, zlib.crc32(split.encode())]).permutation(
          len(splits[split]))
      splits[split] = [splits[split][i] for i in sorted(order[:split_sizes[split]])]
    return splits

  config = {"puzzles": [os.fspath(p) for p in paths],
            "split_puzzles": {k: [os.fspath(p) for p in as_paths(v)]
                              for k, v in (split_puzzles or {}).items()},
            "split_sizes": split_sizes, "seed": seed, "mate_in_two_fraction":
            mate_in_two_fraction, "accept_any_mate": accept_any_mate,
            "split_pool_sizes": split_pool_sizes, **filters}
  description = DESCRIPTION.replace("{any_mate}", ANY_MATE_NOTE if accept_any_mate else "")
  return Domain(name="chess", description=description,
                seed_harness=seed_harnesses.source("chess"), splits=make_splits,
                verify=chess_verifier(accept_any_mate), tools=board_tools(accept_any_mate),
                metrics=chess_metrics,
                allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS, config=config,
                edit_catalogue=EDIT_CATALOGUE, instructions=INSTRUCTIONS)
