"""configs/vace.py: every argument builds a config the boundary accepts, with the paper's
numbers; a bad argument is refused with a did-you-mean; the edit library's docqa and toolflow
catalogues apply to their seed harnesses and change what episodes do; and (slow) the smoke
variants of both domains run end to end through `python -m whale_jax.main` with the gate's
decisions and the test scores in the run's files."""
import ast
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

from configs import vace
from tests.algorithms import tiny
from whale_jax import tasks
from whale_jax.algorithms import vace as algorithms_vace
from whale_jax.algorithms import config_check
from whale_jax.algorithms import experiment_config
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.harness import patches
from whale_jax.harness import static_checks
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.sampling import SamplingParams
from whale_jax.search import edit_library
from whale_jax.tasks import seed_harnesses
from whale_jax.tokenization import load_tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
METHOD_RECIPES = {"vace": "vace", "whale_style": "ungated", "rl_only": "rl_only",
                  "harness_only": "vace_harness_only", "sia": "vace", "static": "weight_only"}
METHOD_SCHEDULES = {"sia": "harness_first"}
PAPER_SPLITS = {"docqa": (84, 53, 109), "toolflow": (80, 58, 71)}   # SPEC 2.5
# SPEC 2.5, Table 1: (train, validation, test) per AutomationBench domain.
PAPER_DOMAIN_SPLITS = {"hr": (26, 15, 24), "marketing": (27, 22, 23), "finance": (27, 21, 24)}
PAPER_TRIALS = {"docqa": 12, "toolflow": 32}                        # SPEC 2.6, Table 3


def _arguments():
  for domain in ("docqa", "toolflow"):
    for method in ("",) + tuple(METHOD_RECIPES):
      for smoke in ("", "smoke"):
        yield ",".join(word for word in (domain, method, smoke) if word)


def test_every_argument_builds_and_passes_the_config_check(tmp_path):
  for argument in _arguments():
    config = vace.get_config(argument)
    if "smoke" not in argument:
      config.model = tiny.tiny_config().model.to_dict()   # the real checkpoint is not here
    experiment_config.parse(config, str(tmp_path / "run"))
    words = argument.split(",")
    domain = words[0]
    method = next((w for w in words if w in METHOD_RECIPES), "vace")
    assert config.recipe == METHOD_RECIPES[method], argument
    assert config.domain.name == domain
    assert config.loop.gate_rule == "strict"
    if config.recipe == "vace":
      assert config.vace.get("schedule", "alternate") == METHOD_SCHEDULES.get(method,
                                                                              "alternate")
    assert config.training.optimizer.learning_rate > 0
    if "smoke" in words:
      assert config.search.proposer == "edit_library"
      assert config.runtime.allow_weak_sandbox is False
      assert (config.vace.num_cycles, config.vace.block_steps) == (2, 1)
      continue
    sizes = vace.split_totals(config.domain)
    assert (sizes["weight"], sizes["harness"], sizes["validation"], sizes["test"]) == (
        PAPER_SPLITS[domain][0], 0) + PAPER_SPLITS[domain][1:]
    if domain == "toolflow":
      assert {name: (s["weight"], s["validation"], s["test"]) for name, s in
              config.domain.split_sizes_by_domain.items()} == PAPER_DOMAIN_SPLITS
    assert config.loop.eval_num_samples == 3 and config.loop.filter_zero_advantage
    assert config.loop.max_refill_rounds >= 1   # DAPO oversampling
    assert config.vace.num_cycles == PAPER_TRIALS[domain]
    # RL-only and SIA get as many GRPO updates as VACE's blocks hold (hand-computed:
    # ceil(epochs x train size / prompt batch), as loop.steps_for_epochs counts them).
    updates = math.ceil(config.baseline.total_weight_epochs * sizes["weight"] /
                        config.loop.prompt_batch)
    assert updates == PAPER_TRIALS[domain] * config.vace.block_steps
  assert not os.listdir(tmp_path)


def test_paper_model_and_method_specifics():
  config = vace.get_config("toolflow")
  assert config.model.path == "checkpoints/Qwen/Qwen3.5-9B"
  assert config.domain.domains == ("hr", "marketing", "finance")
  assert config.domain.exclude_initially_satisfied and config.domain.reward == "partial"
  assert vace.get_config("docqa,static").baseline.budget_rollouts == 1
  assert "budget_rollouts" not in vace.get_config("docqa,rl_only").baseline


@pytest.mark.parametrize("argument,words", [
    ("docqa,smok", ["'smok'", "did you mean 'smoke'"]),
    ("toolflw", ["'toolflow'"]),
    ("docqa,rl_onyl", ["did you mean 'rl_only'"]),
    ("docqa,toolflow", ["at most one domain"]),
    ("vace,sia", ["one method"]),
])
def test_a_bad_argument_is_refused(argument, words):
  with pytest.raises(ValueError) as raised:
    vace.get_config(argument)
  for word in words:
    assert word in str(raised.value), (word, str(raised.value))


def test_a_bad_argument_is_refused_by_main_in_one_line(tmp_path):
  env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
  process = subprocess.run(
      [sys.executable, "-m", "whale_jax.main", "--config=configs/vace.py:toolflw,smoke",
       f"--workdir={tmp_path / 'run'}"], cwd=ROOT, env=env, capture_output=True, text=True,
      timeout=60)
  lines = [line for line in process.stderr.splitlines() if line.strip()]
  assert process.returncode == 2 and len(lines) == 1, process.stderr[-2000:]
  assert "did you mean 'toolflow'" in lines[0] and "Traceback" not in process.stderr
  assert not (tmp_path / "run").exists()


# ---- The edit library's catalogues for docqa and toolflow --------------------------------

EXPECTED_MECHANISMS = {
    ("docqa", "docqa"): {"turn_budget", "calls_per_turn", "result_length", "format_reminder",
                         "user_prompt", "verify_then_retry"},
    ("docqa", "docqa_compact"): {"turn_budget", "result_length", "format_reminder",
                                 "verify_then_retry"},
    ("toolflow", "toolflow"): {"turn_budget", "calls_per_turn", "result_length",
                               "format_reminder"},
    ("toolflow", "toolflow_compact"): {"turn_budget", "result_length", "format_reminder"},
}
CONSTANTS = {"turn_budget": "MAX_TURNS", "calls_per_turn": "MAX_CALLS_PER_TURN",
             "result_length": "MAX_RESULT_CHARS", "format_reminder": "SYSTEM_PROMPT",
             "user_prompt": "USER_PROMPT_TEMPLATE"}


def _constants(source):
  values = {}
  for node in ast.parse(source).body:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
      try:
        values[node.targets[0].id] = ast.literal_eval(node.value)
      except ValueError:
        pass
  return values


@pytest.mark.parametrize("domain_name,seed_name", sorted(EXPECTED_MECHANISMS))
def test_catalogue_edits_apply_and_change_only_their_anchor(domain_name, seed_name):
  source = seed_harnesses.source(seed_name)
  options = edit_library.edit_options(source, domain_name)
  assert {option[0] for option in options} == EXPECTED_MECHANISMS[(domain_name, seed_name)]
  before = _constants(source)
  for mechanism, blocks, hypothesis, _, new_source in options:
    result = patches.apply_proposal(source, blocks)
    assert result.ok and result.source == new_source, mechanism
    assert static_checks.check_harness(new_source) == [], mechanism
    assert hypothesis.strip()
    after = _constants(new_source)
    changed = {name for name in before if before[name] != after.get(name)}
    if mechanism in CONSTANTS:
      assert changed == {CONSTANTS[mechanism]}, (mechanism, changed)
    else:   # verify_then_retry adds statements to run(), no constant
      assert changed == set() and new_source.count("llm.chat(") == source.count("llm.chat(") + 1
  assert len({option[4] for option in options}) == len(options)


def _docqa_searching(prompt):
  return "<search>total receipts customs</search> no answer yet"


def _toolflow_listing(prompt):
  return '<call>inbox_search {"query": ""}</call>'


@pytest.mark.parametrize("domain_name,seed_name,behaviour", [
    ("docqa", "docqa_compact", _docqa_searching),
    ("toolflow", "toolflow_compact", _toolflow_listing)])
def test_every_compact_edit_changes_what_an_episode_does(domain_name, seed_name, behaviour):
  sizes = {"weight": 2, "harness": 2, "validation": 2, "test": 2}
  extra = {"num_issues": 2} if domain_name == "docqa" else {"tasks_per_domain": 3}
  domain = tasks.get_domain(domain_name, seed_harness=seed_name, split_sizes=sizes, **extra)
  instance = domain.splits()["harness"][0]
  seed = Harness(seed_harnesses.source(seed_name))
  options = edit_library.edit_options(seed.source, domain_name)
  tokenizer = load_tokenizer("byte")
  with HarnessRuntime(ScriptedBackend(tokenizer, behaviour), tokenizer, num_workers=2,
                      timeout_seconds=30) as runtime:
    harnesses = [seed] + [Harness(option[4]) for option in options]
    futures = [runtime.submit(harness, tasks.make_episode(
        domain, instance, SamplingParams(max_tokens=256, seed=1))) for harness in harnesses]
    trajectories = [future.result() for future in futures]
  assert [t.outcome for t in trajectories] == ["ok"] * len(harnesses), [
      t.error for t in trajectories if not t.ok]

  def signature(trajectory):
    return ([repr(call.messages) for call in trajectory.calls],
            [(event.name, repr(event.arguments)) for event in trajectory.tool_events])
  reference = signature(trajectories[0])
  assert len(trajectories[0].calls) == _constants(seed.source)["MAX_TURNS"]
  unchanged = [option[0] for option, trajectory in zip(options, trajectories[1:])
               if signature(trajectory) == reference]
  assert unchanged == []


# ---- The smoke variants end to end -------------------------------------------------------


def _rows(path):
  with open(path) as file:
    return [json.loads(line) for line in file if line.strip()]


def _start_smoke(domain_name, method, workdir, log_path):
  env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
  with open(log_path, "w") as log:   # the child keeps its own copy of the descriptor
    return subprocess.Popen(
        [sys.executable, "-m", "whale_jax.main",
         f"--config=configs/vace.py:{domain_name},smoke,{method}", f"--workdir={workdir}",
         "--progress=false"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)


@pytest.mark.slow
@pytest.mark.parametrize("domain_name", ["docqa", "toolflow"])
def test_smoke_methods_run_end_to_end_with_gate_decisions_logged(domain_name, tmp_path):
  """Methods of the smoke variant through `python -m whale_jax.main` (three at a time), each
  run directory checked; the methods table is printed and written to table.md.

  Which methods: WHALE_JAX_VACE_SMOKE_METHODS, comma-separated (default "vace", what CI runs;
  "all" runs the six methods, about 12 CPU-minutes for both domains, for the methods table).
  The other schedules' invariants are also guarded in CI by tests/algorithms/test_vace_schedules.py.
  """
  chosen = os.environ.get("WHALE_JAX_VACE_SMOKE_METHODS", "vace")
  methods = list(METHOD_RECIPES) if chosen == "all" else chosen.split(",")
  unknown = sorted(set(methods) - set(METHOD_RECIPES))
  assert not unknown, f"WHALE_JAX_VACE_SMOKE_METHODS: unknown methods {unknown}"
  selected = list(methods)
  running, summaries = {}, {}
  while methods or running:
    while methods and len(running) < 3:
      method = methods.pop(0)
      running[method] = _start_smoke(domain_name, method, tmp_path / method,
                                     tmp_path / f"{method}.log")
    method, process = next(iter(running.items()))
    process.wait(timeout=1800)
    del running[method]
    assert process.returncode == 0, (method, (tmp_path / f"{method}.log").read_text()[-3000:])
  for method in selected:
    config = vace.get_config(f"{domain_name},smoke,{method}")
    summaries[method] = check_method_run(tmp_path / method, config, method)
  table = algorithms_vace.method_table(summaries)
  (tmp_path / "table.md").write_text(table + "\n")
  print(f"\n{domain_name} smoke methods:\n{table}")
  for method, summary in summaries.items():
    assert f"| {method} | {summary['final_test_mean']:.3f} |" in table


def check_method_run(workdir, config, method):
  """Checks the run directory of one method; returns its summary."""
  workdir = pathlib.Path(workdir)
  summary = json.loads((workdir / "summary.json").read_text())
  metrics = _rows(workdir / "metrics.jsonl")
  weight_rows = [r for r in metrics if r["phase"] == "weight"]
  decisions = (_rows(workdir / "gate_decisions.jsonl")
               if (workdir / "gate_decisions.jsonl").exists() else [])
  cycles = config.vace.num_cycles
  expected_steps = {"vace": cycles * config.vace.block_steps, "whale_style": cycles * config.vace.block_steps,
                    "rl_only": cycles * config.vace.block_steps, "harness_only": 0, "sia": cycles * config.vace.block_steps,
                    "static": 0}[method]
  assert len(weight_rows) == summary["weight_steps"] == expected_steps, method
  assert {r["kind"] for r in weight_rows} <= {"grpo"}
  # whale_style runs the gate too (its decisions logged, every candidate adopted).
  assert len(decisions) == (cycles if method in ("vace", "harness_only", "sia", "whale_style")
                            else 0)
  if method == "whale_style":
    assert all(d["adopted"] for d in summary["gate_decisions"])
  if method in ("harness_only", "sia"):   # gated at the initial weights
    assert {row["weights_id"] for row in decisions} == {"solver@0"}, method
  if method == "harness_only":
    assert summary["counts"]["weight"] == 0
  if method == "vace":
    check_vace_run(workdir, config)
  if method in ("vace", "harness_only", "sia", "whale_style", "rl_only"):
    # The final test evaluation is of the pair with the best validation mean, the initial
    # pair among the candidates.
    chosen = summary["selected_by_validation"]
    assert summary["pairs"][0]["label"] == "initial"
    assert summary["pairs"][0]["weights_id"] == "solver@0"
    assert chosen["validation_mean"] == max(p["validation_mean"] for p in summary["pairs"])
    episodes_dir = workdir / "test_trajectories"
    last = trajectory_lib.read_records(episodes_dir / sorted(os.listdir(episodes_dir))[-1])
    assert {(r["weights_id"], r["harness_hash"]) for r in last} == {
        (chosen["weights_id"], chosen["harness_hash"])}, method
  behaviour = summary["final_behaviour"]
  assert behaviour["num_episodes"] == (vace.split_totals(config.domain)["test"] *
                                       config.loop.eval_num_samples)
  names = (("documents_opened_per_episode", "tables_opened_per_episode")
           if config.domain.name == "docqa" else
           ("tool_call_validity_rate", "all_assertions_passed_rate"))
  for name in names + ("mean_turns",):
    assert name in behaviour, (method, name)
  return summary


def check_vace_run(workdir, config):
  """What a finished VACE run directory must hold (also usable on a run made by hand)."""
  workdir = pathlib.Path(workdir)
  # The gate's own log: one decision per cycle (the edit library always has a candidate),
  # both means over the whole validation split, each at a newer checkpoint, and the strict
  # rule (accept only when the candidate's mean is higher) checked by hand.
  decisions = _rows(workdir / "gate_decisions.jsonl")
  assert len(decisions) == config.vace.num_cycles
  for row in decisions:
    assert row["n"] == vace.split_totals(config.domain)["validation"]
    assert 0.0 <= row["incumbent_mean"] <= 1.0 and 0.0 <= row["candidate_mean"] <= 1.0
    assert row["accepted"] == (row["candidate_mean"] > row["incumbent_mean"])
    assert row["candidate"] != row["incumbent"]
  assert len({row["weights_id"] for row in decisions}) == len(decisions)
  metrics = _rows(workdir / "metrics.jsonl")
  gate_rows = [r for r in metrics if "gate_accepted" in r]
  assert [(r["incumbent_validation"], r["candidate_validation"]) for r in gate_rows] == [
      (r["incumbent_mean"], r["candidate_mean"]) for r in decisions]
  weight_rows = [r for r in metrics if r["phase"] == "weight"]
  assert len(weight_rows) == config.vace.num_cycles * config.vace.block_steps
  assert {r["kind"] for r in weight_rows} == {"grpo"}
  test_rows = [r for r in metrics if r["phase"] == "evaluation"]
  assert len(test_rows) >= 2 and all(0.0 <= r["test_mean"] <= 1.0 for r in test_rows)
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["final_test_mean"] == test_rows[-1]["test_mean"]
  assert len(summary["final_per_task"]) == vace.split_totals(config.domain)["test"]
  assert [d["accepted"] for d in summary["gate_decisions"]] == [r["accepted"]
                                                                for r in decisions]
  chosen = summary["selected_by_validation"]
  validation_means = [r["candidate_mean"] if r["accepted"] else r["incumbent_mean"]
                      for r in decisions]
  assert [p["validation_mean"] for p in summary["pairs"][1:]] == validation_means
  assert chosen["validation_mean"] == max(p["validation_mean"] for p in summary["pairs"])
