r"""Sampler throughput and memory: whale_jax against transformers `generate`, same checkpoint.

  python bench/sampler_throughput.py --json_out=sampler.json   # 12 rows, ~25 min
  python bench/sampler_throughput.py --models=3m --batch_sizes=1,8 --repeats=1   # ~2 min
  python bench/sampler_throughput.py --models=small,large --sampler_settings=explicit \
      --min_prompt_length=64 --regimes=fresh          # the older docs/benchmarks.md tables

For each Qwen3 config (random weights saved once as a Hugging Face checkpoint and loaded by
both libraries), batch size and prompt regime, whale_jax and transformers each run in a fresh
process of their own (this script with --worker=whale / --worker=transformers), alternating
which goes first. A worker loads the checkpoint, makes one warm-up call (whale_jax compiles
there) and --repeats timed calls through the public API with its defaults:
  whale_jax     Sampler(config, params).generate(prompts, SamplingParams(max_tokens=64,
                seed=call, ignore_eos=True)): no engine settings (--sampler_settings=defaults);
  transformers  AutoModelForCausalLM.from_pretrained(...).generate(left-padded prompts,
                do_sample=True, temperature=1, top_k=0, top_p=1, min_new_tokens=64), at each
                of --torch_threads in turn; the faster median is the reference.
Both sample at temperature 1 from the full distribution (no top-k/top-p) and generate exactly
64 new tokens (ignore_eos / min_new_tokens) from random prompts of 32-64 tokens, the same
prompts for both libraries (drawn from the call's index). Prompt regimes, one row each:
  fresh     new prompts for every call: the prefix cache has nothing to serve;
  repeated  the same prompts for every call (warm-up included): whale_jax's prefix cache may
            serve their full 16-token blocks.
Each worker reports its peak RSS (getrusage ru_maxrss: loading, compiling and generating
included), and its RSS and peak after each stage (/proc/self/status VmRSS/VmHWM; for
whale_jax also the bytes of jax.live_arrays() and of the prefix cache's block pool).

Sizes (--models): bench/shapes.py's; "3m" and "100m" by default, "small" and "large" as
the older tables in docs/benchmarks.md used. --sampler_settings=explicit
builds the Sampler as those tables did (max_slots=largest batch, steps_per_call=64).

The roofline columns (JSON only) compare achieved rates with limits measured on this machine
by a worker of their own: a large float32 matmul (FLOP/s) and a large array copy (bytes/s).
Model FLOPs per token are 2 x (layer weights + unembedding) + attention; bytes per decode
step are the weights plus the KV cache read. --agentic adds the agentic pattern (48 threads x
3 calls of mixed prompt and output lengths through Sampler.submit, against transformers
serving the same calls one at a time), also one process per library.
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["3m", "100m"], "bench/shapes.py configs: 3m, 100m, small, "
                  "large.")
flags.DEFINE_list("batch_sizes", ["1", "8", "32"], "Batch sizes.")
flags.DEFINE_list("regimes", ["fresh", "repeated"], "Prompt regimes: fresh (new prompts for "
                  "every call) and/or repeated (the same prompts for every call).")
flags.DEFINE_integer("repeats", 5, "Timed calls per worker (and per torch thread count), "
                     "after one warm-up call.")
flags.DEFINE_integer("min_prompt_length", 32, "Shortest prompt (tokens).")
flags.DEFINE_integer("max_prompt_length", 64, "Longest prompt (tokens).")
flags.DEFINE_enum("sampler_settings", "defaults", ["defaults", "explicit"], "defaults: "
                  "Sampler(config, params), no engine settings. explicit: max_slots=largest "
                  "of --batch_sizes, steps_per_call=new tokens (the older docs/benchmarks.md "
                  "tables; agentic: max_slots=64, steps_per_call=16).")
flags.DEFINE_list("torch_threads", ["1", "2"], "Thread counts tried for transformers, in "
                  "turn within its process; the fastest median is the reference.")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "whale_jax's weight and "
                  "compute dtype.")
flags.DEFINE_enum("transformers_dtype", "float32", ["float32", "bfloat16"], "transformers' "
                  "weight and compute dtype (the same checkpoint, cast on load).")
flags.DEFINE_float("pause", 1.0, "Seconds of idle before each timed call.")
flags.DEFINE_bool("roofline", True, "Measure matmul and copy limits first (a worker of their "
                  "own) for the JSON rows' matmul_fraction and bandwidth_fraction.")
flags.DEFINE_bool("agentic", False, "Also run the agentic pattern on each of --models.")
flags.DEFINE_integer("agentic_episodes", 48, "Concurrent episodes of the agentic pattern.")
flags.DEFINE_string("json_out", "", "Optional path for the results as JSON (rewritten after "
                    "each row).")
# Set by the parent for its worker processes.
flags.DEFINE_enum("worker", "", ["", "checkpoint", "limits", "whale", "transformers"],
                  "Internal: run one worker and print its result.")
flags.DEFINE_string("checkpoint", "", "Internal: the checkpoint directory of a worker.")
flags.DEFINE_string("model", "", "Internal: the worker's model (a --models name).")
flags.DEFINE_integer("batch_size", 1, "Internal: the worker's batch size.")
flags.DEFINE_string("regime", "fresh", "Internal: the worker's prompt regime, or agentic.")

NEW_TOKENS = 64
CONFIGS = shapes.CONFIGS
RESULT = "RESULT "


# ---- memory --------------------------------------------------------------------------------

def _memory(stage, **extra):
  """This process's RSS now and its peak so far (MiB), from /proc/self/status."""
  with open("/proc/self/status") as f:
    fields = dict(line.split(":", 1) for line in f if ":" in line)
  mib = lambda name: round(int(fields[name].split()[0]) / 1024, 1)  # values in kB
  return dict(stage=stage, rss_mib=mib("VmRSS"), peak_rss_mib=mib("VmHWM"), **extra)


def _peak_rss_mib():
  return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # kB on Linux


# ---- prompts, the same in every worker -----------------------------------------------------

def prompts_for(call, batch_size, vocab_size):
  """The prompts of a call: random lengths in [--min_prompt_length, --max_prompt_length] and
  ids in [3, vocab_size), drawn from (batch_size, call) only."""
  rng = np.random.default_rng([batch_size, call])
  lengths = rng.integers(FLAGS.min_prompt_length, FLAGS.max_prompt_length + 1, batch_size)
  return [rng.integers(3, vocab_size, int(length)).tolist() for length in lengths]


def call_index(regime, repeat):
  """Prompts of a worker's call (repeat 0 is the warm-up): new ones each call when fresh."""
  return repeat if regime == "fresh" else 0


def agentic_episodes(vocab_size, num_episodes, calls_per_episode=3):
  """Episodes of (prompt, new tokens) calls with mixed prompt and output lengths."""
  rng = np.random.default_rng(1)
  return [[(rng.integers(3, vocab_size, int(rng.integers(16, 200))).tolist(),
            int(rng.integers(8, 64))) for _ in range(calls_per_episode)]
          for _ in range(num_episodes)]


# ---- workers (each in its own process) -----------------------------------------------------

def checkpoint_worker():
  """Saves the random Qwen3 checkpoint of --model to --checkpoint."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  shape = {k: v for k, v in CONFIGS[FLAGS.model].items() if k != "new_tokens"}
  config = transformers.Qwen3Config(**shape, tie_word_embeddings=True, rms_norm_eps=1e-6,
                                    max_position_embeddings=4096, bos_token_id=1,
                                    eos_token_id=2, pad_token_id=0)
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
  model.save_pretrained(FLAGS.checkpoint, safe_serialization=True)
  return dict(params=sum(p.numel() for p in model.parameters()))


def limits_worker():
  """(FLOP/s of a 2048^3 float32 matmul, bytes/s of a 256 MB copy), best of 5, via XLA."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  a = jnp.ones((2048, 2048), jnp.float32)
  x = jnp.ones((64 * 1024 * 1024,), jnp.float32)
  results = []
  for function, argument, work in ((jax.jit(lambda a: a @ a), a, 2 * 2048**3),
                                   (jax.jit(lambda x: x + 1.0), x, 2 * x.nbytes)):
    function(argument).block_until_ready()
    best = float("inf")
    for _ in range(5):
      start = time.perf_counter()
      function(argument).block_until_ready()
      best = min(best, time.perf_counter() - start)
    results.append(work / best)
  return dict(matmul_flops_per_second=results[0], copy_bytes_per_second=results[1],
              jax=jax.__version__, devices=str(jax.devices()))


def _work_per_token(config, batch_size, mean_cache_length):
  """(FLOPs per generated token, bytes read per decode step), float32 weights and cache."""
  layer = config.num_params() - config.vocab_size * config.embed_dim - config.embed_dim
  unembed = config.vocab_size * config.embed_dim
  attention = 4 * config.num_layers * config.num_heads * config.head_dim * mean_cache_length
  cache = (2 * config.num_layers * batch_size * mean_cache_length * config.num_kv_heads *
           config.head_dim * 4)
  return 2 * (layer + unembed) + attention, 4 * config.num_params() + cache


def whale_worker():
  """Times Sampler(config, params).generate; RSS after each stage."""
  stages = [_memory("start (python, numpy, absl)")]
  import jax  # pylint: disable=g-import-not-at-top
  stages.append(_memory("import jax"))
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
  from whale_jax.models import hf  # pylint: disable=g-import-not-at-top
  from whale_jax.sampling import Sampler  # pylint: disable=g-import-not-at-top
  from whale_jax.sampling import SamplingParams  # pylint: disable=g-import-not-at-top

  def live_mib():
    return round(sum(x.nbytes for x in jax.live_arrays()) / 2**20, 1)

  def largest(count=8):
    """MiB of the live arrays of each (shape, dtype), the largest totals first."""
    totals = {}
    for x in jax.live_arrays():
      key = f"{x.dtype}{list(x.shape)}"
      totals[key] = totals.get(key, 0) + x.nbytes
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:count]
    return {key: round(total / 2**20, 1) for key, total in ranked}

  stages.append(_memory("import whale_jax", live_arrays_mib=live_mib()))
  config, params = hf.load_hf(FLAGS.checkpoint, dtype=FLAGS.dtype)
  jax.block_until_ready(params)
  stages.append(_memory("params on device (hf.load_hf)", live_arrays_mib=live_mib()))
  agentic = FLAGS.regime == "agentic"
  settings = {}
  if FLAGS.sampler_settings == "explicit":
    settings = (dict(max_slots=64, steps_per_call=16) if agentic else
                dict(max_slots=max(int(b) for b in FLAGS.batch_sizes),
                     steps_per_call=NEW_TOKENS))
  sampler = Sampler(config, params, **settings)
  stages.append(_memory("Sampler() built", live_arrays_mib=live_mib()))
  token_bytes = (2 * config.num_layers * config.num_kv_heads * config.head_dim *
                 np.dtype(config.compute_jnp_dtype).itemsize)
  pool_mib = lambda: round(sampler.metrics()["prefix_cache_pool_blocks"] *
                           sampler.prefix_block_size * token_bytes / 2**20, 1)

  if agentic:
    episodes = agentic_episodes(config.vocab_size, FLAGS.agentic_episodes)
    total_tokens = sum(n for episode in episodes for _, n in episode)

    def timed_call(repeat):
      import concurrent.futures  # pylint: disable=g-import-not-at-top

      def episode(index):
        for call, (prompt, new_tokens) in enumerate(episodes[index]):
          sampling = SamplingParams(max_tokens=new_tokens, seed=repeat, ignore_eos=True)
          sampler.submit(prompt, sampling, request_key=index * 100 + call).result()
      start = time.perf_counter()
      with concurrent.futures.ThreadPoolExecutor(len(episodes)) as pool:
        list(pool.map(episode, range(len(episodes))))
      return total_tokens / (time.perf_counter() - start)
  else:
    def timed_call(repeat):
      prompts = prompts_for(call_index(FLAGS.regime, repeat), FLAGS.batch_size,
                            config.vocab_size)
      sampling = SamplingParams(max_tokens=NEW_TOKENS, seed=repeat, ignore_eos=True)
      start = time.perf_counter()
      outs = sampler.generate(prompts, sampling)
      elapsed = time.perf_counter() - start
      assert all(len(out.token_ids) == NEW_TOKENS for out in outs)
      return FLAGS.batch_size * NEW_TOKENS / elapsed

  start = time.perf_counter()
  timed_call(0)  # compiles
  warmup_seconds = time.perf_counter() - start
  if agentic:
    timed_call(0)  # most of the agentic pattern's shapes compile in the first two runs
  stages.append(_memory("warm-up call (compiles)", live_arrays_mib=live_mib(),
                        prefix_cache_pool_mib=pool_mib()))
  before = sampler.metrics()
  rates = []
  for repeat in range(1, FLAGS.repeats + 1):
    time.sleep(FLAGS.pause)
    rates.append(timed_call(repeat))
  after = sampler.metrics()
  stages.append(_memory("timed calls", live_arrays_mib=live_mib(),
                        prefix_cache_pool_mib=pool_mib(), largest_live_arrays=largest()))
  sampler.close()
  flops, step_bytes = _work_per_token(
      config, FLAGS.batch_size,
      (FLAGS.min_prompt_length + FLAGS.max_prompt_length) / 2 + NEW_TOKENS / 2)
  return dict(
      rates=rates, warmup_seconds=round(warmup_seconds, 2), peak_rss_mib=_peak_rss_mib(),
      stages=stages, params=config.num_params(), flops_per_token=flops,
      bytes_per_step=step_bytes, settings=settings,
      engine=dict(max_slots=sampler.max_slots, steps_per_call=sampler.steps_per_call,
                  max_cache_length=sampler.max_cache_length,
                  batch_sizes=list(sampler.batch_sizes),
                  num_cache_lengths=len(sampler.cache_lengths),
                  prefix_cache_pool_blocks=after["prefix_cache_pool_blocks"],
                  prefix_block_bytes=sampler.prefix_block_size * token_bytes,
                  unrolled=sampler.unrolled),
      prefill_tokens_saved_while_timed=after["prefill_tokens_saved"] -
      before["prefill_tokens_saved"],
      prefill_tokens_while_timed=after["prefill_tokens"] - before["prefill_tokens"],
      compilations_total=after["compilations"],
      compilations_while_timed=after["compilations"] - before["compilations"],
      slot_occupancy=round(after["slot_occupancy"], 3),
      mean_queue_wait_seconds=round(after["mean_queue_wait_seconds"], 3))


def transformers_worker():
  """Times transformers `generate` at each of --torch_threads in turn; RSS after each stage."""
  stages = [_memory("start (python, numpy, absl)")]
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  stages.append(_memory("import torch, transformers"))
  model = transformers.AutoModelForCausalLM.from_pretrained(
      FLAGS.checkpoint, dtype=getattr(torch, FLAGS.transformers_dtype)).eval()
  stages.append(_memory("model loaded (from_pretrained)"))
  vocab_size = model.config.vocab_size

  def generate(prompts, new_tokens, seed):
    """Tokens/s of one left-padded generate call."""
    width = max(len(prompt) for prompt in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
      ids[row, width - len(prompt):] = torch.tensor(prompt)
      mask[row, width - len(prompt):] = 1
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.no_grad():
      out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                           temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0)
    elapsed = time.perf_counter() - start
    assert out.shape == (len(prompts), width + new_tokens)
    return len(prompts) * new_tokens / elapsed

  if FLAGS.regime == "agentic":
    episodes = agentic_episodes(vocab_size, FLAGS.agentic_episodes)
    total_tokens = sum(n for episode in episodes for _, n in episode)

    def timed_call(repeat):  # one call at a time
      start = time.perf_counter()
      for episode in episodes:
        for prompt, new_tokens in episode:
          generate([prompt], new_tokens, repeat)
      return total_tokens / (time.perf_counter() - start)
  else:
    def timed_call(repeat):
      return generate(prompts_for(call_index(FLAGS.regime, repeat), FLAGS.batch_size,
                                  vocab_size), NEW_TOKENS, repeat)

  threads = [int(t) for t in FLAGS.torch_threads]
  for count in threads:  # warm-up
    torch.set_num_threads(count)
    timed_call(0)
  stages.append(_memory("warm-up calls"))
  rates = {count: [] for count in threads}
  for repeat in range(1, FLAGS.repeats + 1):
    for count in threads:
      torch.set_num_threads(count)
      time.sleep(FLAGS.pause)
      rates[count].append(timed_call(repeat))
  stages.append(_memory("timed calls"))
  return dict(rates=rates, peak_rss_mib=_peak_rss_mib(), stages=stages,
              torch=torch.__version__, transformers=transformers.__version__)


WORKERS = {"checkpoint": checkpoint_worker, "limits": limits_worker, "whale": whale_worker,
           "transformers": transformers_worker}


# ---- the parent ----------------------------------------------------------------------------

def run_worker(worker, model, checkpoint="", batch_size=1, regime="fresh"):
  """Runs one worker in a fresh process; returns its result dict."""
  forwarded = ["batch_sizes", "repeats", "min_prompt_length", "max_prompt_length",
               "sampler_settings", "torch_threads", "dtype", "transformers_dtype", "pause",
               "agentic_episodes"]
  command = [sys.executable, os.path.abspath(__file__), f"--worker={worker}",
             f"--model={model}", f"--checkpoint={checkpoint}", f"--batch_size={batch_size}",
             f"--regime={regime}"]
  for name in forwarded:
    value = getattr(FLAGS, name)
    command.append(f"--{name}={','.join(value) if isinstance(value, list) else value}")
  out = subprocess.run(command, capture_output=True, text=True, check=False)
  lines = [line for line in out.stdout.splitlines() if line.startswith(RESULT)]
  if out.returncode or not lines:
    raise RuntimeError(f"worker {worker} ({model}, batch {batch_size}, {regime}) exited with "
                       f"{out.returncode}:\n{out.stderr[-4000:]}")
  return json.loads(lines[-1][len(RESULT):])


def setting_row(name, checkpoint, batch_size, regime, first, limits):
  """Both libraries' workers for one setting, `first` first; one row."""
  load_start = os.getloadavg()[0]
  results = {}
  for worker in (first, "transformers" if first == "whale" else "whale"):
    results[worker] = run_worker(worker, name, checkpoint, batch_size, regime)
  whale, reference = results["whale"], results["transformers"]
  medians = {int(t): statistics.median(r) for t, r in reference["rates"].items()}
  threads = max(medians, key=medians.get)
  whale_rate = statistics.median(whale["rates"])
  row = dict(model=name, params_millions=round(whale["params"] / 1e6, 1),
             batch_size=batch_size, regime=regime, new_tokens=NEW_TOKENS,
             prompt_lengths=[FLAGS.min_prompt_length, FLAGS.max_prompt_length],
             sampler_settings=FLAGS.sampler_settings, whale_dtype=FLAGS.dtype,
             transformers_dtype=FLAGS.transformers_dtype,
             whale_tokens_per_second=round(whale_rate, 1),
             transformers_tokens_per_second=round(medians[threads], 1),
             transformers_threads=threads, ratio=round(whale_rate / medians[threads], 2),
             whale_peak_rss_mib=whale["peak_rss_mib"],
             transformers_peak_rss_mib=reference["peak_rss_mib"],
             rss_ratio=round(whale["peak_rss_mib"] / reference["peak_rss_mib"], 2),
             load_average=[round(load_start, 1), round(os.getloadavg()[0], 1)], first=first,
             whale_runs=[round(x, 1) for x in whale["rates"]],
             transformers_runs={t: [round(x, 1) for x in runs]
                                for t, runs in reference["rates"].items()},
             whale_warmup_seconds=whale["warmup_seconds"],
             whale_engine=whale["engine"], whale_settings=whale["settings"],
             prefill_tokens_while_timed=whale["prefill_tokens_while_timed"],
             prefill_tokens_saved_while_timed=whale["prefill_tokens_saved_while_timed"],
             compilations_total=whale["compilations_total"],
             compilations_while_timed=whale["compilations_while_timed"],
             slot_occupancy=whale["slot_occupancy"],
             whale_memory_stages=whale["stages"],
             transformers_memory_stages=reference["stages"])
  if limits and regime != "agentic":
    row.update(matmul_fraction=round(whale_rate * whale["flops_per_token"] /
                                     limits["matmul_flops_per_second"], 3),
               bandwidth_fraction=round(whale_rate / batch_size * whale["bytes_per_step"] /
                                        limits["copy_bytes_per_second"], 3))
  return row


TABLE_HEADER = ("| model | batch | regime | whale_jax tok/s | transformers tok/s (threads) | "
                "ratio | whale_jax peak RSS MiB | transformers peak RSS MiB | RSS ratio | "
                "load |\n|---|---|---|---|---|---|---|---|---|---|")


def table_line(row):
  return (f"| {row['model']} | {row['batch_size']} | {row['regime']} | "
          f"{row['whale_tokens_per_second']:,.1f} | "
          f"{row['transformers_tokens_per_second']:,.1f} ({row['transformers_threads']}) | "
          f"{row['ratio']:.2f}x | {row['whale_peak_rss_mib']:,.0f} | "
          f"{row['transformers_peak_rss_mib']:,.0f} | {row['rss_ratio']:.2f}x | "
          f"{row['load_average'][0]}-{row['load_average'][1]} |")


def _emit(rows, row):
  rows.append(row)
  print(json.dumps(row), flush=True)
  if "regime" in row:
    print(table_line(row), flush=True)
  if FLAGS.json_out:  # rewritten after each row, so a cut-short run keeps what it measured
    with open(FLAGS.json_out + ".tmp", "w") as f:
      json.dump(rows, f, indent=2)
    os.replace(FLAGS.json_out + ".tmp", FLAGS.json_out)


def main(_):
  if FLAGS.worker:
    print(RESULT + json.dumps(WORKERS[FLAGS.worker]()), flush=True)
    return
  unknown = [m for m in FLAGS.models if m not in CONFIGS]
  unknown += [r for r in FLAGS.regimes if r not in ("fresh", "repeated")]
  if unknown:
    raise app.UsageError(f"Unknown --models or --regimes {unknown}: models are "
                         f"{', '.join(CONFIGS)}; regimes fresh, repeated.")
  if not 1 <= FLAGS.min_prompt_length <= FLAGS.max_prompt_length:
    raise app.UsageError("Need 1 <= --min_prompt_length <= --max_prompt_length.")
  rows = []
  limits = run_worker("limits", "") if FLAGS.roofline else {}
  _emit(rows, dict(cpus=len(os.sched_getaffinity(0)), load_average=os.getloadavg()[0],
                   sampler_settings=FLAGS.sampler_settings, repeats=FLAGS.repeats,
                   torch_threads=FLAGS.torch_threads, **limits))
  order = 0
  for name in FLAGS.models:
    with tempfile.TemporaryDirectory() as directory:
      run_worker("checkpoint", name, directory)
      settings = [(int(b), regime) for b in FLAGS.batch_sizes for regime in FLAGS.regimes]
      settings += [(1, "agentic")] if FLAGS.agentic else []
      for batch_size, regime in settings:
        first = "whale" if order % 2 == 0 else "transformers"  # a drift in load hits both
        order += 1
        _emit(rows, setting_row(name, directory, batch_size, regime, first, limits))
  print("\n" + TABLE_HEADER)
  for row in rows:
    if "regime" in row:
      print(table_line(row))


if __name__ == "__main__":
  app.run(main)
