"""The baselines of the seed papers, on the same Run machinery as the recipes.

  weight_only    online RSFT (or GRPO) under the seed harness for the whole budget.
  harness_only   Meta-Harness search at the initial weights for the whole budget.
  stagewise      all weight steps first, then all harness search (budget split by
                 config.baseline.weight_fraction).
  sia            Meta-Harness search first (at the initial weights, ungated), then weight
                 steps under the harness it found. VACE's gated SIA-style baseline and its
                 harness-only (gated revisions, no weight step) are vace.py's harness_first
                 and harness_only schedules.
FST (prompt-only harness search alternating with weights) is WHALE with whale.prompt_only,
and ungated alternation (WHALE-style in VACE's paper) is VACE with the gate off; see
whale.py and vace.py.

Budgets: total_weight_epochs for weight steps, search_iterations for harness search, and an
optional budget_rollouts (weight + harness rollouts) shared with the recipes they are
compared to.
"""
import functools

from whale_jax.algorithms import loop
from whale_jax.algorithms import run_log
from whale_jax.algorithms import whale


def add_behaviour(run, result):
  """result with "final_behaviour": the domain's behaviour metrics of the final test
  evaluation (the behaviour_* values of its metrics row: documents and tables opened,
  tool-call validity, assertion pass rate by kind, turns, ...), rewritten to summary.json."""
  rows = [row for row in run_log.read_metrics(run.workdir) if row.get("phase") == "evaluation"]
  prefix = "behaviour_"
  result["final_behaviour"] = {name[len(prefix):]: value for name, value in
                               (rows[-1].items() if rows else ()) if name.startswith(prefix)}
  run.log.write_summary(result)
  return result


def _step_fn(baseline_config, budget_rollouts=0):
  if baseline_config.weight_update not in ("rsft", "grpo"):
    raise ValueError(f"config.baseline.weight_update={baseline_config.weight_update!r}; use "
                     "'rsft' or 'grpo'.")
  if baseline_config.weight_update == "rsft":
    return loop.rsft_step
  return functools.partial(loop.grpo_step, budget_rollouts=budget_rollouts)  # refill rounds


def _weights(run, baseline_config, budget_rollouts):
  total_steps = loop.steps_for_epochs(run, baseline_config.total_weight_epochs)
  stop = None
  if budget_rollouts:
    stop = lambda run: not whale.weight_step_fits(run, budget_rollouts)
    total_steps = min(total_steps, run.state.phase_steps +  # what the progress bar shows
                      whale.weight_steps_that_fit(run, budget_rollouts))
  if whale.weight_step_fits(run, budget_rollouts):
    loop.weight_steps(run, loop.incumbent(run), total_steps,
                      _step_fn(baseline_config, budget_rollouts),
                      label="weights", stop=stop)


def _harness(run, baseline_config, budget_rollouts, label):
  iterations = whale.search_budget(run, baseline_config.search_iterations, budget_rollouts)
  if iterations >= 1:
    result = loop.harness_search(run, loop.incumbent(run), label, iterations=iterations)
    loop.set_incumbent(run, result.accepted)


def _stages(run, stages, recipe):
  """Runs named stages in order, resuming at run.state.phase."""
  if run.state.phase == "start":
    loop.maybe_evaluate(run, force=True)
    loop.start_phase(run, stages[0][0])
    loop.checkpoint(run)
  names = [name for name, _ in stages]
  while run.state.phase in names:
    index = names.index(run.state.phase)
    stages[index][1]()
    loop.maybe_evaluate(run)
    loop.start_phase(run, names[index + 1] if index + 1 < len(names) else "finishing")
    loop.checkpoint(run)
  return add_behaviour(run, whale.finish(run, recipe))


def run_weight_only(run, baseline_config):
  return _stages(run, [("weight", lambda: _weights(run, baseline_config,
                                                   baseline_config.budget_rollouts))],
                 "weight_only")


def run_harness_only(run, baseline_config):
  return _stages(run, [("harness", lambda: _harness(run, baseline_config,
                                                    baseline_config.budget_rollouts,
                                                    "harness_only"))], "harness_only")


def _split_budgets(baseline_config):
  if not baseline_config.budget_rollouts:
    return 0, 0
  weight_budget = int(baseline_config.budget_rollouts * baseline_config.weight_fraction)
  return weight_budget, baseline_config.budget_rollouts


def run_stagewise(run, baseline_config):
  weight_budget, total_budget = _split_budgets(baseline_config)
  return _stages(run, [("weight", lambda: _weights(run, baseline_config, weight_budget)),
                       ("harness", lambda: _harness(run, baseline_config, total_budget,
                                                    "stagewise"))], "stagewise")


def run_sia(run, baseline_config):
  weight_budget, total_budget = _split_budgets(baseline_config)
  harness_budget = total_budget - weight_budget if total_budget else 0
  return _stages(run, [("harness", lambda: _harness(run, baseline_config, harness_budget,
                                                    "sia")),
                       ("weight", lambda: _weights(run, baseline_config, total_budget))],
                 "sia")
