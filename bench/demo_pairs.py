r"""Test mean@k of (weights, harness) pairs taken from finished demo runs, on the same questions.

  python bench/demo_pairs.py --run=runs/demo                       # the 3x3 of a compare run
  python bench/demo_pairs.py --run=runs/demo --weights=start,whale --harnesses=h0,whale
  python bench/demo_pairs.py --run=runs/demo --pairs=start/whale,whale/h0
  python bench/demo_pairs.py --harness_file=h.py --max_questions=48  # the shipped solver only

Weights: "start" (the config's initial weights) or a method of the compare run in --run (its
final checkpoint, <run>/<method>/checkpoints). Harnesses: "h0" (the domain's seed harness), a
method of --run (its final incumbent, read from the same checkpoint's loop state), or
--harness_file paths. Every pair is evaluated exactly as the demo's final test evaluation is
(loop.evaluate_test: the test split, config.eval_sampling, config.loop.eval_num_samples, the
same episode seeds), so a pair's per-question scores are paired with each other and with the
runs' own final evaluations. --config (default configs/demo.py) must be the config the run
used, including the --config.* overrides it was run with (pass them after --).

Prints one row per pair (test mean@k) and, for every two pairs, nothing more: paired
differences are printed for the pairs named in --differences ("a/b-c/d", weights/harness).
Writes <out>/pairs.json with every pair's per-question means.
"""
import json
import os
import shutil
import sys
import tempfile

from absl import app
from absl import flags
import numpy as np

from whale_jax import atomic_files
from whale_jax.algorithms import builders
from whale_jax.algorithms import experiment_config
from whale_jax.algorithms import loop
from whale_jax.harness import Harness
from whale_jax.parallel import rules
from whale_jax.rollouts import grouped
from whale_jax.train import checkpoint as checkpoint_lib
from whale_jax.train import train_state

FLAGS = flags.FLAGS


def define_flags():
  """The command line's flags (defined only when run as a program, so that importing this
  module next to another program's --config flag does not clash)."""
  flags.DEFINE_string("config", "configs/demo.py", "The run's config file (with its :args).")
  flags.DEFINE_multi_string("override", [], "key=value config overrides, as the run used them "
                            "(e.g. loop.seed=1).")
  flags.DEFINE_string("run", "", "A finished compare run's workdir.")
  flags.DEFINE_list("weights", [], "start and/or methods of --run (default: start + methods).")
  flags.DEFINE_list("harnesses", [], "h0 and/or methods of --run (default: h0 + methods).")
  flags.DEFINE_multi_string("harness_file", [], "Harness source files to evaluate as well.")
  flags.DEFINE_list("pairs", [], "Only these weights/harness pairs (e.g. start/whale,whale/h0) "
                    "instead of every weights x harness combination.")
  flags.DEFINE_integer("max_questions", 0, "Evaluate only the first N test questions (0: all).")
  flags.DEFINE_list("differences", [], "Paired differences to print: weights/harness-"
                    "weights/harness, e.g. whale/whale-whale/harness_only.")
  flags.DEFINE_string("out", "", "Where pairs.json goes (default: --run, else a temp dir).")


def load_config(path, overrides):
  """The config of `path[:args]` with "key=value" overrides (values parsed as literals)."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  import ast  # pylint: disable=import-outside-toplevel
  path, _, arg = path.partition(":")
  spec = importlib.util.spec_from_file_location("pair_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config(arg)
  for override in overrides:
    key, separator, value = override.partition("=")
    if not separator:
      raise ValueError(f"--override={override!r}: write key=value, e.g. loop.seed=1.")
    try:
      value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      pass
    node = config
    *parents, leaf = key.split(".")
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return config


def checkpoint_dir(run_dir, method):
  path = os.path.join(run_dir, method, "checkpoints")
  if not os.path.isdir(path):
    raise ValueError(f"{path} does not exist: --run={run_dir!r} has no finished run of method "
                     f"{method!r} (its workdir/<method>/checkpoints).")
  return path


def build_at(config, scratch, source_checkpoints=None):
  """(Run in scratch/ at the config's initial weights, or at the weights of the newest
  checkpoint in source_checkpoints; that checkpoint's incumbent Harness, else None).

  Only the train state and the loop state's "incumbent" are read from the checkpoint (not
  the rest of the loop state), from a copy: the source directory is never written."""
  os.makedirs(scratch, exist_ok=True)
  run = builders.build_run(config, scratch, show_progress=False)
  if source_checkpoints is None:
    return run, None
  copy = os.path.join(scratch, "source_checkpoints")
  shutil.copytree(source_checkpoints, copy)
  manager = checkpoint_lib.make_manager(copy, max_to_keep=None)
  try:
    state, extra = checkpoint_lib.restore(manager, train_state.abstract(
        run.policy.model_config, run.policy.optimizer, run.policy.mesh, rules.TRAIN_RULES))
  finally:
    checkpoint_lib.close(manager)
  run.policy.set_state(state)
  return run, Harness(extra["loop"]["incumbent"], origin="incumbent")


def evaluate(run, harness, max_questions=0):
  """{question id: mean score} of harness at run's current weights, as loop.evaluate_test."""
  instances = loop.test_instances(run)
  if max_questions:
    instances = instances[:max_questions]
  batch = grouped.collect(run.runtime, run.domain, harness, instances, run.eval_sampling,
                          run.loop.eval_num_samples, ("test",), run.loop.seed)
  return batch.per_instance_mean()


def paired(per_task, other):
  """(mean difference, paired standard error, n) over the questions both evaluated."""
  shared = sorted(set(per_task) & set(other))
  differences = np.array([per_task[t] - other[t] for t in shared], np.float64)
  return float(differences.mean()), float(differences.std(ddof=1) / np.sqrt(len(shared))), len(
      shared)


def close(run):
  checkpoint_lib.wait_until_finished(run.manager)
  run.runtime.close()
  run.policy.close()
  run.log.close()


def evaluate_pairs(config, run_dir, weights, harnesses, harness_files=(), max_questions=0,
                   only=None):
  """{"weights/harness": {question id: mean}} for every pair (or only those named in only);
  see the module docstring."""
  experiment_config.parse(config, tempfile.gettempdir())
  methods = [m for m in list(weights) + list(harnesses) if m not in ("start", "h0")]
  if methods and not run_dir:
    raise ValueError(f"Methods {methods} need --run=<a finished compare run's workdir>.")
  named = {}
  scratch_root = tempfile.mkdtemp(prefix="demo_pairs_")
  try:
    incumbents = {}
    for method in set(methods):
      run, incumbents[method] = build_at(config, os.path.join(scratch_root, f"read_{method}"),
                                         checkpoint_dir(run_dir, method))
      close(run)
    for path in harness_files:
      named[os.path.basename(path)] = Harness.from_file(path)
    results = {}
    for weight in weights:
      source = None if weight == "start" else checkpoint_dir(run_dir, weight)
      run, _ = build_at(config, os.path.join(scratch_root, f"weights_{weight}"), source)
      try:
        choices = {name: Harness(run.domain.seed_harness, origin="seed") if name == "h0"
                   else incumbents[name] for name in harnesses}
        choices.update(named)
        for name, harness in choices.items():
          if only and f"{weight}/{name}" not in only:
            continue
          results[f"{weight}/{name}"] = evaluate(run, harness, max_questions)
          mean = float(np.mean(list(results[f"{weight}/{name}"].values())))
          print(f"{weight:>14} weights, {name:>14} harness: test mean@k {mean:.3f} "
                f"({harness.hash})", flush=True)
      finally:
        close(run)
    return results
  finally:
    shutil.rmtree(scratch_root, ignore_errors=True)


def main(argv):
  del argv
  config = load_config(FLAGS.config, FLAGS.override)
  methods = list(config.get("methods", ())) if FLAGS.run else []
  weights = FLAGS.weights or ["start"] + methods
  harnesses = FLAGS.harnesses or (["h0"] + methods if not FLAGS.harness_file or methods else [])
  if FLAGS.pairs:
    bad = [pair for pair in FLAGS.pairs if pair.count("/") != 1]
    if bad:
      raise ValueError(f"--pairs={','.join(bad)}: write weights/harness, e.g. start/whale.")
    weights = list(dict.fromkeys(pair.split("/")[0] for pair in FLAGS.pairs))
    harnesses = list(dict.fromkeys(pair.split("/")[1] for pair in FLAGS.pairs))
  results = evaluate_pairs(config, FLAGS.run, weights, harnesses, FLAGS.harness_file,
                           FLAGS.max_questions, only=set(FLAGS.pairs))
  for difference in FLAGS.differences:
    first, separator, second = difference.partition("-")
    if not separator or first not in results or second not in results:
      raise ValueError(f"--differences={difference!r}: write weights/harness-weights/harness "
                       f"with pairs among {sorted(results)}.")
    mean, error, count = paired(results[first], results[second])
    print(f"{first} - {second}: {100 * mean:+.1f} points (paired standard error "
          f"{100 * error:.1f} over {count} test questions)")
  out = FLAGS.out or FLAGS.run or tempfile.mkdtemp(prefix="demo_pairs_out_")
  os.makedirs(out, exist_ok=True)
  atomic_files.write_json(os.path.join(out, "pairs.json"), results)
  print(f"wrote {os.path.join(out, 'pairs.json')}")


if __name__ == "__main__":
  define_flags()
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  app.run(main)
