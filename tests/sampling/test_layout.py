"""Layout.choose: the XLA-CPU choices on CPU only, decode_step where it supports the model."""
import os
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.sampling import tiny_model
from whale_jax.models import ModelConfig
from whale_jax.models import decoder
from whale_jax.sampling import layout as layout_lib
from whale_jax.sampling.layout import Layout

HYBRID = ModelConfig(
    model_type="qwen3_5", vocab_size=40, num_layers=3, embed_dim=24, mlp_dim=40, num_heads=4,
    num_kv_heads=2, head_dim=8, partial_rotary_factor=0.5, tie_embeddings=False,
    layer_types=("linear_attention", "linear_attention", "full_attention"),
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=4,
    linear_value_head_dim=6, linear_conv_width=4, rms_norm_eps=1e-2)


@pytest.fixture
def intel(monkeypatch):
  """Layout.choose as on an Intel CPU, whatever this machine's is."""
  monkeypatch.setattr(layout_lib, "cpu_vendor", lambda: "GenuineIntel")


def test_cpu_unrolls_and_moves_bits_elsewhere_plain(intel):
  assert Layout.choose(tiny_model.CONFIG, "cpu") == Layout(unrolled=True, bits=True,
                                                           row_loops=True)
  assert Layout.choose(tiny_model.CONFIG, "tpu") == Layout()
  assert Layout.choose(tiny_model.CONFIG, "gpu") == Layout()
  assert Layout.choose(tiny_model.CONFIG, "cpu", unrolled=False) == Layout(bits=True, row_loops=True)


def test_float32_decodes_in_columns_on_amd_cpus_only(monkeypatch):
  monkeypatch.setattr(layout_lib, "cpu_vendor", lambda: "AuthenticAMD")
  assert Layout.choose(tiny_model.CONFIG, "cpu") == Layout(
      unrolled=True, bits=True, row_loops=True, float32_columns=True)
  assert Layout.choose(tiny_model.CONFIG, "tpu") == Layout()
  monkeypatch.setattr(layout_lib, "cpu_vendor", lambda: "")  # unknown: as measured on Intel
  assert not Layout.choose(tiny_model.CONFIG, "cpu").float32_columns


def test_cpu_vendor_reads_proc_cpuinfo():
  """The vendor_id line of /proc/cpuinfo, read here by grep."""
  if not os.path.exists("/proc/cpuinfo"):
    assert layout_lib.cpu_vendor() == ""
    return
  line = subprocess.run(["grep", "-m1", "^vendor_id", "/proc/cpuinfo"], capture_output=True,
                        text=True, check=False).stdout
  assert layout_lib.cpu_vendor() == line.partition(":")[2].strip()


def test_hybrid_models_keep_the_stacked_cache(intel):
  assert Layout.choose(HYBRID, "cpu") == Layout(unrolled=False, bits=True, row_loops=True)
  with pytest.raises(ValueError, match="does not support this model"):
    Layout.choose(HYBRID, "cpu", unrolled=True)


def test_stores_bits_only_for_plain_16_bit_models_with_bits():
  bfloat16 = tiny_model.CONFIG.replace(param_dtype="bfloat16", compute_dtype="bfloat16")
  assert Layout(bits=True).stores_bits(bfloat16)
  assert not Layout(bits=False).stores_bits(bfloat16)
  assert not Layout(bits=True).stores_bits(tiny_model.CONFIG)  # float32: its own bits
  assert not Layout(bits=True).stores_bits(
      HYBRID.replace(param_dtype="bfloat16", compute_dtype="bfloat16"))


def test_store_weights_keeps_every_value_and_stores_16_bit_floats_as_bits():
  """store_weights: the embedding and layer weights as uint16 whose bits are the bfloat16
  values (checked through numpy's view, not through kv_cache); the rest untouched; float32
  params returned as they are."""
  bfloat16 = tiny_model.CONFIG.replace(param_dtype="bfloat16", compute_dtype="bfloat16")
  params = jax.tree.map(lambda p: p.astype(jnp.bfloat16),
                        decoder.init_params(tiny_model.CONFIG, jax.random.key(0)))
  stored = Layout(bits=True).store_weights(params, bfloat16)
  for name in ("embedding", "layers"):
    for kept, original in zip(jax.tree.leaves(stored[name]), jax.tree.leaves(params[name])):
      assert kept.dtype == np.uint16
      np.testing.assert_array_equal(np.asarray(kept), np.asarray(original).view(np.uint16))
  assert stored["final_norm"] is params["final_norm"]
  float32 = decoder.init_params(tiny_model.CONFIG, jax.random.key(0))
  assert Layout(bits=True).store_weights(float32, tiny_model.CONFIG) is float32


def test_for_batch_sets_only_transposed(intel):
  """[out, in] for batches of several rows, [in, out] for one row, in both dtypes
  (docs/benchmarks.md has the measurements behind it)."""
  layout = Layout.choose(tiny_model.CONFIG, "cpu")
  assert layout.for_batch(tiny_model.CONFIG, 1) == layout
  assert layout.for_batch(tiny_model.CONFIG, 8) == Layout(unrolled=True, bits=True,
                                                          transposed=True, row_loops=True)
  hash(layout.for_batch(tiny_model.CONFIG, 8))  # a static argument of the decode program


def test_for_batch_with_float32_columns_puts_large_float32_batches_in_columns():
  """columns: float32 decodes of several rows of models with at least COLUMNS_MIN_BYTES of
  weights; smaller float32 models keep [in, out] at every batch size, and 16-bit ones go
  [out, in] (in columns by decode_step.in_columns' own rule, at even batch sizes)."""
  layout = Layout(unrolled=True, float32_columns=True)
  small = tiny_model.CONFIG
  large = small.replace(vocab_size=8192, embed_dim=1024)  # >= 32 MiB of float32
  assert small.num_params() * 4 < layout_lib.COLUMNS_MIN_BYTES <= large.num_params() * 4
  for batch_size in (2, 3, 8):
    assert layout.for_batch(large, batch_size) == Layout(
        unrolled=True, transposed=True, columns=True, float32_columns=True)
    assert layout.for_batch(small, batch_size) == layout
    for config in (small, large):
      assert layout.for_batch(config.replace(param_dtype="bfloat16", compute_dtype="bfloat16"),
                              batch_size) == Layout(unrolled=True, transposed=True,
                                                    float32_columns=True)
  for config in (small, large, large.replace(compute_dtype="bfloat16")):
    assert layout.for_batch(config, 1) == layout
