"""Layout.choose: the XLA-CPU choices on CPU only, decode_step where it supports the model."""
import pytest

from tests.sampling import tiny_model
from whale_jax.models import ModelConfig
from whale_jax.sampling.layout import Layout

HYBRID = ModelConfig(
    model_type="qwen3_5", vocab_size=40, num_layers=3, embed_dim=24, mlp_dim=40, num_heads=4,
    num_kv_heads=2, head_dim=8, partial_rotary_factor=0.5, tie_embeddings=False,
    layer_types=("linear_attention", "linear_attention", "full_attention"),
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=4,
    linear_value_head_dim=6, linear_conv_width=4, rms_norm_eps=1e-2)


def test_cpu_unrolls_and_moves_bits_elsewhere_plain():
  assert Layout.choose(tiny_model.CONFIG, "cpu") == Layout(unrolled=True, bits=True)
  assert Layout.choose(tiny_model.CONFIG, "tpu") == Layout()
  assert Layout.choose(tiny_model.CONFIG, "gpu") == Layout()
  assert Layout.choose(tiny_model.CONFIG, "cpu", unrolled=False) == Layout(bits=True)


def test_hybrid_models_keep_the_stacked_cache():
  assert Layout.choose(HYBRID, "cpu") == Layout(unrolled=False, bits=True)
  with pytest.raises(ValueError, match="does not support this model"):
    Layout.choose(HYBRID, "cpu", unrolled=True)


def test_weight_bits_only_for_plain_16_bit_models_with_bits():
  bfloat16 = tiny_model.CONFIG.replace(param_dtype="bfloat16", compute_dtype="bfloat16")
  assert Layout(bits=True).weight_bits(bfloat16)
  assert not Layout(bits=False).weight_bits(bfloat16)
  assert not Layout(bits=True).weight_bits(tiny_model.CONFIG)  # float32: its own bits
  assert not Layout(bits=True).weight_bits(
      HYBRID.replace(param_dtype="bfloat16", compute_dtype="bfloat16"))


def test_for_batch_sets_only_transposed():
  layout = Layout.choose(tiny_model.CONFIG, "cpu")
  assert layout.for_batch(tiny_model.CONFIG, 1) == layout
  assert layout.for_batch(tiny_model.CONFIG, 8) == Layout(unrolled=True, bits=True,
                                                          transposed=True)
  hash(layout.for_batch(tiny_model.CONFIG, 8))  # a static argument of the decode program
