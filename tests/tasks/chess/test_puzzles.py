"""Lichess puzzle loading, the episode board, and line scoring (UCI and SAN)."""
import json

import chess
import pytest

from whale_jax.tasks.chess import puzzles as chess_puzzles

HEADER = ("PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,Themes,GameUrl,"
          "OpeningTags")
ROW = ("00sHx,q3k1nr/1pp1nQpp/3p4/1P2p3/4P3/B1PP1b2/B5PP/5K2 b k - 0 17,e8d7 a2e6 d7d8 f7f8,"
       "1760,80,83,72,mate mateIn2 middlegame short,https://lichess.org/yyznGmXs/black#34,"
       "Italian_Game Italian_Game_Classical_Variation")
ROW_2 = ("00sJ9,r3r1k1/p4ppp/2p2n2/1p6/3P1qb1/2NQR3/PPB2PP1/R1B3K1 w - - 5 18,"
         "e3g3 e8e1 g1h2 e1c1 a1c1 f4h6 h2g1 h6c1,2671,105,87,325,"
         "advantage attraction fork middlegame sacrifice veryLong,"
         "https://lichess.org/gyFeQsOE#35,French_Defense French_Defense_Exchange_Variation")
# Back-rank position where both rooks mate: a puzzle whose reference is Ra8#.
TWO_MATES = {"id": "two-mates", "fen": "6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1",
             "solution": ["a1a8"], "trigger": None, "rating": None, "themes": []}


@pytest.fixture
def csv_path(tmp_path):
  path = tmp_path / "lichess_db_puzzle.csv"
  path.write_text("\n".join([HEADER, ROW, ROW_2]) + "\n")
  return path


@pytest.fixture
def puzzle(csv_path):
  return chess_puzzles.load_lichess_puzzles(csv_path)[0]


def test_lichess_row_applies_the_trigger(puzzle):
  after_trigger = chess.Board("q3k1nr/1pp1nQpp/3p4/1P2p3/4P3/B1PP1b2/B5PP/5K2 b k - 0 17")
  after_trigger.push_uci("e8d7")
  assert puzzle == {"id": "lichess:00sHx", "fen": after_trigger.fen(),
                    "solution": ["a2e6", "d7d8", "f7f8"], "trigger": "e8d7", "rating": 1760,
                    "themes": ["mate", "mateIn2", "middlegame", "short"]}


def test_headerless_csv(tmp_path):
  path = tmp_path / "puzzles.csv"
  path.write_text(ROW + "\n" + ROW_2 + "\n")
  assert [p["id"] for p in chess_puzzles.load_lichess_puzzles(path)] == ["lichess:00sHx",
                                                                          "lichess:00sJ9"]


def test_filters(csv_path):
  load = chess_puzzles.load_lichess_puzzles
  assert [p["id"] for p in load(csv_path, max_rating=2000)] == ["lichess:00sHx"]
  assert [p["id"] for p in load(csv_path, min_rating=2000)] == ["lichess:00sJ9"]
  assert [p["id"] for p in load(csv_path, max_solution_plies=3)] == ["lichess:00sHx"]
  assert [p["id"] for p in load(csv_path, themes=["fork"])] == ["lichess:00sJ9"]


def test_illegal_moves_in_the_file_are_reported(tmp_path):
  path = tmp_path / "bad.csv"
  path.write_text(HEADER + "\n" + ROW.replace("a2e6", "a2a8") + "\n")
  with pytest.raises(ValueError, match="move 1 \\(a2a8\\) is illegal"):
    chess_puzzles.load_lichess_puzzles(path)


def test_board_plays_the_line_with_opponent_replies(puzzle):
  board = chess_puzzles.PuzzleBoard(puzzle)
  first = board.observe()
  assert (first["side_to_move"], first["last_opponent_move"]) == ("white", "e8d7")
  assert {"uci": "a2e6", "san": "Be6+"} in first["legal_moves"]
  result = board.move("Be6+")  # SAN is accepted
  assert (result["status"], result["opponent_move"]) == ("correct", "d7d8")
  assert result["observation"]["moves_played"] == ["a2e6"]
  assert result["observation"]["last_opponent_move"] == "d7d8"
  assert board.move("f7f8")["status"] == "solved"
  assert board.move("f8e8")["status"] == "finished"


def test_malformed_and_illegal_moves_change_nothing(puzzle):
  board = chess_puzzles.PuzzleBoard(puzzle)
  fen = board.observe()["fen"]
  assert board.move("hello")["status"] == "malformed"
  assert board.move("e2e4")["status"] == "illegal"      # no piece there
  assert board.move("Ke2")["status"] == "illegal"       # well-formed SAN, not legal
  assert board.move("0000")["status"] == "illegal"      # null move
  assert board.observe()["fen"] == fen and board.status == "playing"
  assert board.move("a2e6")["status"] == "correct"


def test_a_legal_wrong_move_fails_for_good(puzzle):
  board = chess_puzzles.PuzzleBoard(puzzle)
  assert board.move("a2b1")["status"] == "wrong"
  assert board.move("a2e6")["status"] == "finished"
  assert board.status == "failed"


@pytest.mark.parametrize("moves, expected", [
    (["a2e6", "f7f8"], 1.0),
    (["Be6+", "Qf8#"], 1.0),                   # SAN
    (["Be6+", "f7f8"], 1.0),                   # mixed
    (["e2e4", "nonsense", "a2e6", "f7f8"], 1.0),  # refused entries are skipped
    (["a2e6"], 0.0),                           # line not finished
    (["a2e6", "f7e8"], 0.0),                   # legal but not the solution
    (["a2b1", "a2e6", "f7f8"], 0.0),           # a wrong move cannot be taken back
    ([], 0.0),
])
def test_score_line(puzzle, moves, expected):
  assert chess_puzzles.score_line(puzzle, moves) == expected


def test_any_mate_on_the_last_move_counts():
  board = chess.Board(TWO_MATES["fen"])
  mates = []
  for move in board.legal_moves:
    after = board.copy()
    after.push(move)
    if after.is_checkmate():
      mates.append(move.uci())
  assert sorted(mates) == ["a1a8", "e1e8"]
  assert chess_puzzles.score_line(TWO_MATES, ["e1e8"]) == 1.0
  assert chess_puzzles.score_line(TWO_MATES, ["Re8#"]) == 1.0
  assert chess_puzzles.score_line(TWO_MATES, ["e1e7"]) == 0.0


def test_whale_rule_accepts_the_reference_line_only():
  # WHALE's verifier (SPEC 1.8): the other mate Re8# is a legal wrong move there.
  assert chess_puzzles.score_line(TWO_MATES, ["e1e8"], accept_any_mate=False) == 0.0
  assert chess_puzzles.score_line(TWO_MATES, ["a1a8"], accept_any_mate=False) == 1.0
  board = chess_puzzles.PuzzleBoard(TWO_MATES, accept_any_mate=False)
  assert board.move("Re8#")["status"] == "wrong"


def test_observation_is_json_and_holds_no_solution(puzzle):
  observation = chess_puzzles.puzzle_observation(puzzle)
  text = json.dumps(observation)
  assert "d7d8" not in text  # the opponent's reply (its own moves are legal moves, listed)
  assert "solution" not in text and "a2e6 d7d8" not in text
  assert observation["board"].count("\n") == 9  # eight ranks between two file rows


def _many_rows(count):
  """count valid Lichess rows (the two puzzles above under distinct ids)."""
  return [(ROW if i % 2 == 0 else ROW_2).replace("00sHx" if i % 2 == 0 else "00sJ9",
                                                  f"id{i:03d}", 1) for i in range(count)]


def test_paper_solution_length_filter(csv_path):
  load = chess_puzzles.load_lichess_puzzles
  assert [len(p["solution"]) for p in load(csv_path)] == [3, 7]
  assert [p["id"] for p in load(csv_path, min_solution_plies=4, max_solution_plies=9)] == [
      "lichess:00sJ9"]
  assert load(csv_path, min_solution_plies=1, max_solution_plies=2) == []


@pytest.mark.parametrize("line, pattern", [
    ("00sHx,only-two-fields", r"line 3: 2 field\(s\) .*expected 10 comma-separated fields"),
    (ROW.replace("q3k1nr/1pp1nQpp", "q3k1nr/1pp1nQppX"), "line 3: puzzle '00sHx' has FEN="),
    (ROW.replace(",1760,", ",high,"), "line 3: puzzle '00sHx' has Rating='high'"),
    (ROW.replace("e8d7 a2e6", "e8d7 zz99"), r"line 3: puzzle '00sHx': move 1 \(zz99\) is "
     "illegal"),
])
def test_malformed_csv_rows_name_the_file_and_line(tmp_path, line, pattern):
  path = tmp_path / "lichess_db_puzzle.csv"
  path.write_text("\n".join([HEADER, ROW_2, line]) + "\n")
  with pytest.raises(ValueError, match="lichess_db_puzzle.csv " + pattern):
    chess_puzzles.load_lichess_puzzles(path, cache_dir=tmp_path / "cache")
  assert not (tmp_path / "cache").exists()  # nothing cached from a failed load


def test_missing_puzzle_file_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="nowhere.csv does not exist"):
    chess_puzzles.load_lichess_puzzles(tmp_path / "nowhere.csv")


def test_parsed_pool_is_cached_atomically_and_reused(tmp_path, monkeypatch):
  path = tmp_path / "puzzles.csv"
  path.write_text("\n".join([HEADER] + _many_rows(6)) + "\n")
  cache = tmp_path / "cache"
  first = chess_puzzles.load_lichess_puzzles(path, max_solution_plies=9, cache_dir=cache)
  (cache_file,) = cache.iterdir()  # one file, no temporary left
  assert cache_file.suffix == ".json" and len(first) == 6

  def refuse(*args):
    raise AssertionError("parsed again instead of reading the cache")
  monkeypatch.setattr(chess_puzzles, "lichess_puzzle", refuse)
  assert chess_puzzles.load_lichess_puzzles(path, max_solution_plies=9, cache_dir=cache) == first
  monkeypatch.undo()
  cache_file.write_text('{"puzzles": [')  # a damaged cache is ignored and rewritten
  assert chess_puzzles.load_lichess_puzzles(path, max_solution_plies=9, cache_dir=cache) == first
  assert json.loads(cache_file.read_text())["puzzles"] == first
  path.write_text("\n".join([HEADER] + _many_rows(4)) + "\n")  # the file changed: a new key
  assert len(chess_puzzles.load_lichess_puzzles(path, max_solution_plies=9,
                                                cache_dir=cache)) == 4
  assert len(list(cache.iterdir())) == 2


def test_max_puzzles_draws_the_same_puzzles_whatever_the_row_order(tmp_path):
  rows = _many_rows(40)
  forward, backward = tmp_path / "forward.csv", tmp_path / "backward.csv"
  forward.write_text("\n".join([HEADER] + rows) + "\n")
  backward.write_text("\n".join([HEADER] + rows[::-1]) + "\n")
  load = chess_puzzles.load_lichess_puzzles
  drawn = [p["id"] for p in load(forward, max_puzzles=7, seed=42)]
  assert len(drawn) == 7 == len(set(drawn))
  assert drawn == sorted(drawn)  # file order
  assert sorted(p["id"] for p in load(backward, max_puzzles=7, seed=42)) == drawn
  assert [p["id"] for p in load(forward, max_puzzles=7, seed=43)] != drawn
  assert len(load(forward, max_puzzles=100)) == 40


@pytest.mark.slow  # spawns two processes that import whale_jax.tasks (~15 s on 2 cores)
def test_parsing_in_worker_processes_equals_parsing_in_one(tmp_path, monkeypatch):
  path = tmp_path / "puzzles.csv"
  path.write_text("\n".join([HEADER] + _many_rows(30)) + "\n")
  serial = chess_puzzles.load_lichess_puzzles(path, num_workers=1)
  monkeypatch.setattr(chess_puzzles, "_PARALLEL_MIN_ROWS", 10)
  monkeypatch.setattr(chess_puzzles, "_CHUNK_ROWS", 8)
  assert chess_puzzles.load_lichess_puzzles(path, num_workers=2) == serial
