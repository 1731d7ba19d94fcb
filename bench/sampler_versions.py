r"""The sampler of two checkouts side by side: same checkpoints, prompts and settings, alternating.

  git worktree add --detach /tmp/before COMMIT
  python bench/sampler_versions.py --checkouts=/tmp/before,. --rounds=2     # ~20-40 min on 2 cores

Each (round, model, dtype, checkout) runs in a fresh process that imports whale_jax from that
checkout, so neither version warms the other's caches; the checkouts alternate within a round
and their order flips every round, so a change of load hits both alike. A process builds the
random Qwen3 checkpoint of `shapes.CONFIGS` (the same seed, so the same weights in
every process), loads it with `hf.load_hf`, and times `Sampler.generate` as
bench/sampler_throughput.py does (64-token prompts, 64 new tokens, temperature 1, ignore_eos,
fresh prompts for every timed call, one second of idle before it), at each batch size, after
one warm-up call. transformers is not run: this compares whale_jax with itself. The table
gives each checkout's median tokens/s over all rounds' timed calls and their ratio.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

flags.DEFINE_list("checkouts", [], "Two (or more) checkout paths; the first is the baseline.")
flags.DEFINE_list("models", ["small", "large"], "shapes.CONFIGS names.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "whale_jax weight dtypes.")
flags.DEFINE_list("batch_sizes", ["1", "8", "32"], "Batch sizes.")
flags.DEFINE_integer("repeats", 5, "Timed calls per batch size and process.")
flags.DEFINE_integer("rounds", 2, "Rounds over every (model, dtype, checkout).")
flags.DEFINE_string("json_out", "", "Optional path for every process's measurements.")
flags.DEFINE_string("child", "", "Internal: run one process's measurement for this checkout.")
flags.DEFINE_string("model", "small", "Internal (--child): the model.")
flags.DEFINE_string("dtype", "float32", "Internal (--child): the dtype.")
FLAGS = flags.FLAGS

PROMPT_LENGTH = 64


def _child():
  sys.path.insert(0, os.path.abspath(FLAGS.child))
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  import whale_jax  # pylint: disable=g-import-not-at-top
  from whale_jax.models import hf  # pylint: disable=g-import-not-at-top
  from whale_jax.sampling import Sampler  # pylint: disable=g-import-not-at-top
  from whale_jax.sampling import SamplingParams  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.dirname(__file__))
  import shapes  # pylint: disable=g-import-not-at-top

  shape = dict(shapes.CONFIGS[FLAGS.model])
  new_tokens = shape.pop("new_tokens")
  with tempfile.TemporaryDirectory() as directory:
    torch.manual_seed(0)
    reference = transformers.Qwen3Config(**shape, tie_word_embeddings=True, rms_norm_eps=1e-6,
                                         max_position_embeddings=4096, bos_token_id=1,
                                         eos_token_id=2, pad_token_id=0)
    transformers.AutoModelForCausalLM.from_config(reference).save_pretrained(directory)
    config, params = hf.load_hf(directory, dtype=FLAGS.dtype)
  batch_sizes = [int(b) for b in FLAGS.batch_sizes]
  rng = np.random.default_rng(0)
  rates = {}
  with Sampler(config, params, max_slots=max(batch_sizes), steps_per_call=new_tokens) as sampler:
    for batch_size in batch_sizes:
      runs = []
      for call in range(FLAGS.repeats + 1):
        prompts = rng.integers(3, config.vocab_size, (batch_size, PROMPT_LENGTH)).tolist()
        sampling = SamplingParams(max_tokens=new_tokens, temperature=1.0, top_p=1.0, top_k=0,
                                  seed=call, ignore_eos=True)
        time.sleep(1.0)
        start = time.perf_counter()
        outs = sampler.generate(prompts, sampling)
        elapsed = time.perf_counter() - start
        assert all(len(out.token_ids) == new_tokens for out in outs)
        if call:  # the first call compiles
          runs.append(batch_size * new_tokens / elapsed)
      rates[str(batch_size)] = runs
  print("RESULT " + json.dumps(dict(whale_jax=os.path.dirname(whale_jax.__file__),
                                    rates=rates, load_average=os.getloadavg()[0])))


def main(_):
  if FLAGS.child:
    _child()
    return
  if len(FLAGS.checkouts) < 2:
    raise app.UsageError("--checkouts needs two paths, e.g. --checkouts=/tmp/before,.")
  checkouts = [os.path.abspath(c) for c in FLAGS.checkouts]
  records = []
  for round_index in range(FLAGS.rounds):
    order = checkouts if round_index % 2 == 0 else checkouts[::-1]
    for model in FLAGS.models:
      for dtype in FLAGS.dtypes:
        for checkout in order:
          command = [sys.executable, __file__, f"--child={checkout}", f"--model={model}",
                     f"--dtype={dtype}", f"--batch_sizes={','.join(FLAGS.batch_sizes)}",
                     f"--repeats={FLAGS.repeats}"]
          out = subprocess.run(command, capture_output=True, text=True, check=False)
          lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
          if out.returncode or not lines:
            raise RuntimeError(f"{checkout} {model} {dtype} failed:\n{out.stderr[-3000:]}")
          result = json.loads(lines[-1][len("RESULT "):])
          if os.path.dirname(result["whale_jax"]) != checkout:
            raise RuntimeError(f"imported {result['whale_jax']}, not {checkout}'s whale_jax")
          records.append(dict(round=round_index, model=model, dtype=dtype, checkout=checkout,
                              **result))
          print(json.dumps(records[-1]), flush=True)
          if FLAGS.json_out:
            with open(FLAGS.json_out, "w") as f:
              json.dump(records, f, indent=1)
  print(f"| model | dtype | batch | {' | '.join(checkouts)} | ratio |")
  for model in FLAGS.models:
    for dtype in FLAGS.dtypes:
      for batch in FLAGS.batch_sizes:
        medians = [statistics.median(
            [rate for r in records if (r["model"], r["dtype"], r["checkout"]) == (model, dtype, c)
             for rate in r["rates"][batch]]) for c in checkouts]
        print(f"| {model} | {dtype} | {batch} | {' | '.join(f'{m:,.1f}' for m in medians)} | "
              f"{medians[-1] / medians[0]:.2f} |")


if __name__ == "__main__":
  app.run(main)
