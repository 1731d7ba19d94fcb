"""kv_cache's storage helpers: 16-bit floats stored as their bits, against hand-written bit
patterns (bfloat16 1.0 is 0x3F80, -2.0 is 0xC000; float16 1.0 is 0x3C00)."""
import jax.numpy as jnp
import numpy as np
import pytest

from whale_jax.models import kv_cache


def test_as_bits_and_load_round_trip_the_bit_patterns():
  values = jnp.asarray([1.0, -2.0], jnp.bfloat16)
  bits = kv_cache.as_bits(values)
  assert bits.dtype == jnp.uint16
  np.testing.assert_array_equal(np.asarray(bits), [0x3F80, 0xC000])
  np.testing.assert_array_equal(np.asarray(kv_cache.load(bits, jnp.bfloat16), np.float32),
                                [1.0, -2.0])
  half = kv_cache.as_bits(jnp.asarray([1.0], jnp.float16))
  np.testing.assert_array_equal(np.asarray(half), [0x3C00])


def test_float32_is_its_own_storage_and_load_casts_floats():
  values = jnp.asarray([1.5, -3.0], jnp.float32)
  assert kv_cache.as_bits(values) is values
  assert kv_cache.from_bits(values, jnp.bfloat16) is values  # not bits: left as it is
  loaded = kv_cache.load(values, jnp.bfloat16)
  assert loaded.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(loaded, np.float32), [1.5, -3.0])


def test_store_writes_bits_into_a_bits_buffer_and_casts_otherwise():
  value = jnp.asarray([1.0], jnp.bfloat16)
  np.testing.assert_array_equal(np.asarray(kv_cache.store(value, jnp.uint16)), [0x3F80])
  assert kv_cache.store(value, jnp.float32).dtype == jnp.float32
  with pytest.raises(ValueError, match="cannot go into a buffer of 16-bit float bits"):
    kv_cache.store(jnp.asarray([1.0], jnp.float32), jnp.uint16)
  with pytest.raises(ValueError, match="bits stand for a 16-bit float"):
    kv_cache.from_bits(jnp.asarray([0x3F80], jnp.uint16), jnp.float32)
