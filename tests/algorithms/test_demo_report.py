"""The demo's report: what a run changed and when (run_log.describe_changes), and the
(weights, harness) pair evaluation of bench/demo_pairs.py."""
import functools
import importlib.util
import json
import os

import pytest

from whale_jax.algorithms import run_log
from whale_jax.harness import trajectory as trajectory_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@functools.cache  # its absl flags may be defined once per process
def _demo_pairs():
  spec = importlib.util.spec_from_file_location(
      "demo_pairs", os.path.join(ROOT, "bench", "demo_pairs.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _write(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write("".join(json.dumps(row) + "\n" for row in rows))


def test_describe_changes_lists_phases_edits_and_scores(tmp_path):
  workdir = str(tmp_path)
  _write(os.path.join(workdir, "metrics.jsonl"), [
      {"phase": "evaluation", "rollouts": 0, "test_mean": 0.125},
      {"phase": "weight", "rollouts": 128, "reward": 0.1},
      {"phase": "weight", "rollouts": 256, "reward": 0.2},
      {"phase": "harness", "rollouts": 400, "label": "cycle_000", "iterations": 3,
       "accepted": "c0003"},
      {"phase": "harness", "rollouts": 400, "label": "cycle_000", "gate_accepted": True},
      {"phase": "weight", "rollouts": 528, "reward": 0.4},
      {"phase": "harness", "rollouts": 600, "label": "cycle_001", "iterations": 2,
       "accepted": "c0000"},
      {"phase": "evaluation", "rollouts": 600, "test_mean": 0.3}])
  # cycle_000: c0001 (from c0000) and c0003 (from c0001) form the accepted chain; c0002 is a
  # rejected sibling and must not be listed.
  _write(os.path.join(workdir, "archive", "cycle_000", "summary.jsonl"), [
      {"id": "c0000", "parent": None, "success": 0.25},
      {"id": "c0001", "parent": "c0000", "mechanism": "passage_length", "success": 0.375,
       "hypothesis": "longer passages"},
      {"id": "c0002", "parent": "c0000", "mechanism": "turn_budget", "success": 0.0,
       "hypothesis": "fewer turns"},
      {"id": "c0003", "parent": "c0001", "mechanism": "query_rewrite", "success": 0.5,
       "hypothesis": "append the question"}])
  _write(os.path.join(workdir, "archive", "cycle_001", "summary.jsonl"), [
      {"id": "c0000", "parent": None, "success": 0.625}])
  assert run_log.describe_changes(workdir) == [
      "  rollouts     0: test mean@k 0.125",
      "  rollouts     0-256: weight phase, 2 RSFT steps (training reward 0.100 -> 0.200); the "
      "incumbent's harness-split score 0.250 after",
      "  rollouts   400: harness search cycle_000 (3 iterations): split score 0.250 -> 0.500 "
      "with 2 accepted edit(s):",
      "      c0001 passage_length (0.375): longer passages",
      "      c0003 query_rewrite (0.500): append the question",
      "  rollouts   400-528: weight phase, 1 RSFT steps (training reward 0.400 -> 0.400); the "
      "incumbent's harness-split score 0.500 before, 0.625 after",
      "  rollouts   600: harness search cycle_001 (2 iterations): kept the incoming harness "
      "(split score 0.625)",
      "  rollouts   600: test mean@k 0.300"]


def test_an_evaluation_during_a_weight_phase_is_listed_after_that_phase(tmp_path):
  """An evaluation taken mid-phase (after the first of two steps) and one at the phase's last
  step come after the phase's line, in the order they were taken."""
  workdir = str(tmp_path)
  _write(os.path.join(workdir, "metrics.jsonl"), [
      {"phase": "evaluation", "rollouts": 0, "test_mean": 0.125},
      {"phase": "weight", "rollouts": 128, "reward": 0.1},
      {"phase": "evaluation", "rollouts": 128, "test_mean": 0.25},
      {"phase": "weight", "rollouts": 256, "reward": 0.3},
      {"phase": "evaluation", "rollouts": 256, "test_mean": 0.375}])
  assert run_log.describe_changes(workdir) == [
      "  rollouts     0: test mean@k 0.125",
      "  rollouts     0-256: weight phase, 2 RSFT steps (training reward 0.100 -> 0.300)",
      "  rollouts   128: test mean@k 0.250",
      "  rollouts   256: test mean@k 0.375"]


def test_describe_changes_of_an_empty_workdir_is_empty(tmp_path):
  assert run_log.describe_changes(str(tmp_path)) == []


def test_paired_difference_and_config_overrides():
  demo_pairs = _demo_pairs()
  # Differences 0.5, 0, -0.5 over the shared questions (q4 is in one only): mean 0, sample
  # std 0.5, standard error 0.5 / sqrt(3).
  mean, error, count = demo_pairs.paired({"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4": 1.0},
                                         {"q1": 0.5, "q2": 0.5, "q3": 0.5})
  assert (mean, count) == (0.0, 3)
  assert error == pytest.approx(0.5 / 3 ** 0.5)
  config = demo_pairs.load_config(os.path.join(ROOT, "configs", "demo.py:smoke"),
                                  ["loop.seed=2", "search.seed=2"])
  assert (config.loop.seed, config.search.seed, config.domain.split_sizes["test"]) == (2, 2, 8)
  with pytest.raises(ValueError, match="key=value"):
    demo_pairs.load_config(os.path.join(ROOT, "configs", "demo.py"), ["loop.seed"])


def test_a_method_without_a_run_is_refused_before_anything_is_built():
  demo_pairs = _demo_pairs()
  config = demo_pairs.load_config(os.path.join(ROOT, "configs", "demo.py:smoke"), [])
  with pytest.raises(ValueError, match="need --run"):
    demo_pairs.evaluate_pairs(config, "", ["whale"], ["h0"])


@pytest.mark.slow
def test_a_pair_from_a_finished_run_scores_as_the_run_did(tmp_path):
  """The run's own final evaluation (its weights and harness) and demo_pairs' evaluation of
  that pair, from the checkpoint, agree question by question: the pairs are paired with the
  runs."""
  from whale_jax.algorithms import experiment  # pylint: disable=g-import-not-at-top
  demo_pairs = _demo_pairs()
  config = demo_pairs.load_config(os.path.join(ROOT, "configs", "demo.py:smoke"), [])
  config.methods = ("weight_only",)
  workdir = str(tmp_path / "run")
  summary = experiment.run(config, workdir, show_progress=False)
  run_per_task = summary["methods"]["weight_only"]["final_per_task"]
  results = demo_pairs.evaluate_pairs(config, workdir, ["weight_only", "start"], ["h0"])
  assert results["weight_only/h0"] == run_per_task
  # The start weights under h0 score as the run's initial evaluation did, episode by episode
  # (read back from the test trajectories the run wrote).
  scores = {}
  for row in trajectory_lib.read_records(os.path.join(workdir, "weight_only", "test_trajectories",
                                                     "evaluation_000.jsonl.gz")):
    scores.setdefault(row["instance_id"], []).append(row["score"])
  assert results["start/h0"] == pytest.approx(
      {task: sum(values) / len(values) for task, values in scores.items()})
  assert len(results["start/h0"]) == len(run_per_task) == 8


def test_describe_changes_names_grpo_steps_and_lists_validation_gates(tmp_path):
  """A VACE-style run: GRPO blocks separated by validation gates (one refused, one accepted,
  one refused but adopted, as the ungated alternation does)."""
  workdir = str(tmp_path)
  gate = {"phase": "harness", "gate_n": 48, "gate_rollouts": 96}
  _write(os.path.join(workdir, "metrics.jsonl"), [
      {"phase": "weight", "rollouts": 128, "reward": 0.25, "kind": "grpo"},
      {"phase": "weight", "rollouts": 256, "reward": 0.5, "kind": "grpo"},
      dict(gate, rollouts=352, label="vace_cycle_000", gate_accepted=False,
           gate_adopted=False, incumbent_validation=0.125, candidate_validation=0.0625),
      {"phase": "weight", "rollouts": 480, "reward": 0.75, "kind": "grpo"},
      dict(gate, rollouts=576, label="vace_cycle_001", gate_accepted=True, gate_adopted=True,
           incumbent_validation=0.125, candidate_validation=0.25),
      dict(gate, rollouts=672, label="vace_cycle_002", gate_accepted=False, gate_adopted=True,
           incumbent_validation=0.25, candidate_validation=0.25)])
  assert run_log.describe_changes(workdir) == [
      "  rollouts     0-256: weight phase, 2 GRPO steps (training reward 0.250 -> 0.500)",
      "  rollouts   352: gate vace_cycle_000: candidate 0.062 against incumbent 0.125 on 48 "
      "validation questions, refused; kept the incumbent",
      "  rollouts   352-480: weight phase, 1 GRPO steps (training reward 0.750 -> 0.750)",
      "  rollouts   576: gate vace_cycle_001: candidate 0.250 against incumbent 0.125 on 48 "
      "validation questions, accepted; adopted",
      "  rollouts   672: gate vace_cycle_002: candidate 0.250 against incumbent 0.250 on 48 "
      "validation questions, refused; adopted"]
