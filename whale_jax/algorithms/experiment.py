"""From an experiment config to a running recipe: model, tokenizer, domain, policy, runtime.

  summary = experiment.run(config, workdir)     # what `python -m whale_jax.main` calls

Config sections (see configs/*.py for complete examples):
  recipe       one of RECIPES, or "compare" with config.methods = (recipe, ...) run one after
               another from the same start in workdir/<recipe>/, then tabled and plotted.
  model        source "random" (ModelConfig fields + seed), "hf" (path, dtype) or
               "embedded" (the solver shipped in whale_jax/assets/demo_solver).
  tokenizer    "byte", a tokenizer path, or "" for the model directory's own.
  domain       name + the domain builder's keyword arguments (whale_jax.tasks.get_domain).
  sampling     SamplingParams of training rollouts and harness evaluations.
  eval_sampling  overrides of sampling for test mean@k.
  training     algorithms.policy.PolicyConfig fields.
  loop         algorithms.loop.LoopConfig fields.
  whale, baseline, vace, harness_learning   the recipe's own options.
  search       proposer ("edit_library", "in_process", "openai") and its options.
  runtime      HarnessRuntime options (num_workers, timeout_seconds, memory_bytes, ...).
  mesh         {data, fsdp, tensor} sizes, and num_devices (use the first N; 0 = all).
"""
import dataclasses
import json
import os

from absl import logging
import jax
import numpy as np

from whale_jax import tasks
from whale_jax.algorithms import baselines
from whale_jax.algorithms import hosts
from whale_jax.algorithms import loop
from whale_jax.algorithms import policy as policy_lib
from whale_jax.sampling import Sampler
from whale_jax.algorithms import run_log
from whale_jax.algorithms import vace
from whale_jax.algorithms import whale
from whale_jax.harness import HarnessRuntime
from whale_jax.models import ModelConfig
from whale_jax.models import decoder
from whale_jax.models import hf
from whale_jax.parallel import distributed
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.sampling import SamplingParams
from whale_jax.search import edit_library
from whale_jax.search import model_proposer
from whale_jax.tokenization import load_tokenizer
from whale_jax.train import checkpoint as checkpoint_lib
from whale_jax.train import train_state

EMBEDDED_SOLVER = os.path.join(os.path.dirname(os.path.dirname(__file__)), "assets",
                               "demo_solver")
RECIPES = ("whale", "whale_adaptive", "fst", "vace", "ungated", "weight_only", "harness_only",
           "stagewise", "sia", "harness_learning")


def _section(config, name):
  value = config.get(name) if hasattr(config, "get") else None
  if value is None:
    return {}
  return value.to_dict() if hasattr(value, "to_dict") else dict(value)


def load_model(model_section, mesh):
  """(ModelConfig, params, model directory or None) from config.model."""
  section = dict(model_section)
  source = section.pop("source", "random")
  if source == "random":
    seed = section.pop("seed", 0)
    model_config = ModelConfig(**section)
    params = decoder.init_params(model_config, jax.random.key(seed))
    return model_config, params, None
  if source in ("hf", "embedded"):
    path = EMBEDDED_SOLVER if source == "embedded" else section.pop("path")
    if source == "embedded":
      section.pop("path", None)
    dtype = section.pop("dtype", "float32")
    model_config, params = hf.load_hf(path, dtype=dtype, mesh=mesh, **section)
    return model_config, params, path
  raise ValueError(f"config.model.source={source!r}; use 'random', 'hf' or 'embedded'.")


def load_run_tokenizer(name, model_dir):
  if name:
    return load_tokenizer(EMBEDDED_SOLVER if name == "embedded" else name)
  if model_dir is None:
    raise ValueError("config.tokenizer is empty and config.model has no directory to take a "
                     "tokenizer from; set config.tokenizer (e.g. 'byte').")
  return load_tokenizer(model_dir)


def build_proposer(search_section, policy, tokenizer):
  section = dict(search_section)
  kind = section.pop("proposer", "edit_library")
  seed = section.pop("seed", 0)
  if kind == "edit_library":
    return edit_library.EditLibraryProposer(seed=seed)
  sampling = SamplingParams(**section.pop("sampling", {"max_tokens": 1024}))
  if kind == "in_process":
    backend, proposer_tokenizer = policy.sampler, tokenizer
    if section.get("model_path"):  # a proposer checkpoint different from the solver
      # On a local mesh: on a multi-host run only host 0 proposes (algorithms/hosts.py).
      local = policy.sampler_mesh
      model_config, params = hf.load_hf(section["model_path"], mesh=local)
      proposer_tokenizer = load_tokenizer(section.get("tokenizer") or section["model_path"])
      backend = Sampler(model_config, params, tokenizer=proposer_tokenizer, mesh=local)
    return model_proposer.in_process_proposer(backend, proposer_tokenizer, sampling, seed=seed)
  if kind == "openai":
    return model_proposer.openai_proposer(section["base_url"], section["model"],
                                          api_key_env=section.get("api_key_env",
                                                                  "OPENAI_API_KEY"),
                                          sampling=sampling, seed=seed)
  raise ValueError(f"config.search.proposer={kind!r}; use 'edit_library', 'in_process' or "
                   "'openai'.")


def build_run(config, workdir, show_progress=True):
  """Builds (or, when workdir holds a checkpoint, restores) the Run of config."""
  mesh_section = _section(config, "mesh") or {"data": -1}
  num_devices = mesh_section.pop("num_devices", 0)  # 0 = all devices
  if jax.process_count() > 1 and num_devices and num_devices != jax.device_count():
    raise ValueError(f"config.mesh.num_devices={num_devices} on a run of "
                     f"{jax.process_count()} processes: a multi-host mesh spans every host's "
                     f"devices. Set config.mesh.num_devices=0 (all {jax.device_count()}).")
  mesh = mesh_lib.make_mesh(**mesh_section,
                            devices=jax.devices()[:num_devices] if num_devices else None)
  model_config, params, model_dir = load_model(_section(config, "model"), mesh)
  tokenizer = load_run_tokenizer(config.get("tokenizer", ""), model_dir)
  domain_section = _section(config, "domain")
  domain = tasks.get_domain(domain_section.pop("name"), **domain_section)
  policy = policy_lib.Policy(model_config, params, tokenizer, mesh,
                             policy_lib.PolicyConfig(**_section(config, "training")))
  runtime_options = {"allowed_imports": domain.allowed_imports, **_section(config, "runtime")}
  runtime, proposer = hosts.for_processes(
      HarnessRuntime(policy.sampler, tokenizer, **runtime_options),
      build_proposer(_section(config, "search"), policy, tokenizer))
  sampling = SamplingParams(**_section(config, "sampling"))
  eval_sampling = sampling.replace(**_section(config, "eval_sampling"))
  loop_config = loop.LoopConfig(**_section(config, "loop"))
  manager = checkpoint_lib.make_manager(os.path.join(workdir, "checkpoints"), max_to_keep=2)
  is_writer = jax.process_index() == 0
  run = loop.Run(
      workdir=workdir, loop=loop_config, policy=policy, runtime=runtime, domain=domain,
      sampling=sampling, eval_sampling=eval_sampling,
      proposer=proposer,
      log=run_log.RunLog(workdir, enabled=is_writer), counts=run_log.RolloutCounts(),
      state=loop.fresh_state(domain.seed_harness), manager=manager, tokenizer=tokenizer,
      show_progress=show_progress)
  abstract = train_state.abstract(model_config, policy.optimizer, mesh, rules.TRAIN_RULES)
  loop.restore(run, abstract)
  return run


def run_recipe(run, recipe, config):
  if recipe in ("whale", "whale_adaptive", "fst"):
    options = _section(config, "whale")
    if recipe == "whale_adaptive":
      options["adaptive"] = True
    if recipe == "fst":
      options["prompt_only"] = True
    result = whale.run_whale(run, whale.WhaleConfig(**options))
    if recipe == "fst":
      result["recipe"] = "fst"
    return result
  if recipe in ("vace", "ungated"):
    options = _section(config, "vace")
    if recipe == "ungated":
      options["gated"] = False
    return vace.run_vace(run, vace.VaceConfig(**options))
  baseline_config = baselines.BaselineConfig(**_section(config, "baseline"))
  runners = {"weight_only": baselines.run_weight_only,
             "harness_only": baselines.run_harness_only,
             "stagewise": baselines.run_stagewise, "sia": baselines.run_sia}
  if recipe in runners:
    return runners[recipe](run, baseline_config)
  if recipe == "harness_learning":
    from whale_jax.algorithms import harness_learning  # pylint: disable=g-import-not-at-top
    return harness_learning.run_harness_learning(run, config)
  raise ValueError(f"config.recipe={recipe!r}; use one of {', '.join(RECIPES)} or 'compare'.")


def run_one(config, workdir, recipe, show_progress=True):
  os.makedirs(workdir, exist_ok=True)
  run = build_run(config, workdir, show_progress)
  try:
    run.log.write_config(json.loads(config.to_json_best_effort()) if hasattr(
        config, "to_json_best_effort") else dict(config))
    if run.state["done"]:
      logging.info("%s already finished; reporting its summary.", workdir)
      return loop.summary(run, recipe)
    return run_recipe(run, recipe, config)
  finally:
    checkpoint_lib.wait_until_finished(run.manager)
    run.runtime.close()
    run.policy.close()
    run.log.close()


def run(config, workdir, show_progress=True):
  """Runs config.recipe (or each of config.methods for "compare"); returns the summary."""
  if "://" in str(workdir):
    raise ValueError(f"workdir={workdir!r} is a URL, but the run directory is written with "
                     "ordinary file calls. Mount the bucket or share on every host (e.g. "
                     "launch/tpu_pod.sh mount) and pass the mounted path.")
  if distributed.initialize() > 1:  # hosts must agree on versions and config before compiling
    distributed.preflight(
        expected_processes=int(os.environ.get("WHALE_JAX_NUM_PROCESSES", jax.process_count())),
        extra_fingerprint=config.to_json_best_effort(sort_keys=True))
  recipe = config.recipe
  if recipe == "warm_start":
    from whale_jax.algorithms import warm_start  # pylint: disable=g-import-not-at-top
    return warm_start.run(config, workdir, show_progress)
  if recipe != "compare":
    return run_one(config, workdir, recipe, show_progress)
  summaries = {}
  for method in config.methods:
    summaries[method] = run_one(config, os.path.join(workdir, method), method, show_progress)
  table = comparison_table(summaries)
  curves = {method: summary["curve"] for method, summary in summaries.items()}
  if jax.process_index() == 0:
    run_log.plot_best_so_far(curves, os.path.join(workdir, "best_so_far.png"))
    run_log.write_json_atomically(os.path.join(workdir, "summary.json"),
                                  {"methods": summaries, "table": table})
    with open(os.path.join(workdir, "table.md"), "w") as f:
      f.write(table + "\n")
  print(table)
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
