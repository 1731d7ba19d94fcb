"""From an experiment config to a finished recipe: check it, build the Run, run, summarize.

  summary = experiment.run(config, workdir)     # what `python -m whale_jax.main` calls

Config sections (see configs/*.py for complete examples; algorithms/builders.py says what each
builder makes of its section; algorithms/experiment_config.py builds the typed
ExperimentConfig they become, checked once):
  recipe       one of RECIPES, "compare" with config.methods = (recipe, ...) run one after
               another from the same start in workdir/<recipe>/, then tabled and plotted
               (workdir/report.html: the methods side by side, rewritten as each ends), or
               "warm_start" (algorithms/warm_start.py).
  model, tokenizer, domain, search, runtime, mesh    built by algorithms/builders.py.
  sampling     SamplingParams of training rollouts and harness evaluations.
  eval_sampling  overrides of sampling for test mean@k.
  training     options.PolicyConfig fields.
  loop         options.LoopConfig fields.
  whale, baseline, vace, harness_learning   the recipe's own options (options.py).

Every recipe receives resolved values (a Run and its options dataclass), never the ConfigDict.
The recipes whale_adaptive, fst, ungated, rl_only and vace_harness_only are presets of whale's
and vace's options
(experiment_config.RECIPE_PRESETS).
"""
import json
import os

from absl import logging
import jax
import numpy as np

from whale_jax import atomic_files
from whale_jax import report
from whale_jax.algorithms import baselines
from whale_jax.algorithms import builders
from whale_jax.algorithms import experiment_config
from whale_jax.algorithms import harness_learning
from whale_jax.algorithms import loop
from whale_jax.algorithms import options
from whale_jax.algorithms import sections
from whale_jax.algorithms import run_log
from whale_jax.algorithms import vace
from whale_jax.algorithms import warm_start
from whale_jax.algorithms import whale
from whale_jax.parallel import distributed
from whale_jax.train import checkpoint as checkpoint_lib

RECIPES = options.RECIPES
build_run = builders.build_run  # a name of this module, so that tests can wrap it
BASELINES = {"weight_only": baselines.run_weight_only,
             "harness_only": baselines.run_harness_only,
             "stagewise": baselines.run_stagewise, "sia": baselines.run_sia}


def run_recipe(run, recipe, experiment):
  """Runs one recipe on run with its options (experiment_config.RECIPE_PRESETS applied)."""
  experiment = experiment_config.parse(experiment, run.workdir)
  recipe_options = experiment.recipe_options(recipe)
  if recipe in experiment_config.RECIPE_PRESETS:
    family = experiment_config.RECIPE_PRESETS[recipe][0]
    result = (whale.run_whale if family == "whale" else vace.run_vace)(run, recipe_options)
    if recipe == "fst":
      result["recipe"] = "fst"
    return result
  if recipe in BASELINES:
    return BASELINES[recipe](run, recipe_options)
  if recipe == "harness_learning":
    return harness_learning.run_harness_learning(
        run, recipe_options, solver_training=experiment.training,
        domain_section=experiment.domain)
  raise ValueError(f"config.recipe={recipe!r}; use one of {', '.join(RECIPES)} or 'compare'.")


def run_one(experiment, workdir, recipe, show_progress=True):
  os.makedirs(workdir, exist_ok=True)
  run = build_run(experiment, workdir, show_progress, recipe=recipe)
  try:
    config_json = json.loads(json.dumps(experiment.source, default=repr))
    resolved = config_json.setdefault("resolved", {})
    describe = getattr(run.proposer, "config", None)
    if callable(describe):  # what the coding-agent proposers resolved (defaults, hashes)
      resolved["proposer"] = describe()
    confinement = getattr(run.runtime, "confinement", None)
    if confinement is not None:  # which bwrap confines the harnesses, and where it came from
      resolved["sandbox"] = {"bwrap": confinement.bwrap, "bwrap_source": confinement.bwrap_source,
                             "seccomp": confinement.seccomp, "missing": confinement.missing}
    run.log.write_config(config_json)
    if run.state.done:
      logging.info("%s already finished; reporting its summary.", workdir)
      return loop.summary(run, recipe)
    return run_recipe(run, recipe, experiment)
  finally:
    checkpoint_lib.wait_until_finished(run.manager)
    run.runtime.close()
    run.policy.close()
    run.log.close()


def run(config, workdir, show_progress=True):
  """Runs config.recipe (or each of config.methods for "compare"); returns the summary.

  config: an experiment_config.ExperimentConfig (main.py parses the ConfigDict before jax
    starts), or a ConfigDict, parsed here: a bad one raises ConfigError before anything is
    built or written.
  """
  experiment = experiment_config.parse(config, workdir)
  if distributed.initialize() > 1:  # hosts must agree on versions and config before compiling
    distributed.preflight(
        expected_processes=int(os.environ.get("WHALE_JAX_NUM_PROCESSES", jax.process_count())),
        extra_fingerprint=json.dumps(experiment.source, sort_keys=True, default=repr))
  recipe = experiment.recipe
  if recipe == "warm_start":
    return warm_start.run(experiment.warm_start, experiment.model or sections.ModelSection(),
                          experiment.training, workdir, show_progress)
  if recipe != "compare":
    return run_one(experiment, workdir, recipe, show_progress)
  summaries = {}
  for method in experiment.methods:
    summaries[method] = run_one(experiment, os.path.join(workdir, method), method,
                                show_progress)
    if jax.process_index() == 0:  # the methods side by side, as far as they have come
      report.try_write_report(workdir)
  table = comparison_table(summaries)
  if all(experiment_config.RECIPE_PRESETS.get(m, ("",))[0] == "vace" for m in summaries):
    table += ("\n\n" + vace.method_table(summaries) + "\n\nGate decisions:\n\n" +
              vace.gate_log_summary(summaries))
  curves = {method: summary["curve"] for method, summary in summaries.items()}
  if jax.process_index() == 0:
    run_log.plot_best_so_far(curves, os.path.join(workdir, "best_so_far.png"))
    atomic_files.write_json(os.path.join(workdir, "summary.json"),
                                  {"methods": summaries, "table": table})
    atomic_files.write_text(os.path.join(workdir, "table.md"), table + "\n")
  print(table)
  first = experiment.methods[0]
  changes = run_log.describe_changes(os.path.join(workdir, first))
  if changes:
    text = "\n".join([f"\nWhat {first} changed, and when (training rollouts so far):"] +
                     changes)
    if jax.process_index() == 0:
      atomic_files.write_text(os.path.join(workdir, "changes.md"), text + "\n")
    print(text)
  if jax.process_index() == 0:
    report.try_write_report(workdir)
  return {"methods": summaries, "table": table}


def paired_difference(per_task, other_per_task):
  """(mean, standard error, n) of per-question differences of final test means, over the
  questions both evaluated (the same questions and episode seeds: a paired comparison)."""
  shared = sorted(set(per_task) & set(other_per_task))
  if not shared:
    return None
  differences = np.array([per_task[t] - other_per_task[t] for t in shared], np.float64)
  error = differences.std(ddof=1) / np.sqrt(len(shared)) if len(shared) > 1 else float("nan")
  return float(differences.mean()), float(error), len(shared)


def comparison_table(summaries):
  """A markdown table: test mean@k (final and best) and rollouts per method; then the first
  method's paired difference in final test mean@k from each other method."""
  lines = ["| method | final test mean@k | best test mean@k | training rollouts | "
           "weight | harness | evaluation |", "|---|---|---|---|---|---|---|"]
  for method, summary in summaries.items():
    counts = summary["counts"]
    final = summary["final_test_mean"]
    best = summary["best_test_mean"]
    lines.append(f"| {method} | {final:.3f} | {best:.3f} | {summary['training_rollouts']} | "
                 f"{counts['weight']} | {counts['harness']} | {counts['evaluation']} |")
  first, *others = summaries
  for other in others:
    paired = paired_difference(summaries[first].get("final_per_task", {}),
                               summaries[other].get("final_per_task", {}))
    if paired is not None:
      mean, error, count = paired
      lines.append(f"\n{first} - {other}: {100 * mean:+.1f} points (paired standard error "
                   f"{100 * error:.1f} over {count} test questions)")
  return "\n".join(lines)
