r"""Sampler throughput: whale_jax against transformers `generate`, same checkpoint, same run.

  python bench/sampler_throughput.py                       # both models, ~10 min on 2 cores
  python bench/sampler_throughput.py --models=small --repeats=3

For each Qwen3 config (~3M and ~100M parameters, random weights saved as a Hugging Face
checkpoint and loaded by both), each batch size and each repeat, whale_jax and transformers
generate the same number of new tokens from the same random 64-token prompts, sampling at
temperature 1 with top-k/top-p off and early stopping off (ignore_eos / min_new_tokens). Runs
alternate between the two so that load from other processes hits both alike; the medians and
their ratio are reported. The agentic pattern sends many short concurrent calls of mixed
prompt and output lengths through the engine (threads = harness episodes, a few calls each)
and compares with transformers serving the same calls one at a time.

The roofline columns compare achieved rates with limits measured on this machine in the same
run: a large float32 matmul (FLOP/s) and a large array copy (bytes/s). Model FLOPs per token
are 2 x (layer weights + unembedding) + attention; bytes per decode step are the weights plus
the KV cache read.
"""
import concurrent.futures
import json
import os
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import shapes  # pylint: disable=g-import-not-at-top,wrong-import-position
from whale_jax.models import hf  # pylint: disable=g-import-not-at-top,wrong-import-position
from whale_jax.sampling import Sampler  # pylint: disable=wrong-import-position
from whale_jax.sampling import SamplingParams  # pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["small", "large"], "Which configs: small (~3M), large (~100M).")
flags.DEFINE_list("batch_sizes", ["1", "8", "32"], "Batch sizes of the fixed-batch runs.")
flags.DEFINE_integer("repeats", 3, "Timed runs per setting and library (after one warm-up).")
flags.DEFINE_integer("prompt_length", 64, "Prompt tokens.")
flags.DEFINE_bool("agentic", True, "Also run the agentic pattern (small model).")
flags.DEFINE_integer("agentic_episodes", 48, "Concurrent episodes of the agentic pattern.")
flags.DEFINE_string("json_out", "", "Optional path for the results as JSON.")
flags.DEFINE_float("pause", 1.0, "Seconds of idle before each timed fixed-batch run: torch's "
                   "OpenMP workers keep spinning on the cores for a while after a generate, "
                   "which otherwise slows the whale_jax run that follows.")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "whale_jax's weight and "
                  "compute dtype; each row states it.")
flags.DEFINE_enum("transformers_dtype", "float32", ["float32", "bfloat16"], "transformers' "
                  "weight and compute dtype (the same random checkpoint, cast); each row "
                  "states it.")
flags.DEFINE_list("torch_threads", ["1", "2"], "Thread counts tried for transformers; the "
                  "fastest median is the reference (OpenMP threads degrade badly when the "
                  "cores are shared with other work, one thread less so).")

CONFIGS = shapes.CONFIGS


def measure_limits():
  """(FLOP/s of a 2048^3 float32 matmul, bytes/s of a 256 MB copy), best of 5, via XLA."""
  a = jnp.ones((2048, 2048), jnp.float32)
  matmul = jax.jit(lambda a: a @ a)
  x = jnp.ones((64 * 1024 * 1024,), jnp.float32)
  copy = jax.jit(lambda x: x + 1.0)
  results = []
  for function, argument, work in ((matmul, a, 2 * 2048**3), (copy, x, 2 * x.nbytes)):
    function(argument).block_until_ready()
    best = float("inf")
    for _ in range(5):
      start = time.perf_counter()
      function(argument).block_until_ready()
      best = min(best, time.perf_counter() - start)
    results.append(work / best)
  return tuple(results)


def build_checkpoint(name, directory):
  shape = {k: v for k, v in CONFIGS[name].items() if k != "new_tokens"}
  config = transformers.Qwen3Config(**shape, tie_word_embeddings=True, rms_norm_eps=1e-6,
                                    max_position_embeddings=4096, bos_token_id=1,
                                    eos_token_id=2, pad_token_id=0)
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
  model.save_pretrained(directory, safe_serialization=True)
  return model.to(getattr(torch, FLAGS.transformers_dtype))


def work_per_token(config, batch_size, mean_cache_length):
  """(FLOPs per generated token, bytes read per decode step)."""
  layer = config.num_params() - config.vocab_size * config.embed_dim - config.embed_dim
  unembed = config.vocab_size * config.embed_dim
  attention = (4 * config.num_layers * config.num_heads * config.head_dim * mean_cache_length)
  flops = 2 * (layer + unembed) + attention
  cache = (2 * config.num_layers * batch_size * mean_cache_length * config.num_kv_heads *
           config.head_dim * 4)
  return flops, 4 * config.num_params() + cache


def time_whale(sampler, prompts, new_tokens, seed):
  params = SamplingParams(max_tokens=new_tokens, temperature=1.0, top_p=1.0, top_k=0, seed=seed,
                          ignore_eos=True)
  start = time.perf_counter()
  outs = sampler.generate(prompts, params)
  elapsed = time.perf_counter() - start
  assert all(len(out.token_ids) == new_tokens for out in outs)
  return len(prompts) * new_tokens / elapsed


def time_transformers(model, prompts, new_tokens, threads=None):
  if threads:
    torch.set_num_threads(threads)
  input_ids = torch.tensor(prompts)
  start = time.perf_counter()
  with torch.no_grad():
    out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                         do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                         max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                         eos_token_id=None, pad_token_id=0)
  elapsed = time.perf_counter() - start
  assert out.shape == (len(prompts), len(prompts[0]) + new_tokens)
  return len(prompts) * new_tokens / elapsed


def fixed_batches(name, model, config, params, limits, rows):
  new_tokens = CONFIGS[name]["new_tokens"]
  rng = np.random.default_rng(0)
  with Sampler(config, params, max_slots=max(int(b) for b in FLAGS.batch_sizes),
               steps_per_call=new_tokens) as sampler:
    for batch_size in (int(b) for b in FLAGS.batch_sizes):

      def fresh_prompts():  # new ones for every run: nothing for the prefix cache to reuse
        return rng.integers(3, config.vocab_size, (batch_size, FLAGS.prompt_length)).tolist()

      prompts = fresh_prompts()
      time_whale(sampler, prompts, new_tokens, seed=0)  # warm-up: compiles
      time_transformers(model, prompts, new_tokens)
      compiled = sampler.metrics()["compilations"]
      whale, reference = [], {int(t): [] for t in FLAGS.torch_threads}
      for repeat in range(FLAGS.repeats):
        for threads in reference:
          prompts = fresh_prompts()  # the same for both libraries
          time.sleep(FLAGS.pause)
          whale.append(time_whale(sampler, prompts, new_tokens, seed=len(whale) + 1))
          time.sleep(FLAGS.pause)
          reference[threads].append(time_transformers(model, prompts, new_tokens, threads))
      best_threads = max(reference, key=lambda t: statistics.median(reference[t]))
      whale_rate = statistics.median(whale)
      reference_rate = statistics.median(reference[best_threads])
      flops, step_bytes = work_per_token(config, batch_size,
                                         FLAGS.prompt_length + new_tokens / 2)
      row = dict(model=name, params_millions=round(config.num_params() / 1e6, 1),
                 batch_size=batch_size, new_tokens=new_tokens, whale_dtype=FLAGS.dtype,
                 transformers_dtype=FLAGS.transformers_dtype,
                 whale_tokens_per_second=round(whale_rate, 1),
                 transformers_tokens_per_second=round(reference_rate, 1),
                 ratio=round(whale_rate / reference_rate, 2),
                 whale_runs=[round(x, 1) for x in whale],
                 transformers_threads=best_threads,
                 transformers_runs={t: [round(x, 1) for x in runs]
                                    for t, runs in reference.items()},
                 load_average=round(os.getloadavg()[0], 1),
                 compilations_total=sampler.metrics()["compilations"],
                 compilations_while_timed=sampler.metrics()["compilations"] - compiled,
                 matmul_fraction=round(whale_rate * flops / limits[0], 3),
                 bandwidth_fraction=round(whale_rate / batch_size * step_bytes / limits[1], 3))
      _emit(rows, row)


def _emit(rows, row):
  rows.append(row)
  print(json.dumps(row), flush=True)
  if FLAGS.json_out:  # rewritten after each row, so a cut-short run keeps what it measured
    with open(FLAGS.json_out, "w") as f:
      json.dump(rows, f, indent=2)


def agentic(model, config, params, rows, num_episodes, calls_per_episode=3):
  """Episodes (threads) making a few calls each, with mixed prompt and output lengths."""
  rng = np.random.default_rng(1)
  episodes = [[(rng.integers(3, config.vocab_size, int(rng.integers(16, 200))).tolist(),
                int(rng.integers(8, 64))) for _ in range(calls_per_episode)]
              for _ in range(num_episodes)]
  total_tokens = sum(n for episode in episodes for _, n in episode)

  def run_whale(sampler, seed):
    def episode(index):
      for call, (prompt, new_tokens) in enumerate(episodes[index]):
        params = SamplingParams(max_tokens=new_tokens, temperature=1.0, seed=seed,
                                ignore_eos=True)
        sampler.submit(prompt, params, request_key=index * 100 + call).result()
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(num_episodes) as pool:
      list(pool.map(episode, range(num_episodes)))
    return total_tokens / (time.perf_counter() - start)

  def run_transformers(threads):
    start = time.perf_counter()
    for episode in episodes:
      for prompt, new_tokens in episode:
        time_transformers(model, [prompt], new_tokens, threads)
    return total_tokens / (time.perf_counter() - start)

  with Sampler(config, params, max_slots=64, steps_per_call=16) as sampler:
    run_whale(sampler, seed=0)  # warm-ups: most shapes compile here
    run_whale(sampler, seed=0)
    compiled = sampler.metrics()["compilations"]
    whale = [run_whale(sampler, seed=r + 1) for r in range(FLAGS.repeats)]
    metrics = sampler.metrics()
  reference = max((statistics.median([run_transformers(int(t))
                                      for _ in range(max(1, FLAGS.repeats - 1))]), int(t))
                  for t in FLAGS.torch_threads)
  row = dict(model="small", pattern="agentic", episodes=num_episodes,
             calls=num_episodes * calls_per_episode, generated_tokens=total_tokens,
             whale_dtype=FLAGS.dtype, transformers_dtype=FLAGS.transformers_dtype,
             whale_tokens_per_second=round(statistics.median(whale), 1),
             transformers_one_at_a_time_tokens_per_second=round(reference[0], 1),
             transformers_threads=reference[1],
             ratio=round(statistics.median(whale) / reference[0], 2),
             load_average=round(os.getloadavg()[0], 1),
             slot_occupancy=round(metrics["slot_occupancy"], 3),
             mean_queue_wait_seconds=round(metrics["mean_queue_wait_seconds"], 3),
             max_queue_wait_seconds=round(metrics["max_queue_wait_seconds"], 3),
             compilations_total=metrics["compilations"],
             compilations_while_timed=metrics["compilations"] - compiled)
  _emit(rows, row)


def main(_):
  limits = measure_limits()
  print(json.dumps(dict(matmul_gflops=round(limits[0] / 1e9, 1),
                        copy_gigabytes_per_second=round(limits[1] / 1e9, 2),
                        cpus=len(os.sched_getaffinity(0)), torch_threads=torch.get_num_threads(),
                        jax=jax.__version__, torch=torch.__version__,
                        transformers=transformers.__version__,
                        devices=str(jax.devices()))), flush=True)
  rows = [dict(matmul_flops_per_second=limits[0], copy_bytes_per_second=limits[1])]
  for name in FLAGS.models:
    with tempfile.TemporaryDirectory() as directory:
      model = build_checkpoint(name, directory)
      config, params = hf.load_hf(directory, dtype=FLAGS.dtype)
      if FLAGS.batch_sizes:
        fixed_batches(name, model, config, params, limits, rows)
      if FLAGS.agentic and name == "small":
        agentic(model, config, params, rows, FLAGS.agentic_episodes)


if __name__ == "__main__":
  app.run(main)
