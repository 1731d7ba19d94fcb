"""Instances keep their reference private; domains build splits once; the registry."""
import json

import pytest

from whale_jax import tasks
from whale_jax.sampling.api import SamplingParams
from whale_jax.tasks.domain import Instance

SMALL = {"weight": 6, "harness": 2, "validation": 2, "test": 2}


def test_public_fields_must_be_json():
  with pytest.raises(ValueError, match="JSON-serializable"):
    Instance("x", {"question": object()})
  with pytest.raises(ValueError, match="JSON round trip"):
    Instance("x", {"moves": ("e2e4",)})
  with pytest.raises(ValueError, match="non-empty string"):
    Instance("", {"question": "q"})


def test_reference_is_not_in_repr():
  instance = Instance("x", {"question": "capital of France?"}, {"golden_answers": ["Paris"]})
  assert "Paris" not in repr(instance) and "capital" in repr(instance)


def test_splits_are_built_once():
  domain = tasks.get_domain("reasoning_gym:chain_sum", split_sizes=SMALL)
  assert domain.splits() is domain.splits()


def test_make_episode_sends_only_public_fields_and_fresh_tools():
  domain = tasks.get_domain("chess", split_sizes=SMALL)
  instance = domain.splits()["test"][0]
  sampling = SamplingParams(max_tokens=32, seed=3)
  first = tasks.make_episode(domain, instance, sampling)
  second = tasks.make_episode(domain, instance, sampling)
  assert (first.task_id, first.task, first.sampling) == (instance.id, dict(instance.public),
                                                         sampling)
  assert "solution" not in json.dumps(first.task)
  first.tools["move"](instance.reference["solution"][0])
  assert second.tools["board"]()["moves_played"] == []  # each episode has its own board


@pytest.mark.parametrize("name", ["synthetic_qa", "math", "chess", "reasoning_gym:gcd"])
def test_registry_builds_offline_domains(name):
  domain = tasks.get_domain(name, split_sizes=SMALL)
  assert domain.name == name
  assert "def run(task, llm, tools)" in domain.seed_harness
  assert {len(v) for v in domain.splits().values()} == {6, 2}
  assert domain.description.strip()


def test_registry_errors_name_the_choices():
  with pytest.raises(ValueError, match="synthetic_qa"):
    tasks.get_domain("trivia")
  with pytest.raises(ValueError, match="choose one of"):
    tasks.get_domain("reasoning_gym:no_such_dataset")
  with pytest.raises(TypeError, match="synthetic_qa_domain for its options"):
    tasks.get_domain("synthetic_qa", num_dragons=3)
