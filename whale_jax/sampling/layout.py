"""Layout: every choice the sampler's programs make for one compiler, picked once per engine.

  layout = Layout.choose(config, platform="cpu")       # the engine calls this once
  decode_layout = layout.for_batch(config, batch_size)  # static argument of a decode program

XLA's CPU compiler runs some forms of the same arithmetic much slower than others, so on CPU
the sampler lays its work out differently from TPU and GPU, with the same numbers:
  unrolled    decode with models.decode_step (one cache buffer per layer and per-layer copies
              of the weights) instead of decoder.forward_with_cache's layer scan.
  bits        move 16-bit floats as their bits (kv_cache.as_bits) where prefills, inserts,
              block saves and the layer scan gather, slice and scatter them; and, for plain
              decoders with 16-bit weights, keep a copy of the weights as bits made once per
              params version (decoder.inference_bits; weight_bits()).
  transposed  the decode step's weights stored [out, in] (decode_step.transposed_for); a
              choice per slot batch size, so for_batch() sets it and the engine's own layout
              leaves it False.
Model code takes the fields it needs (decode_step's transposed, forward_with_cache's bits);
the sampling programs (decode.py, programs.py) take the Layout. Layout() is the plain layout
of TPU and GPU (and of aot's programs).
"""
import dataclasses

import jax.numpy as jnp

from whale_jax.models import decode_step


@dataclasses.dataclass(frozen=True)
class Layout:
  """How the sampler's programs lay out weights and caches; hashable (a static argument)."""
  unrolled: bool = False
  bits: bool = False
  transposed: bool = False

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
    return cls(unrolled=bool(unrolled), bits=platform == "cpu")

  def for_batch(self, config, batch_size):
    """This layout with transposed chosen for a decode of batch_size slots."""
    return dataclasses.replace(self, transposed=decode_step.transposed_for(config, batch_size))

  def weight_bits(self, config):
    """Whether the programs read a copy of the weights as bits (decoder.inference_bits): with
    bits, for plain decoders whose compute dtype is a 16-bit float (float32 weights are their
    own bits; hybrid models have no such copy)."""
    return (self.bits and not config.is_hybrid and
            jnp.dtype(config.compute_jnp_dtype).itemsize == 2)
