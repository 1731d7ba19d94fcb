"""Every recipe and baseline runs end to end on a tiny CPU config, with exact accounting."""
import collections
import json
import os

import pytest

from tests.algorithms import tiny
from whale_jax.algorithms import experiment
from whale_jax.harness import runtime as runtime_lib

FAST = ("whale", "vace")
SLOW = ("whale_adaptive", "fst", "ungated", "weight_only", "harness_only", "stagewise", "sia")


@pytest.fixture
def episode_counter(monkeypatch):
  """Counts episodes the harness runtime actually runs, and the tokens generated in them
  (counts[(task id, "tokens")]), by task id."""
  counts = collections.Counter()
  original = runtime_lib.HarnessRuntime.run_many   # run_episodes and batched evaluations

  def counting(self, batches):
    batches = [(harness, list(episodes)) for harness, episodes in batches]
    results = original(self, batches)
    for (_, episodes), trajectories in zip(batches, results):
      for episode, trajectory in zip(episodes, trajectories):
        counts[episode.task_id] += 1
        counts[(episode.task_id, "tokens")] += sum(
            len(completion.token_ids) for call in trajectory.calls
            for completion in call.completions)
    return results

  monkeypatch.setattr(runtime_lib.HarnessRuntime, "run_many", counting)
  return counts


def _split_of(config):
  from whale_jax import tasks  # pylint: disable=g-import-not-at-top
  section = config.domain.to_dict()
  domain = tasks.get_domain(section.pop("name"), **section)
  return {instance.id: split for split, instances in domain.splits().items()
          for instance in instances}


def _check_run(workdir, summary, recipe):
  assert summary["recipe"] == recipe
  assert summary["final_test_mean"] is not None
  for name in ("config.json", "metrics.jsonl", "summary.json"):
    assert os.path.exists(os.path.join(workdir, name)), name
  rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  assert rows[0]["phase"] == "evaluation" and rows[-1]["phase"] == "evaluation"
  # Every episode reached the model: no infra errors (e.g. prompts past the cache length).
  assert not any(row.get("outcome_infra_error") or row.get("behaviour_infra_error_rate")
                 for row in rows)


@pytest.mark.parametrize("recipe", FAST + tuple(pytest.param(r, marks=pytest.mark.slow)
                                               for r in SLOW))
def test_recipe_runs_end_to_end_with_exact_rollout_counts(recipe, tmp_path, episode_counter):
  config = tiny.tiny_config(recipe)
  workdir = str(tmp_path / recipe)
  summary = experiment.run(config, workdir, show_progress=False)
  _check_run(workdir, summary, recipe)
  split_of = _split_of(config)
  by_split = collections.Counter()
  for key, count in episode_counter.items():
    if isinstance(key, tuple):
      by_split[(split_of[key[0]], "tokens")] += count
    else:
      by_split[split_of[key]] += count
  counts = summary["counts"]
  assert counts["weight"] == by_split["weight"]
  assert counts["harness"] == by_split["harness"] + by_split["validation"]
  assert counts["evaluation"] == by_split["test"]
  for phase, splits in (("weight", ("weight",)), ("harness", ("harness", "validation")),
                        ("evaluation", ("test",))):
    assert counts[f"{phase}_tokens"] == sum(by_split[(split, "tokens")] for split in splits)
  if recipe in ("whale", "weight_only", "fst", "vace", "ungated"):
    assert counts["weight"] > 0
  if recipe in ("whale", "harness_only", "fst", "vace"):
    assert counts["harness"] > 0
  if recipe == "whale":
    # Each harness phase is its own proposer session, named by its archive (cycle_NNN), so a
    # phase that starts from an unchanged incumbent does not replay the last one's proposals.
    cycles = sorted(os.listdir(os.path.join(workdir, "archive")))
    assert cycles
    for cycle in cycles:
      with open(os.path.join(workdir, "archive", cycle, "search.json")) as f:
        assert json.load(f)["session"] == cycle
