"""The train step's compile choices per platform: speed only, never the math.

make_train_step compiles tuned(model_config, its mesh's platform). The model code stays plain:
these are ModelConfig fields any config may set (attention, attention_block_size,
unroll_layers); a platform's choice replaces only a field left at its default, so a value the
user set is kept.

XLA's CPU compiler: blockwise attention in 256-long blocks, whose backward pass saves no
[T, S] probabilities (train steps on 2 cores, 256 against 128 and 512-long blocks: ~3M at
2 x 512 tokens 175 / 202 / 191 ms, at 1 x 2,048 639-760 / 932 / 794 ms; ~100M at 2 x 512
4.25 / 4.49 s, at 1 x 2,048 9.6 / 11.7 s); and the layer loop
unrolled, without the loop's stacked residuals and zeroed gradient stacks (~100M at 4 x 128: a
10% faster step, a compile twice as long); its temporaries in heaps malloc reuses
(compiler_options). docs/benchmarks.md, "Training throughput".
"""
import dataclasses

import jax
import jax.extend.core as jax_core
import numpy as np

from whale_jax.models import config as config_lib

TUNING = {
    "cpu": {"attention": "blockwise", "attention_block_size": 256, "unroll_layers": True},
}


# XLA's CPU compiler hands a program its temporaries as one block, which glibc's malloc maps
# and unmaps at every execution once it is over 32 MiB (the largest size it reuses): the ~3M
# step's 86 MiB at 4 x 128 cost 22 thousand page faults a step, a fifth of its time. Cut into
# heaps no larger than the program's largest value (at least HEAP_FLOOR), they come back from
# malloc's free lists instead (faults ~0-3 thousand; the ~3M 4 x 128 step 0.79-0.88x torch's
# -> 0.90-0.96x). A program with a value over HEAP_CEILING keeps the one block: its largest
# values are mapped afresh anyway, and the ~100M step ran no faster in heaps (its temporaries
# grew from 1.0 to 1.7 GiB). Heaps below the largest value would make XLA warn once per value.
HEAP_FLOOR, HEAP_CEILING = 1 << 20, 16 << 20


def largest_value_bytes(jaxpr) -> int:
  """Bytes of the largest array any equation of jaxpr (or of a jaxpr inside one) produces.

  An unrolled scan's stacked outputs are left out: XLA compiles them as the steps' own values.
  """
  largest = 0
  for equation in jaxpr.eqns:
    unrolled = (equation.primitive.name == "scan" and  # jax writes unroll=True as the length
                int(equation.params["unroll"]) >= equation.params["length"])
    for var in () if unrolled else equation.outvars:  # an unrolled loop's stacks are its steps'
      aval = var.aval
      if hasattr(aval, "shape") and hasattr(aval, "dtype"):
        largest = max(largest, int(np.prod(aval.shape)) * np.dtype(aval.dtype).itemsize)
    for inner in jax_core.jaxprs_in_params(equation.params):
      largest = max(largest, largest_value_bytes(inner))
  return largest


COMPILER_OPTION_PLATFORMS = ("cpu",)  # where compiler_options can return options


def compiler_options(platform: str, closed_jaxpr) -> dict:
  """The XLA options to compile closed_jaxpr (the traced step) with on platform.

  On CPU, the temporaries in heaps (above); none while JAX's persistent compilation cache is
  on: XLA-CPU serializes only a program whose temporaries are one block.
  """
  if platform not in COMPILER_OPTION_PLATFORMS or jax.config.jax_compilation_cache_dir:
    return {}
  largest = largest_value_bytes(closed_jaxpr.jaxpr)
  if largest > HEAP_CEILING:
    return {}
  return {"xla_multiheap_size_constraint_per_heap": max(HEAP_FLOOR, largest)}


def tuned(model_config: config_lib.ModelConfig, platform: str) -> config_lib.ModelConfig:
  """model_config with TUNING[platform] in place of the fields left at their defaults."""
  defaults = {field.name: field.default for field in dataclasses.fields(model_config)}
  return model_config.replace(**{
      name: value for name, value in TUNING.get(platform, {}).items()
      if getattr(model_config, name) == defaults[name]})
