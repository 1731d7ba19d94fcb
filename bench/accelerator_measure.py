r"""The accelerator check's measurements, in the process that holds the device.

  python bench/accelerator_measure.py --out=CHECK.json --deadline_unix=T   # from the check

bench/accelerator_check.py starts it after writing CHECK.json with the run's settings; it runs
the sections environment, limits, decode, prefill and train (that module's docstring says
what each measures) and rewrites CHECK.json after each.

FLOP counts follow the PaLM convention of bench/train_throughput.py, per token:
  forward (prefill)  2 x matmul_params + 4 x num_layers x num_heads x head_dim x length
  train step         3 x forward = 6 x matmul_params + 12 x num_layers x num_heads x head_dim x T
matmul_params = the layers' query, key, value, output, gate, up and down projections plus the
unembedding (the tied embedding once: the input lookup does no FLOPs). Attention is counted
unmasked, as PaLM does. A decode step must read at least every weight once and each row's
keys and values up to its context.
"""
import argparse
import importlib.metadata
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import accelerator_check  # bench/, this script's folder
from whale_jax.models import ModelConfig
from whale_jax.models import decoder
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.train import optimizer as optimizer_lib
from whale_jax.train import packing
from whale_jax.train import rsft
from whale_jax.train import step as step_lib
from whale_jax.train import train_state

# Nominal dense bfloat16 FLOP/s and HBM bytes/s by a substring of jax's device_kind (vendor
# data sheets, SXM parts). Other devices are measured against the limits measured in the run.
NOMINAL = {"H200": (989e12, 4.8e12), "H100": (989e12, 3.35e12)}
FORWARD_FLOPS_FORMULA = ("2 x matmul_params + 4 x num_layers x num_heads x head_dim x "
                         "prompt_length")
TRAIN_FLOPS_FORMULA = "6 x matmul_params + 12 x num_layers x num_heads x head_dim x seq_len"


def matmul_params(model):
  """Parameters that multiply an activation per token (module docstring)."""
  attention = model["embed_dim"] * model["head_dim"] * 2 * (model["num_heads"]
                                                            + model["num_kv_heads"])
  mlp = 3 * model["embed_dim"] * model["mlp_dim"]
  return model["num_layers"] * (attention + mlp) + model["vocab_size"] * model["embed_dim"]


def forward_flops_per_token(model, length):
  """Model FLOPs of one token's forward pass at sequence length `length` (module docstring)."""
  return 2 * matmul_params(model) + 4 * model["num_layers"] * model["num_heads"] * model[
      "head_dim"] * length


def train_flops_per_token(model, seq_len):
  """Forward and backward: three forwards."""
  return 3 * forward_flops_per_token(model, seq_len)


def decode_bytes_per_step(num_params, model, batch_size, context_length, itemsize):
  """Bytes a decode step must read at least: every weight once, and each of batch_size rows'
  keys and values of context_length tokens."""
  kv_values_per_token = 2 * model["num_layers"] * model["num_kv_heads"] * model["head_dim"]
  return itemsize * (num_params + batch_size * context_length * kv_values_per_token)


def _seconds(function):
  start = time.perf_counter()
  function()
  return time.perf_counter() - start


def _timed_runs(function, repeats, deadline):
  """Wall seconds of up to repeats calls: at least one, fewer once deadline has passed."""
  times = []
  while len(times) < repeats and (not times or time.time() < deadline):
    times.append(_seconds(function))
  return times


def _jax_distributions():
  """{name: version} of the installed jax, jaxlib and plugin (jax-cuda13-plugin, ...)."""
  return {dist.metadata["Name"]: dist.version for dist in importlib.metadata.distributions()
          if (dist.metadata["Name"] or "").lower().replace("_", "-").startswith("jax")}


class Measurements:
  """One method per section; each returns the section's fields (its deadline: when its
  repeats stop, so that later sections keep their budgets)."""

  def __init__(self, settings, report):
    self.settings = settings
    self.report = report
    self.model = accelerator_check.MODELS[settings.model]
    self.config = ModelConfig(**self.model, param_dtype="bfloat16", compute_dtype="bfloat16")
    self.device = jax.devices()[0]
    self.prefill_rows = None  # decode() measures them

  def _peak_bytes(self):
    return (self.device.memory_stats() or {}).get("peak_bytes_in_use")

  def _limit(self, name):
    """A number of the limits section, or None when that section did not succeed."""
    limits = self.report.value["sections"].get("limits", {})
    return limits.get(name) if limits.get("status") == "ok" else None

  def environment(self, _):
    return dict(platform=self.device.platform, device_kind=self.device.device_kind,
                num_devices=jax.device_count(), jax_version=jax.__version__,
                jax_distributions=_jax_distributions(), python_version=platform.python_version(),
                cpu_count=os.cpu_count(),
                device_memory_bytes=(self.device.memory_stats() or {}).get("bytes_limit"),
                load_average=[round(x, 2) for x in os.getloadavg()],
                xla_flags=os.environ.get("XLA_FLAGS", ""), model=self.settings.model,
                model_shape=self.model, num_params=self.config.num_params(),
                matmul_params=matmul_params(self.model), dtype="bfloat16")

  def limits(self, _):
    calls = 10

    def rate(function, argument, work):  # work per second; calls queued back to back
      function(argument).block_until_ready()
      best = float("inf")
      for _ in range(3):
        start = time.perf_counter()
        result = argument
        for _ in range(calls):
          result = function(result)
        result.block_until_ready()
        best = min(best, time.perf_counter() - start)
      return calls * work / best

    # A copy that changes every element (x + 1), so that nothing can be skipped: read + write.
    array = jnp.zeros((self.settings.copy_bytes // 4,), jnp.float32)
    measured_bytes = rate(jax.jit(lambda x: x + 1.0), array, 2 * array.nbytes)
    del array
    size = self.settings.matmul_size
    matrix = jax.random.normal(jax.random.key(0), (size, size), jnp.bfloat16)
    # a @ a, then that squared, ...: scaled by 1 / sqrt(size) so that values stay near 1.
    matmul = jax.jit(lambda a: (a @ a) * jnp.bfloat16(size**-0.5))
    measured_flops = rate(matmul, matrix, 2 * size**3)
    nominal_flops, nominal_bytes = next(
        (values for name, values in NOMINAL.items() if name in self.device.device_kind),
        (None, None))
    return dict(copy_bytes=self.settings.copy_bytes, measured_bytes_per_second=measured_bytes,
                nominal_bytes_per_second=nominal_bytes,
                bound_bytes_per_second=nominal_bytes or measured_bytes,
                bound_bytes_source="nominal" if nominal_bytes else "measured",
                matmul_size=size, matmul_dtype="bfloat16",
                measured_flops_per_second=measured_flops, nominal_flops_per_second=nominal_flops,
                peak_flops_per_second=nominal_flops or measured_flops,
                peak_flops_source="nominal" if nominal_flops else "measured",
                device_peak_bytes_so_far=self._peak_bytes())

  def decode(self, deadline):
    """One row per batch size, from Sampler.generate with the engine's defaults; the same
    calls give the prefill rows."""
    settings = self.settings
    prompt_length, new_tokens = settings.prompt_length, settings.new_tokens
    params = jax.jit(lambda rng: decoder.init_params(self.config, rng))(jax.random.key(0))
    rng = np.random.default_rng(0)
    bound_bytes = self._limit("bound_bytes_per_second")
    measured_bytes = self._limit("measured_bytes_per_second")
    peak_flops = self._limit("peak_flops_per_second")
    rows, self.prefill_rows = [], []
    with Sampler(self.config, params) as sampler:
      for batch_size in settings.decode_batch_sizes:
        seeds = iter(range(1_000_000))

        def generate(max_tokens, batch_size=batch_size, seeds=seeds):
          # Fresh prompts every call: nothing for the prefix cache to reuse.
          prompts = rng.integers(3, self.config.vocab_size, (batch_size, prompt_length))
          outs = sampler.generate(prompts.tolist(), SamplingParams(
              max_tokens=max_tokens, temperature=1.0, top_p=1.0, top_k=0, seed=next(seeds),
              ignore_eos=True))
          assert all(len(out.token_ids) == max_tokens for out in outs)

        # Warm-up: compiles every shape the timed pairs meet, the relayouts between them too.
        warm_up_seconds = _seconds(lambda: [generate(n) for n in (new_tokens, 1, 1, new_tokens)])
        compilations = sampler.metrics()["compilations"]
        full_times, first_times = [], []
        while len(full_times) < settings.repeats and (not full_times or time.time() < deadline):
          first_times.append(_seconds(lambda: generate(1)))
          full_times.append(_seconds(lambda: generate(new_tokens)))
        generate_seconds = statistics.median(full_times)
        first_seconds = statistics.median(first_times)
        step_seconds = (generate_seconds - first_seconds) / (new_tokens - 1)
        decode_rate = batch_size / step_seconds if step_seconds > 0 else None
        step_bytes = decode_bytes_per_step(self.config.num_params(), self.model, batch_size,
                                           prompt_length + new_tokens / 2, 2)
        bound = batch_size * bound_bytes / step_bytes if bound_bytes else None
        rows.append(dict(
            batch_size=batch_size, prompt_length=prompt_length, new_tokens=new_tokens,
            generate_seconds=generate_seconds, first_token_seconds=first_seconds,
            decode_seconds_per_step=step_seconds, decode_tokens_per_second=decode_rate,
            generate_tokens_per_second=batch_size * new_tokens / generate_seconds,
            bytes_per_step=step_bytes, bound_tokens_per_second=bound,
            fraction_of_bound=decode_rate / bound if decode_rate and bound else None,
            fraction_of_measured_bandwidth=(
                decode_rate * step_bytes / batch_size / measured_bytes
                if decode_rate and measured_bytes else None),
            warm_up_seconds=warm_up_seconds, generate_runs=[round(t, 6) for t in full_times],
            first_token_runs=[round(t, 6) for t in first_times],
            compilations_while_timed=sampler.metrics()["compilations"] - compilations))
        prompt_tokens = batch_size * prompt_length
        flops = prompt_tokens * forward_flops_per_token(self.model, prompt_length)
        self.prefill_rows.append(dict(
            batch_size=batch_size, prompt_length=prompt_length, seconds=first_seconds,
            tokens_per_second=prompt_tokens / first_seconds, flops=flops,
            mfu=flops / first_seconds / peak_flops if peak_flops else None))
        # The rows so far, in case the process is stopped during the next batch size.
        for name, section_rows in (("decode", rows), ("prefill", self.prefill_rows)):
          self.report.value["sections"][name] = dict(status="partial", rows=section_rows)
        self.report.write()
    return dict(rows=rows, device_peak_bytes_so_far=self._peak_bytes())

  def prefill(self, _):
    if not self.prefill_rows:
      raise RuntimeError("the decode section did not finish, and prefill is measured by it")
    return dict(rows=self.prefill_rows,
                flops_formula=f"batch x prompt_length x ({FORWARD_FLOPS_FORMULA})")

  def train(self, deadline):
    """The RSFT train step on a one-device mesh, AdamW with the optimizer's defaults."""
    batch_size, seq_len = self.settings.train_batch_size, self.settings.train_seq_len
    mesh = mesh_lib.make_mesh(data=1, devices=[self.device])
    optimizer = optimizer_lib.make(optimizer_lib.OptimizerConfig(learning_rate=1e-5))
    params = train_state.init_params(self.config, jax.random.key(1), mesh, rules.TRAIN_RULES)
    state = train_state.create(self.config, params, optimizer, mesh, rules.TRAIN_RULES)
    del params
    train_step = step_lib.make_train_step(self.config, rsft.loss, optimizer, mesh)
    rng = np.random.default_rng(1)
    prompt_length = seq_len // 8  # the first eighth is prompt (no loss), the rest targets
    loss_mask = np.r_[np.zeros(prompt_length), np.ones(seq_len - prompt_length)]
    samples = [packing.Sample(rng.integers(3, self.config.vocab_size, seq_len), loss_mask)
               for _ in range(batch_size)]
    batch, _ = packing.pack(samples, row_length=seq_len, num_rows=batch_size, one_per_row=True)
    batch = mesh_lib.place_batch(batch, mesh, rules.TRAIN_RULES)
    holder, losses = {"state": state}, []

    def step():
      holder["state"], metrics = train_step(holder["state"], batch)
      losses.append(float(metrics["loss"]))

    first_step_seconds = _seconds(step)  # compiles
    step()
    runs = _timed_runs(step, self.settings.train_steps, deadline)
    seconds = statistics.median(runs)
    tokens = batch_size * seq_len
    flops = tokens * train_flops_per_token(self.model, seq_len)
    peak = self._limit("peak_flops_per_second")
    measured = self._limit("measured_flops_per_second")
    return dict(
        batch_size=batch_size, seq_len=seq_len, tokens_per_step=tokens,
        attention=self.config.attention, remat=self.config.remat,
        optimizer="AdamW, bfloat16 params, float32 moments and master weights",
        matmul_params=matmul_params(self.model), flops_per_step=flops,
        flops_formula=f"tokens_per_step x ({TRAIN_FLOPS_FORMULA})",
        first_step_seconds=first_step_seconds, seconds_per_step=seconds,
        step_runs=[round(t, 6) for t in runs], tokens_per_second=tokens / seconds,
        peak_flops_per_second=peak, mfu=flops / seconds / peak if peak else None,
        mfu_of_measured_matmul=flops / seconds / measured if measured else None,
        first_loss=losses[0], last_loss=losses[-1], device_peak_bytes_so_far=self._peak_bytes())


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
  parser.add_argument("--out", required=True, help="the check's JSON file, with its settings")
  parser.add_argument("--deadline_unix", type=float, required=True,
                      help="when the last section must have started")
  args = parser.parse_args()
  report = accelerator_check.Report.read(args.out)
  settings = accelerator_check.Settings.from_json(report.value["settings"])
  measurements = Measurements(settings, report)
  budgets = dict(settings.section_seconds)
  names = accelerator_check.MEASURE_SECTIONS
  for index, name in enumerate(names):
    reserve = sum(budgets.get(later, 0.0) for later in names[index + 1:])
    report.section(name, getattr(measurements, name), budgets.get(name, 0.0),
                   args.deadline_unix, args.deadline_unix - reserve)


if __name__ == "__main__":
  main()
