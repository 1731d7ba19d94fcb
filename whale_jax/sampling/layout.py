"""Layout: every choice the sampler's programs make for one compiler, picked once per engine.

  layout = Layout.choose(config, platform="cpu")       # the engine calls this once
  decode_layout = layout.for_batch(config, batch_size)  # static argument of a decode program

XLA's CPU compiler runs some forms of the same arithmetic much slower than others, so on CPU
the sampler lays its work out differently from TPU and GPU, with the same numbers:
  unrolled    decode with models.decode_step (one cache buffer per layer and per-layer copies
              of the weights) instead of decoder.forward_with_cache's layer scan.
  bits        store 16-bit floats as their bits (kv_cache.as_bits) where prefills, inserts,
              block saves and the layer scan gather, slice and scatter them: the cache a
              prefill fills, and, for plain decoders with 16-bit weights, a copy of the
              embedding and layer weights made once per params version (store_weights).
  transposed  the decode step's weights stored [out, in] (for_batch); a choice per slot batch
              size, so for_batch() sets it and the engine's own layout leaves it False.
  columns     a float32 decode step keeps its activations as columns and multiplies those
              [out, in] weights on the left (decode_step.Weights.columns; 16-bit steps of even
              batches always do). Also per batch size (for_batch); which form XLA's CPU matmul
              library runs fastest depends on the CPU (float32_columns, picked by choose()).
  row_loops   move KV between caches in a loop, one prefill row (insert) or cache block
              (prefill_with_prefix's saves) per step, instead of one scatter over all of them:
              XLA's CPU scatter moves every update (dropped ones too) through new buffers
              before writing it element by element.
The model code has no switch for any of these: it reads the data it is given (stored bits
through kv_cache.load; decode_step.Weights carry their orientation). The sampling programs
(decode.py, programs.py) take the Layout and store the data so. Layout() is the plain layout
of TPU and GPU (and of aot's programs).
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp

from whale_jax.models import decode_step
from whale_jax.models import kv_cache


# float32 weights from which a float32_columns layout decodes in columns: about the L3 cache
# of the AMD EPYC measured (32 MiB), between ~3M's 13 MB (both forms' products alike) and
# ~100M's 400 MB (1.34x faster in columns); at width 384 with a 32,000-token unembedding
# (49 MB alone) columns were 1.10x faster.
COLUMNS_MIN_BYTES = 32 * 2**20


@dataclasses.dataclass(frozen=True)
class Layout:
  """How the sampler's programs lay out weights and caches; hashable (a static argument)."""
  unrolled: bool = False
  bits: bool = False
  transposed: bool = False
  row_loops: bool = False
  columns: bool = False
  float32_columns: bool = False

  # float32_columns: whether a float32 decode of several rows runs in columns where the
  # weights are large (for_batch). On an Intel Xeon with AMX, [out, in] weights contracted on
  # the right were up to 1.7x faster than [in, out] at batch 32 (~100M shapes), and on the
  # left 4x slower (models/products.py). On an AMD EPYC (Zen 4, 32 MiB L3), the left form in
  # columns was the fastest once the weights outgrow the cache (COLUMNS_MIN_BYTES): the ~100M
  # decode step's products at batch 2-64 1.24-1.47x faster than [in, out] rows, which beat
  # [out, in] contracted on the right; with ~3M's 13 MB of weights the two forms' products
  # ran alike and generate was ~4% slower in columns. docs/benchmarks.md, "Sampler
  # throughput". A choice read from the CPU and the model, never timed at run time: the same
  # machine always runs the same programs.

  @classmethod
  def choose(cls, config, platform, unrolled=None):
    """The layout for a model on a platform ("cpu", "tpu", "gpu").

    unrolled: None picks it (on CPU, for the models decode_step supports); True where
      decode_step does not support the model raises ValueError.
    """
    if unrolled is None:
      unrolled = platform == "cpu" and decode_step.supports(config)
    if unrolled and not decode_step.supports(config):
      raise ValueError(f"unrolled=True: models.decode_step does not support this model "
                       f"(model_type={config.model_type!r}); use unrolled=False.")
    cpu = platform == "cpu"
    return cls(unrolled=bool(unrolled), bits=cpu, row_loops=cpu,
               float32_columns=cpu and cpu_vendor() == "AuthenticAMD")

  def for_batch(self, config, batch_size):
    """This layout with transposed and columns chosen for a decode of batch_size slots.

    Read by the unrolled decode (decode_step.Weights.transposed and .columns): [out, in] for
    more than one row, [in, out] for one. Every product takes its inputs in the compute dtype
    and accumulates in float32 (products.matmul). A matrix-vector product (one row) reads
    [in, out] fastest. With a few rows, 16-bit floats are faster [out, in], as the left side
    of the product, which XLA's matmul library (AMX where the CPU has it) reads without
    preparing a copy of the weights at every call (1.7-2x at batch 8-64; docs/benchmarks.md);
    float32 contracts them on the right, or where float32_columns (see there) takes them on
    the left, in columns, for models of at least COLUMNS_MIN_BYTES of float32 weights and
    keeps smaller ones [in, out].
    """
    several = batch_size > 1
    if jnp.dtype(config.compute_jnp_dtype).itemsize != 4 or not self.float32_columns:
      return dataclasses.replace(self, transposed=several, columns=False)
    columns = several and config.num_params() * 4 >= COLUMNS_MIN_BYTES
    return dataclasses.replace(self, transposed=columns, columns=columns)

  def stores_bits(self, config):
    """Whether the programs keep 16-bit floats as their bits (store_weights, the prefill
    cache): with bits, for plain decoders whose compute dtype is a 16-bit float (float32 is
    its own bits; hybrid models keep their floats)."""
    return (self.bits and not config.is_hybrid and
            jnp.dtype(config.compute_jnp_dtype).itemsize == 2)

  def store_weights(self, params, config):
    """params with the embedding and layer weights in the compute dtype stored as its bits,
    where stores_bits(config); params itself elsewhere.

    A copy, made once per params version by the engine, that every prefill reads: without it
    each pass would convert the embedding and the whole layer stacks again (~100M bfloat16 on
    2 cores: ~70 ms of each prefill, ~20 ms of each decode call).
    """
    if not self.stores_bits(config):
      return params
    convert = lambda p: kv_cache.as_bits(p.astype(config.compute_jnp_dtype))
    return dict(params, embedding=convert(params["embedding"]),
                layers=jax.tree.map(convert, params["layers"]))

  def store_cache(self, cache, config):
    """A stacked cache's key and value as stored bits where stores_bits(config)."""
    if not self.stores_bits(config):
      return cache
    return dict(cache, key=kv_cache.as_bits(cache["key"]),
                value=kv_cache.as_bits(cache["value"]))

  def load_cache(self, cache, config):
    """store_cache undone."""
    dtype = config.compute_jnp_dtype
    return dict(cache, key=kv_cache.from_bits(cache["key"], dtype),
                value=kv_cache.from_bits(cache["value"], dtype))


@functools.lru_cache(maxsize=None)
def cpu_vendor():
  """This machine's CPU vendor as Linux names it (/proc/cpuinfo's vendor_id, e.g.
  "GenuineIntel", "AuthenticAMD"); "" where it cannot be read."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("vendor_id"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return ""
