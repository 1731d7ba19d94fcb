r"""Training throughput: whale_jax's train step beside transformers + torch, same machine and run.

  python bench/train_throughput.py --models=3m,100m --shapes=4x128,2x512   # the issue's 4 rows
  python bench/train_throughput.py                      # ~3.7M and ~100M Qwen3, T = 512
  python bench/train_throughput.py --models=small --repeats=3
  python bench/train_throughput.py --attention   # ~100M: blockwise vs dense, T = 512 and 4096

For each model a random Qwen3 checkpoint is written with transformers and loaded into
whale_jax with hf.load_hf, so both frameworks train the very same weights on the very same
batch with the same loss (token-mean NLL over the loss mask), AdamW and gradient clipping.
By default each framework is timed in fresh processes of its own (--rounds of them per
framework, in A B B A order so that a drift in the machine's speed hits both alike), as either
is used; each reports the median over all its timed steps. --isolation=steps times both in one
process, their steps alternating: each then also pays for the other's threads and memory
(bench_model says how).

MFU = model FLOPs per second / peak FLOPs per second. Model FLOPs per token follow the PaLM
convention, 6 * (matmul parameters, the output projection included) + 12 * L * N * H * T
for attention (T = sequence length), whatever the framework actually computes. The peak is
measured here, in this run: the faster of a large jnp.dot and torch.mm in the compute dtype
(--dtype=bfloat16 runs matmuls in bfloat16 in both frameworks, torch under autocast, with
float32 parameters and optimizer state).

Each step is timed twice: wall-clock seconds, and CPU seconds of this process (all threads).
When other processes share the cores, wall time mostly measures their load; CPU-MFU
(model FLOPs per CPU second / the matmul's FLOPs per CPU second) and the CPU-time ratio are
the steadier comparison. Threads that spin while waiting count as CPU time, so CPU time is
an upper bound on the work done.

--attention compares whale_jax with itself: the same model (--attention_models, one per
length; default the ~100M "base") and batch (--attention_batch_sizes, default one row), the
train step with attention="dense" and attention="blockwise", at each of --attention_lengths.
Per implementation the step is compiled ahead of the first step (compile time and XLA's
temporaries reported apart), stepped once to warm up, then timed for --attention_repeats
steps, the two alternating step by step; each timed step also records the process's peak RSS
during it (sampled every 10 ms) above its RSS before it. Rows longer than 1024 tokens use
remat="full" in both (dense attention's saved [N, T, T] probabilities of every layer would
not fit this machine's memory otherwise). It prints the load average beside the ratios. On CPU
the train step compiles blockwise attention in the platform's 256-long blocks
(train/platform_tuning.py); the table in docs/benchmarks.md predates that (512).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers

from whale_jax.models import hf
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.train import optimizer as optimizer_lib
from whale_jax.train import rsft
from whale_jax.train import step as step_lib
from whale_jax.train import train_state

# Qwen3 shapes (q/k norm, tied embeddings, grouped-query attention). "3m" and "100m" are the
# issue's sizes, timed at --shapes=4x128,2x512; "small" and "base" the older table's.
MODELS = {
    "3m": dict(vocab_size=512, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
               num_attention_heads=8, num_key_value_heads=4, head_dim=32),
    "100m": dict(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                 num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                 head_dim=64),
    "small": dict(vocab_size=8192, hidden_size=192, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=6, num_key_value_heads=2, head_dim=32),
    "base": dict(vocab_size=32768, hidden_size=768, intermediate_size=2048,
                 num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                 head_dim=64),
}
LEARNING_RATE, WEIGHT_DECAY, MAX_GRAD_NORM = 1e-4, 0.01, 1.0


def timed(function):
  """(wall seconds, CPU seconds of this process over all its threads) of one call."""
  wall, cpu = time.perf_counter(), time.process_time()
  function()
  return time.perf_counter() - wall, time.process_time() - cpu


def measure_peak_flops(size, repeats, dtype="float32"):
  """[size, size] @ [size, size] in dtype in jax and in torch: {name: (FLOP per wall second,
  FLOP per CPU second)}, medians over repeats."""
  rng = np.random.default_rng(0)
  a, b = (rng.normal(size=(size, size)).astype(np.float32) for _ in range(2))
  flops = 2 * size**3
  dot = jax.jit(jnp.dot)
  a_jax, b_jax = jnp.asarray(a, dtype), jnp.asarray(b, dtype)
  a_torch, b_torch = (torch.from_numpy(x).to(getattr(torch, dtype)) for x in (a, b))
  calls = {"jnp.dot": lambda: dot(a_jax, b_jax).block_until_ready(),
           "torch.mm": lambda: torch.mm(a_torch, b_torch)}
  times = {name: [] for name in calls}
  for call in calls.values():
    call()
  for _ in range(repeats):
    for name, call in calls.items():
      times[name].append(timed(call))
  return {name: (flops / statistics.median(t[0] for t in name_times),
                 flops / statistics.median(t[1] for t in name_times))
          for name, name_times in times.items()}


def model_flops_per_token(config, seq_len):
  matmul_params = config.num_layers * (
      config.embed_dim * config.head_dim * (2 * config.num_heads + 2 * config.num_kv_heads)
      + 3 * config.embed_dim * config.mlp_dim) + config.embed_dim * config.vocab_size
  attention = 12 * config.num_layers * config.num_heads * config.head_dim * seq_len
  return 6 * matmul_params + attention


def make_batch(vocab_size, batch_size, seq_len, prompt_len, seed=0):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, vocab_size, size=(batch_size, seq_len)).astype(np.int32)
  loss_mask = np.zeros((batch_size, seq_len), np.float32)
  loss_mask[:, prompt_len:] = 1
  return {"tokens": tokens,
          "positions": np.broadcast_to(np.arange(seq_len, dtype=np.int32), tokens.shape).copy(),
          "segment_ids": np.ones_like(tokens), "loss_mask": loss_mask}


def torch_step_fn(model, batch, dtype):
  optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.999),
                                eps=1e-8, weight_decay=WEIGHT_DECAY)
  tokens = torch.from_numpy(batch["tokens"]).long()
  loss_mask = torch.from_numpy(batch["loss_mask"][:, 1:])
  num_targets = loss_mask.sum()

  def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
      logits = model(input_ids=tokens).logits
    logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    target = torch.gather(logprobs, 2, tokens[:, 1:, None]).squeeze(-1)
    loss = -(target * loss_mask).sum() / num_targets
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()

  return step


def _jax_train_setup(config, params, batch):
  """(train state, train step, placed batch) of the RSFT step on one device."""
  optimizer = optimizer_lib.make(optimizer_lib.OptimizerConfig(
      learning_rate=LEARNING_RATE, weight_decay=WEIGHT_DECAY, max_grad_norm=MAX_GRAD_NORM))
  mesh = mesh_lib.make_mesh(data=1, devices=jax.devices()[:1])
  state = train_state.create(config, params, optimizer, mesh, rules.TRAIN_RULES)
  train_step = step_lib.make_train_step(config, rsft.loss, optimizer, mesh, rules.TRAIN_RULES)
  return state, train_step, mesh_lib.place_batch(batch, mesh, rules.TRAIN_RULES)


def jax_step_fn(config, params, batch):
  state, train_step, batch = _jax_train_setup(config, params, batch)
  holder = {"state": state}

  def step():
    holder["state"], metrics = train_step(holder["state"], batch)
    return float(metrics["loss"])

  return step


def _random_checkpoint(name, dtype):
  hf_config = transformers.Qwen3Config(**MODELS[name], tie_word_embeddings=True,
                                       max_position_embeddings=8192, rms_norm_eps=1e-6)
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
  with tempfile.TemporaryDirectory() as directory:
    model.save_pretrained(directory, safe_serialization=True)
    return hf.load_hf(directory, dtype="float32", compute_dtype=dtype)


def _rss_bytes():
  """Resident set size of this process now (Linux /proc)."""
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
  """Samples this process's RSS every `interval` seconds while the block runs: .before (at
  entry) and .peak (the largest sample, entry and exit included)."""

  def __init__(self, interval=0.01):
    self.interval = interval

  def __enter__(self):
    self.before = self.peak = _rss_bytes()
    self._done = threading.Event()
    self._thread = threading.Thread(target=self._sample, daemon=True)
    self._thread.start()
    return self

  def _sample(self):
    while not self._done.wait(self.interval):
      self.peak = max(self.peak, _rss_bytes())

  def __exit__(self, *exc):
    self._done.set()
    self._thread.join()
    self.peak = max(self.peak, _rss_bytes())


def jax_compiled_step_fn(config, params, batch):
  """jax_step_fn with the compile done here, ahead of the first step: (step, compile info:
  wall and CPU seconds, XLA's memory analysis of the compiled step)."""
  state, train_step, batch = _jax_train_setup(config, params, batch)
  holder = {}
  wall, cpu = timed(lambda: holder.update(
      compiled=train_step.jitted.lower(state, batch).compile()))
  compiled = holder.pop("compiled")
  memory = compiled.memory_analysis()
  info = {"compile_seconds": wall, "compile_cpu_seconds": cpu,
          "xla_temp_bytes": int(memory.temp_size_in_bytes),
          "xla_argument_bytes": int(memory.argument_size_in_bytes)}
  holder["state"] = state

  def step():
    holder["state"], metrics = compiled(holder["state"], batch)
    return float(metrics["loss"])

  return step, info


def bench_attention(names, lengths, batch_sizes, repeats, dtype="float32", report=None):
  """Blockwise vs dense attention in whale_jax's train step, side by side per length.

  repeats: timed steps per length (one per length, or one for all). Per length and
  implementation: the compile (wall and CPU seconds, XLA's temporaries), one warm-up step,
  then the timed steps, alternating between the two (which goes first alternates too), each
  with the process's peak RSS during the step above its RSS before it. report(results) is
  called after each length (partial results survive an interrupted run)."""
  results = []
  if len(repeats) == 1:
    repeats = repeats * len(lengths)
  for name, seq_len, batch_size, length_repeats in zip(names, lengths, batch_sizes, repeats):
    config, params = _random_checkpoint(name, dtype)
    batch = make_batch(config.vocab_size, batch_size, seq_len, prompt_len=seq_len // 8)
    remat = "full" if seq_len > 1024 else "none"
    steps, compile_info = {}, {}
    for choice in ("dense", "blockwise"):
      steps[choice], compile_info[choice] = jax_compiled_step_fn(
          config.replace(attention=choice, remat=remat), params, batch)
      print(f"  {name} T={seq_len} {choice}: compiled in {compile_info[choice]['compile_seconds']:.0f}"
            f" s, XLA temporaries {compile_info[choice]['xla_temp_bytes'] / 2**30:.2f} GiB",
            flush=True)
    first_loss, warm_up = {}, {}
    for choice, step in steps.items():
      holder = {}
      warm_up[choice] = timed(lambda step=step: holder.update(loss=step()))
      first_loss[choice] = holder["loss"]
    times = {choice: [] for choice in steps}
    rss = {choice: [] for choice in steps}
    loads = [os.getloadavg()[0]]
    for repeat in range(length_repeats):
      order = list(steps) if repeat % 2 == 0 else list(steps)[::-1]
      for choice in order:
        with PeakRss() as memory:
          times[choice].append(timed(steps[choice]))
        rss[choice].append((memory.peak - memory.before, memory.peak))
      loads.append(os.getloadavg()[0])
    result = {"model": name, "params": config.num_params(), "seq_len": seq_len,
              "batch_size": batch_size, "remat": remat, "first_loss": first_loss,
              "load_average_1min": loads}
    for choice, choice_times in times.items():
      seconds = statistics.median(t[0] for t in choice_times)
      result[choice] = dict(
          compile_info[choice], seconds_per_step=seconds,
          tokens_per_second=batch_size * seq_len / seconds,
          cpu_seconds_per_step=statistics.median(t[1] for t in choice_times),
          warm_up_seconds=warm_up[choice][0],
          all_seconds=[round(t[0], 2) for t in choice_times],
          all_cpu_seconds=[round(t[1], 2) for t in choice_times],
          step_rss_increase_bytes=max(r[0] for r in rss[choice]),
          peak_rss_bytes=max(r[1] for r in rss[choice]))
    result["ratio"] = result["dense"]["seconds_per_step"] / result["blockwise"]["seconds_per_step"]
    result["cpu_ratio"] = (result["dense"]["cpu_seconds_per_step"]
                           / result["blockwise"]["cpu_seconds_per_step"])
    gib = lambda value: f"{value / 2**30:.2f} GiB"
    print(f"{name} T={seq_len} batch {batch_size} remat={remat}: first loss dense "
          f"{first_loss['dense']:.5f} / blockwise {first_loss['blockwise']:.5f}", flush=True)
    for choice in steps:
      r = result[choice]
      print(f"  {choice:9s} {r['seconds_per_step']:.2f} s/step {r['all_seconds']} "
            f"({r['cpu_seconds_per_step']:.1f} CPU-s, {r['tokens_per_second']:.0f} tokens/s; "
            f"warm-up {r['warm_up_seconds']:.1f} s, compile {r['compile_seconds']:.0f} s); "
            f"memory: XLA temporaries {gib(r['xla_temp_bytes'])}, RSS during a step +"
            f"{gib(r['step_rss_increase_bytes'])} (peak {gib(r['peak_rss_bytes'])})",
            flush=True)
    print(f"  blockwise speed-up (dense / blockwise) wall {result['ratio']:.2f}, CPU "
          f"{result['cpu_ratio']:.2f}; load average "
          f"{', '.join(f'{load:.1f}' for load in loads)}", flush=True)
    results.append(result)
    if report:
      report(results)
    del steps, params
  return results


FRAMEWORKS = ("whale_jax", "torch")


def build_steps(name, batch_size, seq_len, dtype="float32", frameworks=FRAMEWORKS):
  """(whale_jax model config, {framework: step}) on the same random Qwen3 weights and batch."""
  hf_config = transformers.Qwen3Config(**MODELS[name], tie_word_embeddings=True,
                                       max_position_embeddings=4096, rms_norm_eps=1e-6)
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
  with tempfile.TemporaryDirectory() as directory:
    model.save_pretrained(directory, safe_serialization=True)
    config, params = hf.load_hf(directory, dtype="float32", compute_dtype=dtype)
  model.train()
  batch = make_batch(config.vocab_size, batch_size, seq_len, prompt_len=seq_len // 8)
  makers = {"whale_jax": lambda: jax_step_fn(config, params, batch),
            "torch": lambda: torch_step_fn(model, batch, dtype)}
  return config, {framework: makers[framework]() for framework in frameworks}


def time_steps(steps, repeats):
  """Two warm-up steps each (the first compiles), then repeats timed steps each, alternating
  which goes first: (first-step loss, (wall, CPU) seconds of each timed step, 1-minute load
  averages), each {framework: ...} but the loads."""
  first_loss = {framework: step() for framework, step in steps.items()}
  for step in steps.values():  # a second warm-up step: the first ran the compile
    step()
  times = {framework: [] for framework in steps}
  loads = [os.getloadavg()[0]]
  for repeat in range(repeats):
    order = list(steps) if repeat % 2 == 0 else list(steps)[::-1]
    for framework in order:
      times[framework].append(timed(steps[framework]))
    loads.append(os.getloadavg()[0])
  return first_loss, times, loads


def run_worker(framework, name, batch_size, seq_len, repeats, dtype):
  """One framework's timed steps in a fresh python process of this script: (first-step loss,
  [(wall, CPU) seconds], load averages)."""
  with tempfile.TemporaryDirectory() as directory:
    output = os.path.join(directory, "worker.json")
    subprocess.run([sys.executable, os.path.abspath(__file__), f"--worker={framework}",
                    f"--models={name}", f"--shapes={batch_size}x{seq_len}",
                    f"--repeats={repeats}", f"--dtype={dtype}", f"--output={output}"],
                   check=True)
    with open(output) as f:
      result = json.load(f)
  return result["first_loss"], [tuple(t) for t in result["times"]], result["loads"]


def worker_main(framework, name, batch_size, seq_len, repeats, dtype, output):
  """--worker: time one framework alone in this process, results as JSON at output."""
  _, steps = build_steps(name, batch_size, seq_len, dtype, frameworks=(framework,))
  first_loss, times, loads = time_steps(steps, repeats)
  with open(output, "w") as f:
    json.dump({"first_loss": first_loss[framework], "times": times[framework], "loads": loads}, f)


def bench_model(name, batch_size, seq_len, repeats, peak_flops, dtype="float32",
                isolation="process", rounds=2):
  """One row: whale_jax's and torch's train steps on the same weights and batch.

  isolation="process": each framework in fresh processes of its own, one after the other,
  rounds of them in A B B A order (so a drift in the machine's speed hits both alike), each
  process timing repeats steps; the medians are over all of a framework's steps. This is how
  either is used: one framework in a process. isolation="steps": both in this process, their
  steps alternating; each then also pays for the other's threads and memory (torch's OpenMP
  workers spin-wait on the cores after each of its parallel regions; XLA's big temporaries are
  handed back to the OS between its steps), so the ratio measures the pair as much as either."""
  if isolation == "steps":
    config, steps = build_steps(name, batch_size, seq_len, dtype)
    first_loss, times, loads = time_steps(steps, repeats)
  else:
    config, _ = build_steps(name, batch_size, seq_len, dtype, frameworks=())
    first_loss, times, loads = {}, {framework: [] for framework in FRAMEWORKS}, []
    for round_ in range(rounds):
      for framework in FRAMEWORKS if round_ % 2 == 0 else FRAMEWORKS[::-1]:
        loss, framework_times, framework_loads = run_worker(
            framework, name, batch_size, seq_len, repeats, dtype)
        first_loss.setdefault(framework, loss)
        times[framework] += framework_times
        loads += framework_loads
  tokens_per_step = batch_size * seq_len
  flops_per_step = model_flops_per_token(config, seq_len) * tokens_per_step
  result = {"model": name, "params": config.num_params(), "batch_size": batch_size,
            "seq_len": seq_len, "compute_dtype": dtype, "isolation": isolation,
            "first_loss": first_loss, "load_average_1min": loads}
  for framework, framework_times in times.items():
    seconds = statistics.median(t[0] for t in framework_times)
    cpu_seconds = statistics.median(t[1] for t in framework_times)
    result[framework] = {
        "seconds_per_step": seconds, "tokens_per_second": tokens_per_step / seconds,
        "mfu": flops_per_step / seconds / peak_flops[0],
        "cpu_seconds_per_step": cpu_seconds,
        "cpu_mfu": flops_per_step / cpu_seconds / peak_flops[1],
        "all_seconds": [round(t[0], 3) for t in framework_times],
        "all_cpu_seconds": [round(t[1], 3) for t in framework_times]}
  result["ratio"] = result["whale_jax"]["tokens_per_second"] / result["torch"]["tokens_per_second"]
  result["cpu_ratio"] = (result["torch"]["cpu_seconds_per_step"] /
                         result["whale_jax"]["cpu_seconds_per_step"])
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--models", default="small,base",
                      help=f"comma-separated, of {', '.join(MODELS)}")
  parser.add_argument("--batch_sizes", default="8,4", help="rows per step, one per model")
  parser.add_argument("--seq_len", type=int, default=512)
  parser.add_argument("--shapes", default=None,
                      help="comma-separated BATCHxLENGTH (e.g. 4x128,2x512): every model at "
                      "every shape, in place of --batch_sizes and --seq_len")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--peak_size", type=int, default=4096, help="matmul size for the peak")
  parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                      help="compute dtype (parameters and optimizer stay float32); the peak is "
                      "measured with matmuls in this dtype")
  parser.add_argument("--output", default=None, help="also write the results as JSON here")
  parser.add_argument("--isolation", default="process", choices=("process", "steps"),
                      help="process: each framework timed in fresh processes of its own, "
                      "--rounds of them in A B B A order; steps: both in this process, their "
                      "steps alternating (see bench_model)")
  parser.add_argument("--rounds", type=int, default=2,
                      help="with --isolation=process: processes per framework and row, each "
                      "timing --repeats steps")
  parser.add_argument("--worker", default=None, choices=FRAMEWORKS, help=argparse.SUPPRESS)
  parser.add_argument("--attention", action="store_true",
                      help="blockwise vs dense attention in whale_jax only (model: base)")
  parser.add_argument("--attention_lengths", default="512,4096")
  parser.add_argument("--attention_batch_sizes", default="1,1")
  parser.add_argument("--attention_models", default="base,base", help="one model per length")
  parser.add_argument("--attention_repeats", default="3,2",
                      help="timed steps per length (default --repeats for all when empty)")
  args = parser.parse_args()
  if args.attention:
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()}", flush=True)

    def report(results):
      if args.output:
        with open(args.output + ".tmp", "w") as f:
          json.dump({"attention": results}, f, indent=1)
        os.replace(args.output + ".tmp", args.output)

    bench_attention(args.attention_models.split(","),
                    [int(x) for x in args.attention_lengths.split(",")],
                    [int(x) for x in args.attention_batch_sizes.split(",")],
                    [int(x) for x in (args.attention_repeats or str(args.repeats)).split(",")],
                    args.dtype, report)
    return
  names = args.models.split(",")
  if any(name not in MODELS for name in names):
    parser.error(f"--models={args.models!r} must name models of {sorted(MODELS)}.")
  if args.shapes:
    try:
      shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.shapes.split(",")]
    except ValueError:
      shapes = []
    if not shapes or any(len(shape) != 2 for shape in shapes):
      parser.error(f"--shapes={args.shapes!r} must be comma-separated BATCHxLENGTH, e.g. "
                   "4x128,2x512.")
    rows = [(name, batch_size, seq_len) for name in names for batch_size, seq_len in shapes]
  else:
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    if len(batch_sizes) == 1:
      batch_sizes *= len(names)
    if len(batch_sizes) != len(names):
      parser.error("--batch_sizes must give one size per model of --models (or one for all).")
    rows = [(name, batch_size, args.seq_len) for name, batch_size in zip(names, batch_sizes)]
  if args.rounds < 1:
    parser.error(f"--rounds={args.rounds} must be at least 1.")
  if args.worker:
    (name, batch_size, seq_len), = rows
    worker_main(args.worker, name, batch_size, seq_len, args.repeats, args.dtype, args.output)
    return

  print(f"jax {jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__} "
        f"with {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
  peaks = measure_peak_flops(args.peak_size, max(args.repeats, 5), args.dtype)
  peak = tuple(max(values[i] for values in peaks.values()) for i in range(2))
  print(f"matmul peak ({args.dtype} {args.peak_size}^2), per wall / per CPU second: " + ", ".join(
      f"{name} {wall / 1e9:.1f} / {cpu / 1e9:.1f} GFLOP" for name, (wall, cpu) in peaks.items())
      + f" -> peak {peak[0] / 1e9:.1f} / {peak[1] / 1e9:.1f} GFLOP")
  results = []
  for name, batch_size, seq_len in rows:
    result = bench_model(name, batch_size, seq_len, args.repeats, peak, args.dtype,
                         args.isolation, args.rounds)
    results.append(result)
    print(f"{name}: {result['params'] / 1e6:.1f}M params, batch {batch_size} x {seq_len}, "
          f"first-step loss jax {result['first_loss']['whale_jax']:.5f} / torch "
          f"{result['first_loss']['torch']:.5f}")
    for framework in ("whale_jax", "torch"):
      r = result[framework]
      print(f"  {framework:9s} {r['tokens_per_second']:8.0f} tokens/s  {r['seconds_per_step']:.3f} "
            f"s/step  MFU {100 * r['mfu']:.1f}%  | {r['cpu_seconds_per_step']:.3f} CPU-s/step  "
            f"CPU-MFU {100 * r['cpu_mfu']:.1f}%  | steps {r['all_seconds']} "
            f"CPU {r['all_cpu_seconds']}")
    print(f"  ratio whale_jax / torch: tokens/s {result['ratio']:.2f}, "
          f"tokens per CPU-second {result['cpu_ratio']:.2f}; load average "
          f"{', '.join(f'{load:.1f}' for load in result['load_average_1min'])}", flush=True)
  how = (f"each framework in {args.rounds} fresh processes of its own (A B B A), "
         f"{args.repeats} timed steps in each" if args.isolation == "process" else
         f"both in one process, {args.repeats} timed steps each, alternating")
  print(f"\nmedians over all timed steps; {how}; ratio = whale_jax / torch tokens/s (higher is "
        "better for whale_jax)")
  print("| model | batch x length | whale_jax s/step | torch s/step | ratio (wall) "
        "| ratio (CPU time) | load average (1 min) |")
  print("|---|---|---|---|---|---|---|")
  for r in results:
    loads = r["load_average_1min"]
    print(f"| {r['model']} ({r['params'] / 1e6:.1f}M) | {r['batch_size']} x {r['seq_len']} | "
          f"{r['whale_jax']['seconds_per_step']:.3f} | {r['torch']['seconds_per_step']:.3f} | "
          f"**{r['ratio']:.2f}** | {r['cpu_ratio']:.2f} | {min(loads):.1f}-{max(loads):.1f} |")
  if args.output:
    with open(args.output + ".tmp", "w") as f:
      json.dump({"peak_flops": peak, "matmul_flops": peaks, "results": results}, f, indent=1)
    os.replace(args.output + ".tmp", args.output)


if __name__ == "__main__":
  main()
