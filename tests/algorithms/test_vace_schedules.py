"""VACE's final pair and its gated baselines, on the tiny CPU config with scripted validation
scores (the gate's evaluations are real episodes whose scores a test script replaces):

  - the reported pair is the one with the best validation mean seen, not the last one: its
    test evaluation runs at that cycle's parameters (hashed in the test) and harness;
  - a run killed right after the best pair's weights were saved resumes to the same result;
  - harness_only runs no train step: no weight rollouts, no optimizer call, the parameters
    unchanged, every gate at the initial weights;
  - SIA-style (harness_first): its harness phase changes the harness only through accepted
    gate decisions at the initial weights; its RL phase trains under one fixed harness.
"""
import dataclasses
import hashlib
import json
import os

import jax
import numpy as np
import pytest

from tests.algorithms import tiny
from whale_jax.algorithms import experiment
from whale_jax.algorithms import loop
from whale_jax.algorithms import policy as policy_lib
from whale_jax.algorithms import vace
from whale_jax.harness import trajectory as trajectory_lib


def _params_hash(run):
  digest = hashlib.sha256()
  for leaf in jax.tree.leaves(jax.device_get(run.policy.params)):
    digest.update(np.ascontiguousarray(leaf).tobytes())
  return digest.hexdigest()


def _rows(path):
  with open(path) as file:
    return [json.loads(line) for line in file if line.strip()]


class Killed(Exception):
  """Raised from inside a run to stand for the process being killed there."""


class Observer:
  """Scripts validation means by (phase, cycle, RL blocks done, incumbent or candidate) and
  records what the run did: parameter hashes at each validation and test evaluation, the
  harness of every weight step, every incumbent change with the phase it happened in."""

  def __init__(self, monkeypatch, script, fail_at_checkpoint=None):
    self.script, self.fail_at_checkpoint = script, fail_at_checkpoint
    self.validation_hashes, self.tests, self.step_harnesses, self.incumbents = {}, [], [], []
    self.train_calls, self.checkpoints = 0, 0
    make_evaluate, evaluate_test = loop.make_evaluate, loop.evaluate_test
    grpo_step, set_incumbent, checkpoint = loop.grpo_step, loop.set_incumbent, loop.checkpoint
    train = policy_lib.Policy.train

    def scripted_make_evaluate(run):
      evaluate = make_evaluate(run)
      validation_ids = {instance.id for instance in run.splits["validation"]}

      def scripted(harness, instances, keys):
        evaluation = evaluate(harness, instances, keys)
        if {instance.id for instance in instances} != validation_ids:
          return evaluation
        state = run.state
        role = "incumbent" if harness.source == state.incumbent else "candidate"
        key = (state.phase, state.cycle, state.vace.rl_blocks, role)
        self.validation_hashes[run.policy.weights_id] = _params_hash(run)
        score = self.script.get(key, 0.0)
        return dataclasses.replace(evaluation, scores=(score,) * len(evaluation.scores))
      scripted.weights_id = getattr(evaluate, "weights_id", None)
      return scripted

    def recording_evaluate_test(run, harness=None, label=""):
      record = evaluate_test(run, harness, label)
      self.tests.append({"params": _params_hash(run), "weights_id": run.policy.weights_id,
                         "harness_hash": record["harness_hash"],
                         "test_mean": record["test_mean"]})
      return record

    def recording_grpo_step(run, harness, budget_rollouts=0):
      self.step_harnesses.append((run.state.phase, harness.hash))
      return grpo_step(run, harness, budget_rollouts)

    def recording_set_incumbent(run, harness):
      self.incumbents.append((run.state.phase, run.state.cycle, harness.hash))
      return set_incumbent(run, harness)

    def counting_train(policy, *args, **kwargs):
      self.train_calls += 1
      return train(policy, *args, **kwargs)

    def failing_checkpoint(run):
      self.checkpoints += 1
      if self.checkpoints == self.fail_at_checkpoint:
        raise Killed(f"killed before checkpoint {self.checkpoints} was written")
      checkpoint(run)

    def moving_advantages(rewards, normalization, filter_zero_advantage):
      # The tiny random model scores 0 everywhere, so every advantage would be 0 and no
      # step would move the weights; +1/-1 within each group makes every step move them.
      advantages = np.ones(np.shape(rewards), np.float64)
      advantages[:, 1::2] = -1.0
      return advantages, np.ones(len(advantages), bool)

    monkeypatch.setattr(loop.samples_lib, "group_advantages", moving_advantages)
    monkeypatch.setattr(loop, "make_evaluate", scripted_make_evaluate)
    monkeypatch.setattr(loop, "evaluate_test", recording_evaluate_test)
    monkeypatch.setattr(loop, "grpo_step", recording_grpo_step)
    monkeypatch.setattr(loop, "set_incumbent", recording_set_incumbent)
    monkeypatch.setattr(policy_lib.Policy, "train", counting_train)
    monkeypatch.setattr(loop, "checkpoint", failing_checkpoint)


# Cycle 0 accepts (0.25 -> 0.5), cycle 1 accepts (0.0 -> 0.25), cycle 2 ties at 0: the best
# validation mean seen (0.5) is cycle 0's pair, neither the last weights nor the last harness.
VACE_SCRIPT = {("harness", 0, 0, "incumbent"): 0.25, ("harness", 0, 0, "candidate"): 0.5,
               ("harness", 1, 0, "incumbent"): 0.0, ("harness", 1, 0, "candidate"): 0.25}


def _vace_config(schedule="alternate", num_cycles=3):
  config = tiny.tiny_config("vace")
  config.vace = dict(num_cycles=num_cycles, block_steps=1, schedule=schedule)
  config.loop.update(checkpoint_every_steps=1, filter_zero_advantage=False)
  return config


def _check_selected_is_cycle_0(workdir, summary, observer, validation_hashes=None):
  """validation_hashes: {weights_id: parameter hash} seen at the gates (default observer's;
  a resumed run's own process did not see the gates run before it was killed)."""
  validation_hashes = validation_hashes or observer.validation_hashes
  decisions = _rows(os.path.join(workdir, "gate_decisions.jsonl"))
  first = decisions[0]
  assert first["accepted"] and first["candidate_mean"] == 0.5
  chosen = summary["selected_by_validation"]
  assert (chosen["cycle"], chosen["weights_id"], chosen["harness_hash"]) == (
      1, first["weights_id"], first["candidate"])
  last = decisions[-1]
  assert last["weights_id"] != first["weights_id"] and summary["weight_steps"] == 3
  # The final test ran at cycle 0's parameters (hashed when its gate ran) and harness, not
  # at the last ones; the summary and the saved test episodes name that pair.
  final = observer.tests[-1]
  assert final["params"] == validation_hashes[first["weights_id"]]
  assert final["params"] != validation_hashes[last["weights_id"]]
  assert final["harness_hash"] == first["candidate"] != last["candidate"]
  assert summary["final_test_mean"] == final["test_mean"]
  assert summary["incumbent_hash"] == first["candidate"]
  episodes_dir = os.path.join(workdir, "test_trajectories")
  episodes = trajectory_lib.read_records(
      os.path.join(episodes_dir, sorted(os.listdir(episodes_dir))[-1]))
  assert {(row["weights_id"], row["harness_hash"]) for row in episodes} == {
      (first["weights_id"], first["candidate"])}
  metrics = _rows(os.path.join(workdir, "metrics.jsonl"))
  assert metrics[-1]["phase"] == "evaluation"
  assert metrics[-1]["test_mean"] == summary["final_test_mean"]
  assert "mean_turns" in summary["final_behaviour"]


@pytest.mark.slow
def test_the_final_pair_is_the_best_validation_pair_not_the_last(tmp_path, monkeypatch):
  observer = Observer(monkeypatch, VACE_SCRIPT)
  workdir = str(tmp_path / "vace")
  summary = experiment.run(_vace_config(), workdir, show_progress=False)
  _check_selected_is_cycle_0(workdir, summary, observer)
  assert os.path.isdir(os.path.join(workdir, vace.SELECTED_DIR))
  # The initial pair (scripted 0.0) first, then one pair per cycle.
  assert [pair["validation_mean"] for pair in summary["pairs"]] == [0.0, 0.5, 0.25, 0.0]
  assert summary["pairs"][0]["label"] == "initial"


@pytest.mark.slow
def test_a_run_killed_after_the_best_weights_were_saved_resumes_to_the_same_pair(
    tmp_path, monkeypatch):
  reference = Observer(monkeypatch, VACE_SCRIPT)
  expected = experiment.run(_vace_config(), str(tmp_path / "reference"), show_progress=False)
  monkeypatch.undo()
  # Checkpoints: start, weight step, end of cycle 0's GRPO block, end of its harness phase.
  # Killed before the 4th is written, after the best pair's weights were saved (the resumed
  # run replays cycle 0's harness phase and finds them); killed again before the resumed
  # run's 2nd checkpoint (cycle 1's weight step); then resumed to the end.
  workdir = str(tmp_path / "interrupted")
  for fail_at in (4, 2, None):
    observer = Observer(monkeypatch, VACE_SCRIPT, fail_at_checkpoint=fail_at)
    if fail_at is None:
      summary = experiment.run(_vace_config(), workdir, show_progress=False)
    else:
      with pytest.raises(Killed):
        experiment.run(_vace_config(), workdir, show_progress=False)
    monkeypatch.undo()
  _check_selected_is_cycle_0(workdir, summary, observer, reference.validation_hashes)
  assert observer.tests[-1]["params"] == reference.tests[-1]["params"]
  for key in ("final_test_mean", "selected_by_validation", "pairs", "counts", "weight_steps",
              "incumbent_hash", "final_per_task"):
    assert summary[key] == expected[key], key


@pytest.mark.slow
def test_harness_only_runs_no_train_step(tmp_path, monkeypatch):
  script = {("harness", 0, 0, "incumbent"): 0.0, ("harness", 0, 0, "candidate"): 0.5}
  observer = Observer(monkeypatch, script)
  config = _vace_config("harness_only", num_cycles=2)
  workdir = str(tmp_path / "harness_only")
  summary = experiment.run(config, workdir, show_progress=False)
  assert observer.train_calls == 0 and observer.step_harnesses == []
  assert summary["weight_steps"] == 0 and summary["counts"]["weight"] == 0
  assert not [r for r in _rows(os.path.join(workdir, "metrics.jsonl")) if r["phase"] == "weight"]
  assert observer.tests[0]["params"] == observer.tests[-1]["params"]   # initial == final
  decisions = _rows(os.path.join(workdir, "gate_decisions.jsonl"))
  assert [row["weights_id"] for row in decisions] == ["solver@0"] * 2
  assert [row["accepted"] for row in decisions] == [True, False]
  # Harness rollouts, hand-counted: the initial pair's validation, then per cycle one
  # diagnostic batch (prompt_batch tasks x num_samples) and the gate's two harnesses on the
  # validation split.
  validation = config.domain.split_sizes["validation"]
  per_cycle = config.loop.prompt_batch * config.loop.num_samples + 2 * validation
  assert summary["counts"]["harness"] == validation + 2 * per_cycle
  assert summary["selected_by_validation"]["harness_hash"] == decisions[0]["candidate"]
  assert observer.tests[-1]["harness_hash"] == decisions[0]["candidate"]


@pytest.mark.slow
def test_sia_gates_its_harness_phase_then_trains_under_a_fixed_harness(tmp_path, monkeypatch):
  # Harness phase at W0: cycle 0 accepts, cycle 1 rejects (candidate lower). RL blocks score
  # 0.75 then 0.25 on validation: the best pair is the first RL block's, whose weights the
  # second block overwrote (restored from their save for the final test).
  script = {("harness", 0, 0, "incumbent"): 0.25, ("harness", 0, 0, "candidate"): 0.5,
            ("harness", 1, 0, "incumbent"): 0.5, ("harness", 1, 0, "candidate"): 0.25,
            ("weight", 2, 1, "incumbent"): 0.75, ("weight", 2, 2, "incumbent"): 0.25}
  observer = Observer(monkeypatch, script)
  workdir = str(tmp_path / "sia")
  summary = experiment.run(_vace_config("harness_first", num_cycles=2), workdir,
                           show_progress=False)
  decisions = _rows(os.path.join(workdir, "gate_decisions.jsonl"))
  assert [row["weights_id"] for row in decisions] == ["solver@0"] * 2   # at the initial W
  assert [row["accepted"] for row in decisions] == [True, False]
  accepted = {row["candidate"] for row in decisions if row["accepted"]}
  changes = [(phase, h) for phase, _, h in observer.incumbents]
  # Every harness change of the harness phase is an accepted gate decision, and nothing
  # else changes it before the end (where the selected pair is made current).
  assert changes[:-1] == [("harness", decisions[0]["candidate"])]
  assert {h for _, h in changes} <= accepted
  # The RL phase: 2 blocks x 1 GRPO step, every one under the harness the gate kept.
  assert [phase for phase, _ in observer.step_harnesses] == ["weight", "weight"]
  assert {h for _, h in observer.step_harnesses} == {decisions[0]["candidate"]}
  assert summary["weight_steps"] == 2 and observer.train_calls >= 1
  chosen = summary["selected_by_validation"]
  assert chosen["label"] == "rl_block_000" and chosen["validation_mean"] == 0.75
  last = summary["pairs"][-1]
  assert last["label"] == "rl_block_001" and last["weights_id"] != chosen["weights_id"]
  final = observer.tests[-1]
  assert final["params"] == observer.validation_hashes[chosen["weights_id"]]
  assert final["params"] != observer.validation_hashes[last["weights_id"]]
  assert final["params"] != observer.tests[0]["params"]   # trained, not W0
  assert final["harness_hash"] == decisions[0]["candidate"]


@pytest.mark.slow
@pytest.mark.parametrize("initial, expected_label", [(0.75, "initial"), (0.0, "rl_block_000")])
def test_rl_only_reports_its_best_validation_pair_the_initial_one_included(
    initial, expected_label, tmp_path, monkeypatch):
  # rl_only: 2 blocks of 1 GRPO step under the seed harness, validated after each block
  # (0.5 then 0.25). With the initial pair scripted at 0.75 it wins (the final test runs at
  # W0); at 0.0 the first block's pair wins, not the last one.
  script = {("start", 0, 0, "incumbent"): initial, ("weight", 0, 1, "incumbent"): 0.5,
            ("weight", 0, 2, "incumbent"): 0.25}
  observer = Observer(monkeypatch, script)
  workdir = str(tmp_path / "rl_only")
  config = _vace_config("rl_only", num_cycles=2)
  config.recipe = "rl_only"
  config.vace = dict(num_cycles=2, block_steps=1)   # the recipe sets the schedule
  summary = experiment.run(config, workdir, show_progress=False)
  assert summary["recipe"] == "rl_only" and summary["weight_steps"] == 2
  assert [pair["label"] for pair in summary["pairs"]] == ["initial", "rl_block_000",
                                                         "rl_block_001"]
  assert [pair["validation_mean"] for pair in summary["pairs"]] == [initial, 0.5, 0.25]
  assert not os.path.exists(os.path.join(workdir, "gate_decisions.jsonl"))
  assert {h for _, h in observer.step_harnesses} == {summary["pairs"][0]["harness_hash"]}
  chosen = summary["selected_by_validation"]
  assert chosen["label"] == expected_label
  final, start = observer.tests[-1], observer.tests[0]
  if expected_label == "initial":
    assert final["params"] == start["params"] and chosen["weights_id"] == "solver@0"
  else:
    assert final["params"] == observer.validation_hashes[chosen["weights_id"]]
    assert final["params"] not in (start["params"],
                                   observer.validation_hashes[summary["pairs"][-1]["weights_id"]])
  # Harness rollouts, hand-counted: three validation evaluations (initial, two blocks).
  assert summary["counts"]["harness"] == 3 * config.domain.split_sizes["validation"]


@pytest.mark.slow
def test_the_ungated_run_adopts_what_its_logged_gate_would_refuse(tmp_path, monkeypatch):
  # Cycle 0's candidate scores below the incumbent (0.5 -> 0.25): the gate would refuse it,
  # the ungated run adopts it and its log records the loss (-0.25) with adopted=True.
  script = {("harness", 0, 0, "incumbent"): 0.5, ("harness", 0, 0, "candidate"): 0.25}
  observer = Observer(monkeypatch, script)
  config = _vace_config(num_cycles=1)
  config.recipe = "ungated"
  summary = experiment.run(config, str(tmp_path / "ungated"), show_progress=False)
  [decision] = summary["gate_decisions"]
  assert not decision["accepted"] and decision["adopted"]
  assert decision["mean_difference"] == -0.25
  [row] = _rows(os.path.join(tmp_path, "ungated", "gate_decisions.jsonl"))
  assert decision["candidate_hash"] == row["candidate"]
  assert observer.incumbents[0][2] == row["candidate"]   # adopted all the same
  assert summary["pairs"][-1]["validation_mean"] == 0.25
