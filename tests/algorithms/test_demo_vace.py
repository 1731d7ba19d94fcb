"""configs/demo.py:vace: VACE's methods on the embedded demo (issue 44), and the gate log
summary it prints (vace.gate_log_summary)."""
import json

import pytest

from configs import demo
from whale_jax.algorithms import experiment
from whale_jax.algorithms import experiment_config
from whale_jax.algorithms import vace


def test_the_vace_variant_builds_with_vaces_grpo_and_the_demos_world(tmp_path):
  experiment_ = experiment_config.parse(demo.get_config("vace"), str(tmp_path / "run"))
  assert experiment_.recipe == "compare"
  assert experiment_.methods == ("vace", "ungated", "rl_only", "vace_harness_only")
  # The demo's world, solver, seed harness and edit mechanisms; the 300 test questions.
  assert experiment_.domain.seed == 7 and experiment_.domain.split_sizes["test"] == 300
  assert experiment_.domain.options["seed_harness"] == "searchqa_compact"
  assert experiment_.model.source == "embedded"
  assert experiment_.search.mechanisms == demo.MECHANISMS
  # GRPO as configs/vace.py runs it: groups of 8, DAPO filtering (no refills), clip-higher.
  loop = experiment_.loop
  assert (loop.num_samples, loop.filter_zero_advantage, loop.max_refill_rounds) == (8, True, 0)
  assert loop.eval_num_samples == 3 and loop.gate_rule == "strict"
  grpo = experiment_.training.grpo
  assert (grpo.clip_epsilon, grpo.clip_epsilon_high, grpo.kl_weight) == (0.2, 0.28, 0.0)
  # One rollout cap and one schedule for every method; each its own preset of it.
  schedules = {method: experiment_.recipe_options(method) for method in experiment_.methods}
  assert {o.budget_rollouts for o in schedules.values()} == {demo.BUDGET_ROLLOUTS}
  assert {o.num_cycles for o in schedules.values()} == {demo.VACE_CYCLES}
  assert [(o.schedule, o.gated) for o in schedules.values()] == [
      ("alternate", True), ("alternate", False), ("rl_only", True), ("harness_only", True)]
  # The WHALE demo is left as it was.
  assert demo.get_config().methods == ("whale", "weight_only", "harness_only")


def _summary(*decisions):
  return {"gate_decisions": [dict(zip(("label", "accepted", "mean_difference",
                                       "candidate_hash", "adopted"), d)) for d in decisions]}


def test_gate_log_summary_counts_and_pairs_the_rejections_by_hand():
  summaries = {
      "vace": _summary(("vace_cycle_000", True, 0.125, "a", True),
                       ("vace_cycle_001", False, -0.0625, "b", False),
                       ("vace_cycle_002", False, 0.0, "c", False)),
      "ungated": _summary(("vace_cycle_000", True, 0.125, "a", True),
                          ("vace_cycle_001", False, -0.25, "b", True),
                          ("vace_cycle_002", False, -0.5, "d", True)),
      "rl_only": {"gate_decisions": []}}
  lines = vace.gate_log_summary(summaries).split("\n")
  assert "| vace | 3 | 1 | 1 | 1 | 1 |" in lines
  assert "| ungated | 3 | 1 | 2 | 0 | 3 |" in lines
  assert not any(line.startswith("| rl_only") for line in lines)
  assert ("vace rejected vace_cycle_001: -6.2 validation points had it been adopted; "
          "ungated adopted the same candidate at vace_cycle_001 (-25.0 points there)") in lines
  assert ("ungated adopted vace_cycle_001 (also proposed to the gated run), which its gate "
          "refused (a loss): -25.0 validation points") in lines
  assert ("ungated adopted vace_cycle_002, which its gate refused (a loss): -50.0 validation "
          "points") in lines
  assert not any("rejected vace_cycle_002" in line for line in lines)   # a tie


@pytest.mark.slow
def test_the_vace_smoke_variant_runs_all_four_methods(tmp_path, capsys):
  result = experiment.run(demo.get_config("vace,smoke"), str(tmp_path), show_progress=False)
  summaries = result["methods"]
  assert list(summaries) == ["vace", "ungated", "rl_only", "vace_harness_only"]
  for method, summary in summaries.items():
    pairs = summary["pairs"]
    assert pairs[0]["label"] == "initial" and pairs[0]["weights_id"] == "solver@0", method
    best = max(pair["validation_mean"] for pair in pairs)
    assert summary["selected_by_validation"]["validation_mean"] == best, method
    assert len(summary["final_per_evaluation"]) == 2, method   # eval_num_samples
    assert len(summary["final_per_task"]) == 6, method
  # 2 cycles of 1-step blocks; harness_only trains nothing; the ungated run adopts all.
  assert [summaries[m]["weight_steps"] for m in summaries] == [2, 2, 2, 0]
  assert summaries["vace_harness_only"]["counts"]["weight"] == 0
  assert len(summaries["ungated"]["gate_decisions"]) == 2
  assert all(d["adopted"] for d in summaries["ungated"]["gate_decisions"])
  assert summaries["rl_only"]["gate_decisions"] == []
  written = json.loads((tmp_path / "summary.json").read_text())
  assert "Gate decisions:" in written["table"] and "| vace | 2 |" in written["table"]
  assert "vace - rl_only:" in capsys.readouterr().out
