"""Reasoning Gym domains: any dataset by name, its own scorer, dataset config passed through."""
import pytest

from whale_jax import tasks
from whale_jax.tasks import reasoning_gym_domain

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
