"""The chess domain: scoring from the moves played, Lichess file splits, metrics."""
import pytest

from whale_jax import tasks
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.tasks.chess import builder as chess_domain
from tests.tasks.chess.test_puzzles import HEADER, ROW, ROW_2


def episode(answer, moves_and_statuses):
  events = [trajectory_lib.ToolEvent("move", {"move": move}, {"status": status}, "", 0.0, 0.0)
            for move, status in moves_and_statuses]
  return trajectory_lib.Trajectory("e", "t", "h", "ok", answer=answer, tool_events=events)


@pytest.fixture
def domain(tmp_path):
  path = tmp_path / "lichess_db_puzzle.csv"
  path.write_text("\n".join([HEADER, ROW, ROW_2]) + "\n")
  return tasks.get_domain("chess", puzzles=str(path), split_sizes={"test": -1})


@pytest.fixture
def instance(domain):
  return next(i for i in domain.splits()["test"] if i.id == "lichess:00sHx")


def test_lichess_file_splits(domain):
  assert sorted(i.id for i in domain.splits()["test"]) == ["lichess:00sHx", "lichess:00sJ9"]


def test_filters_reach_the_loader(tmp_path):
  path = tmp_path / "p.csv"
  path.write_text("\n".join([HEADER, ROW, ROW_2]) + "\n")
  domain = tasks.get_domain("chess", puzzles=str(path), max_rating=2000,
                            split_sizes={"test": -1})
  assert [i.id for i in domain.splits()["test"]] == ["lichess:00sHx"]


def test_verify_scores_the_moves_played(domain, instance):
  solved = episode("a2e6 f7f8", [("a2e6", "correct"), ("f7f8", "solved")])
  assert domain.verify(instance, solved.answer, solved) == 1.0
  # Moves played decide, whatever the answer says.
  assert domain.verify(instance, "", solved) == 1.0
  lost = episode("a2e6 f7f8", [("a2b1", "wrong")])
  assert domain.verify(instance, lost.answer, lost) == 0.0
  refused_then_solved = episode("", [("e2e4", "illegal"), ("Be6+", "correct"),
                                     ("Qf8#", "solved")])
  assert domain.verify(instance, "", refused_then_solved) == 1.0


def test_verify_reads_the_answer_when_no_move_was_played(domain, instance):
  assert domain.verify(instance, "Be6+ Qf8#", episode("Be6+ Qf8#", [])) == 1.0
  assert domain.verify(instance, "a2e6 f7f8", None) == 1.0
  assert domain.verify(instance, "a2e6", None) == 0.0
  assert domain.verify(instance, None, None) == 0.0


def test_chess_metrics_legal_move_rate(instance):
  trajectories = [episode("a2e6 f7f8", [("x", "malformed"), ("a2e6", "correct"),
                                        ("f7f8", "solved")]),
                  episode("", [("a1a1", "illegal"), ("a2b1", "wrong"), ("e2e4", "finished")])]
  metrics = chess_domain.chess_metrics([instance] * 2, trajectories, [1.0, 0.0])
  assert metrics["legal_move_rate"] == pytest.approx(3 / 5)  # "finished" is not a submission
  assert metrics["moves_per_episode"] == pytest.approx(5 / 2)
  assert metrics["answer_format_rate"] == 0.5


def test_generated_mix_of_mate_in_one_and_two():
  puzzles = chess_domain.generated_puzzles(10, seed=2, mate_in_two_fraction=0.3)
  assert [len(p["solution"]) for p in puzzles] == [1] * 7 + [3] * 3
  with pytest.raises(ValueError, match="give every split a size"):
    tasks.get_domain("chess", split_sizes={"weight": -1})


def test_test_split_is_drawn_from_a_pool_and_the_whale_rule_reaches_the_domain():
  sizes = {"weight": 6, "harness": 2, "validation": 0, "test": 3}
  pooled_domain = tasks.get_domain("chess", split_sizes=sizes, seed=3,
                                   split_pool_sizes={"test": 8}, accept_any_mate=False)
  pooled = pooled_domain.splits()
  assert len(pooled["test"]) == 3
  # The same draw as a plain test split of 8 (the pool), then 3 of those 8.
  pool = tasks.get_domain("chess", split_sizes=dict(sizes, test=8), seed=3).splits()
  assert [i.id for i in pooled["weight"]] == [i.id for i in pool["weight"]]
  assert {i.id for i in pooled["test"]} < {i.id for i in pool["test"]}
  assert "any mating move" not in pooled_domain.description
  assert "any mating move" in tasks.get_domain("chess", split_sizes=sizes).description
  with pytest.raises(ValueError, match=r"split_pool_sizes\['test'\]=2 must be an int at "
                     r"least split_sizes\['test'\]=3"):
    tasks.get_domain("chess", split_sizes=sizes, split_pool_sizes={"test": 2})
