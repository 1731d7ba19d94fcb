"""Reasoning Gym domains: any dataset by name, its own scorer, dataset config passed through."""
import pytest

from whale_jax import tasks
from whale_jax.tasks.reasoning_gym import builder as reasoning_gym_domain

SMALL = {"weight": 5, "harness": 2, "validation": 2, "test": 3}


def test_dataset_names_include_the_seed_papers_categories():
  names = reasoning_gym_domain.dataset_names()
  assert {"chain_sum", "knight_swap", "letter_jumble", "sokoban", "spell_backward"} <= set(names)


def test_scores_come_from_the_dataset_scorer_and_stay_in_range():
  domain = tasks.get_domain("reasoning_gym:spell_backward", split_sizes=SMALL)
  instance = domain.splits()["test"][0]
  answer = instance.reference["answer"]
  assert domain.verify(instance, answer, None) == 1.0  # the scorer says 1.0000000000000002
  assert 0.0 < domain.verify(instance, answer[:-1], None) < 1.0
  assert domain.verify(instance, None, None) == 0.0


def test_dataset_config_is_passed_to_reasoning_gym():
  domain = tasks.get_domain("reasoning_gym:chain_sum", split_sizes=SMALL, min_terms=5,
                            max_terms=5)
  for instance in domain.splits()["weight"]:
    assert instance.reference["metadata"]["num_terms"] == 5


def test_metrics_full_credit_rate():
  domain = tasks.get_domain("reasoning_gym:chain_sum", split_sizes=SMALL)
  from whale_jax.harness import trajectory as trajectory_lib
  trajectories = [trajectory_lib.Trajectory("e", "t", "h", "ok", answer=a)
                  for a in ["1", "", None]]
  metrics = domain.metrics([None] * 3, trajectories, [1.0, 0.5, 0.0])
  assert metrics["full_credit_rate"] == pytest.approx(1 / 3)
  assert metrics["answer_format_rate"] == pytest.approx(1 / 3)


def test_rest_of_pool_is_refused():
  with pytest.raises(ValueError, match="give every split a size"):
    tasks.get_domain("reasoning_gym:chain_sum", split_sizes={"weight": -1})


def test_python_tool_runs_code_in_the_sandbox_and_returns_tracebacks():
  domain = tasks.get_domain("reasoning_gym:chain_sum", split_sizes=SMALL)
  python = domain.tools(domain.splits()["test"][0])["python"]
  assert "tools.python(code)" in domain.description and "fractions" in domain.description
  assert python("from fractions import Fraction\nprint(Fraction(6, 4))") == "3/2\n"
  failed = python("print(1 // 0)")
  assert failed.startswith("Traceback (most recent call last)")
  assert "ZeroDivisionError" in failed
  assert python("x = 1") == "(no output; status ok)"
  # The confinement of a harness episode: no modules beyond the list, no files outside.
  assert "ImportError: import of 'os' is refused" in python("import os")
  assert "PermissionError" in python("print(open('/etc/passwd').read())")


def test_python_calls_per_episode_metric():
  domain = tasks.get_domain("reasoning_gym:chain_sum", split_sizes=SMALL)
  from whale_jax.harness import trajectory as trajectory_lib
  event = trajectory_lib.ToolEvent("python", {"code": "print(1)"}, "1\n", "", 0.0, 0.1)
  trajectories = [trajectory_lib.Trajectory("e0", "t0", "h", "ok", answer="1",
                                            tool_events=[event, event]),
                  trajectory_lib.Trajectory("e1", "t1", "h", "ok", answer="2")]
  metrics = domain.metrics([None] * 2, trajectories, [1.0, 0.0])
  assert metrics["python_calls_per_episode"] == 1.0
