r"""Cheap probes of the demo world: harness variants scored at given weights, before and after
a few RSFT steps under one of them, on a few questions.

  python bench/demo_probe.py --solver=runs/solver_narrow/solver --max_questions=96 \
      --harnesses=h0,MAX_TURNS=3,MAX_DOC_TOKENS=60,MAX_TURNS=3+MAX_DOC_TOKENS=60,TOPK=3
  python bench/demo_probe.py --harnesses=h0,MAX_TURNS=3+MAX_DOC_TOKENS=60 \
      --train_harnesses=h0,MAX_TURNS=3+MAX_DOC_TOKENS=60 --rsft_steps=4

A harness is "h0" (the domain's seed harness) or edits of it joined by "+", applied in order:
"NAME=value" sets a module-level constant of the harness (MAX_TURNS, TOPK, MAX_DOC_TOKENS),
and "mechanism" or "mechanism#i" takes the i-th option (default 0) of that mechanism in the
offline edit library (whale_jax.search.edit_library: query_rewrite, retrieve_first,
verify_then_retry, ...). Every harness is scored on the same questions (the first
--max_questions of --split) with the same episode seeds as the demo's test evaluation
(rollouts.grouped.collect with seed key ("test",)), config.loop.eval_num_samples samples each,
so the rows are paired; each row prints its paired difference from the first harness. With
--rsft_steps, for each harness of --train_harnesses in turn, that many online RSFT steps
(loop.rsft_step, the demo's weight step) run from the starting weights under it (each arm
from the same weights, prompts and episode seeds), and every harness is scored again: a
(weights x harness) table, followed by each arm's paired difference from the starting weights
under each harness; --out writes every row's per-question means as JSON.

The config is configs/demo.py (or --config) with --override key=value pairs; --solver points
its model and tokenizer at another solver directory (what configs/embedded_solver.py writes
to workdir/solver).
"""
import os
import re
import shutil
import sys
import tempfile

from absl import app
from absl import flags
import numpy as np

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("config", "configs/demo.py", "The demo config (with its :args).")
  flags.DEFINE_multi_string("override", [], "key=value config overrides.")
  flags.DEFINE_string("solver", "", "A solver directory (default: the config's model).")
  flags.DEFINE_list("harnesses", ["h0"], "Harness specs (see the module docstring).")
  flags.DEFINE_string("split", "test", "The split whose first questions are scored.")
  flags.DEFINE_integer("max_questions", 96, "Questions scored per harness (0: the split).")
  flags.DEFINE_list("train_harnesses", [], "Harness specs to run the RSFT steps under, each "
                    "from the starting weights.")
  flags.DEFINE_integer("rsft_steps", 0, "Online RSFT steps of each training arm.")
  flags.DEFINE_string("out", "", "Where to write the per-question means (JSON), if set.")


def build_harness(spec, seed_source, domain_name):
  """The source of a harness spec (see the module docstring)."""
  from whale_jax.search import edit_library  # pylint: disable=import-outside-toplevel
  source = seed_source
  if spec == "h0":
    return source
  for edit in spec.split("+"):
    name, separator, value = edit.partition("=")
    if separator:
      pattern = re.compile(rf"^{re.escape(name)} = .*$", re.MULTILINE)
      if not pattern.search(source):
        raise ValueError(f"--harnesses: {edit!r}: the harness has no constant {name}.")
      source = pattern.sub(f"{name} = {value}", source, count=1)
      continue
    mechanism, _, index = edit.partition("#")
    options = [option for option in edit_library.edit_options(source, domain_name)
               if option[0] == mechanism]
    index = int(index or 0)
    if index >= len(options):
      raise ValueError(f"--harnesses: {edit!r}: the edit library has {len(options)} option(s) "
                       f"of mechanism {mechanism!r} for this harness.")
    source = options[index][4]
  return source


def main(argv):
  del argv
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import demo_pairs  # pylint: disable=import-outside-toplevel
  from whale_jax import atomic_files  # pylint: disable=import-outside-toplevel
  from whale_jax.algorithms import builders  # pylint: disable=import-outside-toplevel
  from whale_jax.algorithms import loop  # pylint: disable=import-outside-toplevel
  from whale_jax.harness import Harness  # pylint: disable=import-outside-toplevel
  from whale_jax.rollouts import grouped  # pylint: disable=import-outside-toplevel
  config = demo_pairs.load_config(FLAGS.config, FLAGS.override)
  if FLAGS.solver:
    config.model = dict(source="hf", path=FLAGS.solver)
    config.tokenizer = FLAGS.solver
  if FLAGS.rsft_steps and not FLAGS.train_harnesses:
    raise ValueError("--rsft_steps needs --train_harnesses (harness specs, e.g. h0).")
  import jax  # pylint: disable=import-outside-toplevel
  scratch = tempfile.mkdtemp(prefix="demo_probe_")
  run = builders.build_run(config, scratch, show_progress=False)
  try:
    seed_source = run.domain.seed_harness
    specs = list(FLAGS.harnesses)
    harnesses = {spec: Harness(build_harness(spec, seed_source, run.domain.name))
                 for spec in specs}
    instances = run.splits[FLAGS.split]
    if FLAGS.max_questions:
      instances = instances[:FLAGS.max_questions]

    results = {}

    def score_all(stage):
      first = None
      for spec, harness in harnesses.items():
        batch = grouped.collect(run.runtime, run.domain, harness, instances,
                                run.eval_sampling, run.loop.eval_num_samples, ("test",),
                                run.loop.seed)
        per_task = batch.per_instance_mean()
        results[f"{stage}/{spec}"] = per_task
        first = first or per_task
        mean, error, count = demo_pairs.paired(per_task, first)
        print(f"{stage:>10} | {spec:<48} | mean@{run.loop.eval_num_samples} "
              f"{np.mean(list(per_task.values())):.3f} | vs {specs[0]}: "
              f"{100 * mean:+.1f} (SE {100 * error:.1f}, n={count})", flush=True)

    score_all("start")
    if not FLAGS.rsft_steps:
      return
    # The train step donates its input state: keep a copy of the starting one.
    start = jax.tree.map(lambda x: jax.device_put(np.array(x), x.sharding), run.policy.state)
    for arm, spec in enumerate(FLAGS.train_harnesses):
      if arm:
        run.policy.set_state(jax.tree.map(lambda x: jax.device_put(np.array(x), x.sharding),
                                          start))
      run.state = loop.LoopState(incumbent=seed_source)
      train = Harness(build_harness(spec, seed_source, run.domain.name))
      for step in range(FLAGS.rsft_steps):
        metrics = loop.rsft_step(run, train)
        print(f"rsft step {step + 1} under {spec}: reward {metrics['reward']:.3f}, kept "
              f"{metrics['accepted']}", flush=True)
      score_all(f"rsft@{arm}")
    for arm, train_spec in enumerate(FLAGS.train_harnesses):
      for spec in specs:
        mean, error, count = demo_pairs.paired(results[f"rsft@{arm}/{spec}"],
                                               results[f"start/{spec}"])
        print(f"trained under {train_spec}, scored under {spec}: {100 * mean:+.1f} points "
              f"from the start (paired SE {100 * error:.1f}, n={count})", flush=True)
  finally:
    if FLAGS.out and results:
      atomic_files.write_json(FLAGS.out, results)
    demo_pairs.close(run)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
  define_flags()
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  app.run(main)
