r"""Prefill throughput of the gated delta rule: chunked parallel form vs. step-by-step recurrence.

One Gated DeltaNet layer's rule (gated_delta.chunked vs. gated_delta.recurrent) on random
inputs at the shapes of Qwen3.5-4B/9B's linear layers (32 value heads, key and value head dim
128), jitted, timed after a warm-up call; prints the median tokens/s of each and their ratio,
and the median CPU time (all threads of the process) per 1,000 tokens, which moves less than
wall time when other jobs share the machine.
Projections, convolution and norms are left out: they cost the same in both forms.

  python bench/gated_delta_prefill.py                               # lengths 512 and 4096
  python bench/gated_delta_prefill.py --lengths=512 --num_heads=8 --repeats=3
"""
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from whale_jax.models import gated_delta

_LENGTHS = flags.DEFINE_list("lengths", ["512", "4096"], "Sequence lengths to time.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 1, "Rows per prefill.")
_NUM_HEADS = flags.DEFINE_integer("num_heads", 32, "Value heads (the state has one each).")
_KEY_DIM = flags.DEFINE_integer("key_dim", 128, "Key head dim.")
_VALUE_DIM = flags.DEFINE_integer("value_dim", 128, "Value head dim.")
_CHUNK_SIZE = flags.DEFINE_integer("chunk_size", gated_delta.CHUNK_SIZE, "Chunked form's chunk.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls per form and length (median).")


def random_inputs(length, seed=0):
  rng = np.random.default_rng(seed)
  shape = (_BATCH_SIZE.value, length, _NUM_HEADS.value)
  normal = lambda *tail: rng.normal(size=shape + tail).astype(np.float32)
  key = normal(_KEY_DIM.value)
  key /= np.linalg.norm(key, axis=-1, keepdims=True)
  query = normal(_KEY_DIM.value) * _KEY_DIM.value**-0.5
  log_decay = -np.log1p(np.exp(normal()))  # -softplus: decays as the layer draws them
  beta = 1 / (1 + np.exp(-normal()))
  return [jnp.asarray(x) for x in (query, key, normal(_VALUE_DIM.value), log_decay, beta)]


def median_seconds(function, inputs):
  """(median wall seconds, median process CPU seconds) of one call."""
  jax.block_until_ready(function(*inputs))  # compile and warm up
  wall, cpu = [], []
  for _ in range(_REPEATS.value):
    start, start_cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(function(*inputs))
    wall.append(time.perf_counter() - start)
    cpu.append(time.process_time() - start_cpu)
  return float(np.median(wall)), float(np.median(cpu))


def main(argv):
  del argv
  chunked = jax.jit(lambda *x: gated_delta.chunked(*x, chunk_size=_CHUNK_SIZE.value))
  recurrent = jax.jit(gated_delta.recurrent)
  print(f"device={jax.devices()[0].device_kind} batch={_BATCH_SIZE.value} heads="
        f"{_NUM_HEADS.value} key_dim={_KEY_DIM.value} value_dim={_VALUE_DIM.value} "
        f"chunk={_CHUNK_SIZE.value} repeats={_REPEATS.value}")
  print("| length | chunked tokens/s | recurrent tokens/s | chunked / recurrent | "
        "CPU ms per 1k tokens, chunked / recurrent |")
  print("|---|---|---|---|---|")
  for length in map(int, _LENGTHS.value):
    inputs = random_inputs(length)
    tokens = _BATCH_SIZE.value * length
    chunked_wall, chunked_cpu = median_seconds(chunked, inputs)
    recurrent_wall, recurrent_cpu = median_seconds(recurrent, inputs)
    per_1k = lambda seconds: 1e6 * seconds / tokens
    print(f"| {length} | {tokens / chunked_wall:,.0f} | {tokens / recurrent_wall:,.0f} | "
          f"{recurrent_wall / chunked_wall:.1f}x | {per_1k(chunked_cpu):,.0f} / "
          f"{per_1k(recurrent_cpu):,.0f} |", flush=True)


if __name__ == "__main__":
  app.run(main)
