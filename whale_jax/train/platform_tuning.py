"""The train step's compile choices per platform: speed only, never the math.

make_train_step compiles tuned(model_config, its mesh's platform). The model code stays plain:
these are ModelConfig fields any config may set (attention, attention_block_size,
unroll_layers); a platform's choice replaces only a field left at its default, so a value the
user set is kept.

XLA's CPU compiler: blockwise attention in 128-long blocks, whose scores stay in the cores'
caches and whose backward pass saves no [T, S] probabilities (one ~100M layer at 2 x 512 tokens,
forward + backward on 2 cores: 73 ms, against 132 ms in one 512-long block); and the layer loop
unrolled, without the loop's stacked residuals and zeroed gradient stacks (~100M at 4 x 128: a
10% faster step, a compile twice as long). docs/benchmarks.md, "Training throughput".
"""
import dataclasses

from whale_jax.models import config as config_lib

TUNING = {
    "cpu": {"attention": "blockwise", "attention_block_size": 128, "unroll_layers": True},
}


def tuned(model_config: config_lib.ModelConfig, platform: str) -> config_lib.ModelConfig:
  """model_config with TUNING[platform] in place of the fields left at their defaults."""
  defaults = {field.name: field.default for field in dataclasses.fields(model_config)}
  return model_config.replace(**{
      name: value for name, value in TUNING.get(platform, {}).items()
      if getattr(model_config, name) == defaults[name]})
