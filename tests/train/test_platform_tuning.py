"""platform_tuning.tuned: a platform's compile choices, taken only where the config keeps the
field's default."""
from whale_jax.models import config as config_lib
from whale_jax.train import platform_tuning

CONFIG = config_lib.ModelConfig(vocab_size=11, num_layers=2, embed_dim=8, mlp_dim=8,
                                num_heads=2, num_kv_heads=1, head_dim=4)


def test_cpu_tuning_replaces_the_defaults():
  tuned = platform_tuning.tuned(CONFIG, "cpu")
  assert (tuned.attention, tuned.attention_block_size, tuned.unroll_layers) == (
      "blockwise", 128, True)
  assert tuned.replace(attention="auto", attention_block_size=512,
                       unroll_layers=False) == CONFIG  # nothing else changed


def test_cpu_tuning_keeps_fields_set_to_other_values():
  explicit = platform_tuning.tuned(CONFIG.replace(attention="dense", attention_block_size=64),
                                   "cpu")
  assert (explicit.attention, explicit.attention_block_size, explicit.unroll_layers) == (
      "dense", 64, True)


def test_other_platforms_compile_the_config_as_given():
  for platform in ("tpu", "gpu"):
    assert platform_tuning.tuned(CONFIG, platform) == CONFIG
