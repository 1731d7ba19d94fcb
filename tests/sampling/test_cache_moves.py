"""The sampler's KV moves between caches (decode.insert, prefill_with_prefix's block saves),
with and without the layout's row loops, against numpy indexing of the same arrays."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.sampling import tiny_model
from whale_jax.sampling import decode
from whale_jax.sampling import slots as slots_lib
from whale_jax.sampling.layout import Layout

CONFIG = tiny_model.CONFIG
SLOTS, CACHE, ROWS, PREFILL = 4, 24, 3, 16


def _random(rng, shape, dtype):
  return jnp.asarray(rng.normal(size=shape).astype(np.float32)).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("unrolled", [True, False])
@pytest.mark.parametrize("row_loops", [True, False])
def test_insert_copies_each_started_row_into_its_slot(dtype, unrolled, row_loops):
  config = dataclasses.replace(CONFIG, compute_dtype=dtype)
  layout = Layout(unrolled=unrolled, bits=True, row_loops=row_loops)
  rng = np.random.default_rng(0)
  slots = decode.init_slots(config, SLOTS, CACHE, 2, layout)
  # Every slot holds other numbers first, so that what is not written shows.
  slots["cache"] = jax.tree.map(lambda x: x if x.dtype == jnp.int32 else
                                _random(rng, x.shape, x.dtype), slots["cache"])
  before = jax.tree.map(np.asarray, slots)
  shape = (config.num_layers, ROWS, PREFILL, config.num_kv_heads, config.head_dim)
  prefilled = {"key": _random(rng, shape, dtype), "value": _random(rng, shape, dtype),
               "length": jnp.asarray([5, 16, 9], jnp.int32)}
  new = slots_lib.empty_insert(SLOTS, 2)
  starts = [(2, 1), (0, 1), (SLOTS, 2), (3, 0)]  # (slot, row): row 1 twice; a padding entry
  for m, (slot, row) in enumerate(starts):
    new["slot"][m], new["row"][m], new["token"][m], new["remaining"][m] = slot, row, 7 + m, 3
  after = jax.jit(decode.insert, static_argnums=3)(slots, prefilled, new, layout)

  key, value = before["cache"]["key"], before["cache"]["value"]
  if unrolled:  # per layer [B, K, H, S] keys, [B, K, S, H] values
    key, value = [np.array(k) for k in key], [np.array(v) for v in value]
  else:  # [L, B, S, K, H]
    key, value = np.array(key), np.array(value)
  length = before["cache"]["length"].copy()
  for slot, row in starts:
    if slot >= SLOTS:
      continue
    rows_key = np.asarray(prefilled["key"][:, row])  # [L, T, K, H]
    rows_value = np.asarray(prefilled["value"][:, row])
    for layer in range(config.num_layers):
      if unrolled:
        key[layer][slot, :, :, :PREFILL] = rows_key[layer].transpose(1, 2, 0)
        value[layer][slot, :, :PREFILL] = rows_value[layer].transpose(1, 0, 2)
      else:
        key[layer, slot, :PREFILL] = rows_key[layer]
        value[layer, slot, :PREFILL] = rows_value[layer]
    length[slot] = prefilled["length"][row]
  for expected, actual in zip(jax.tree.leaves((key, value)),
                              jax.tree.leaves((after["cache"]["key"], after["cache"]["value"]))):
    assert actual.dtype == jnp.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(actual.astype(jnp.float32)),
                                  np.asarray(jnp.asarray(expected).astype(jnp.float32)))
  np.testing.assert_array_equal(after["cache"]["length"], length)
  np.testing.assert_array_equal(after["token"], [8, 0, 7, 10])
  np.testing.assert_array_equal(after["remaining"], [3, 0, 3, 3])


@pytest.mark.parametrize("row_loops", [True, False])
def test_prefill_with_prefix_saves_exactly_the_listed_blocks(row_loops):
  layout = Layout(unrolled=True, bits=True, row_loops=row_loops)
  rng = np.random.default_rng(1)
  params = tiny_model.params(0)
  block, pages_in_pool = 4, 12
  pool = jax.tree.map(lambda x: _random(rng, x.shape, x.dtype),
                      decode.init_pool(CONFIG, pages_in_pool, block))
  before = jax.tree.map(np.asarray, pool)
  tokens = jnp.asarray(rng.integers(3, 200, (ROWS, PREFILL)), jnp.int32)
  lengths = jnp.asarray([13, 16, 6], jnp.int32)
  # Row 0 reads pages 5 and 2 as its first 8 positions; the others compute from 0.
  pages = np.full((ROWS, PREFILL // block), slots_lib.NO_PAGE, np.int32)
  pages[0, :2] = [5, 2]
  prefix_lengths = jnp.asarray([8, 0, 0], jnp.int32)
  save = np.full((ROWS, PREFILL // block), slots_lib.NO_PAGE, np.int32)
  save[0, 2], save[1, :] = 9, [0, 1, 3, 11]  # row 0's third block; all of row 1's
  cache, saved = jax.jit(decode.prefill_with_prefix, static_argnums=(1, 8, 9))(
      params, CONFIG, tokens, lengths, pool, pages, prefix_lengths, save, 4, layout)
  for name in ("key", "value"):
    expected = before[name].copy()  # [L, N, Z, K, H]
    computed = np.asarray(cache[name])  # [L, P, S, K, H]
    np.testing.assert_array_equal(computed[:, 0, :8],
                                  before[name][:, [5, 2]].reshape(computed[:, 0, :8].shape))
    for row, block_index in zip(*np.nonzero(save < pages_in_pool)):
      expected[:, save[row, block_index]] = computed[
          :, row, block * block_index:block * (block_index + 1)]
    np.testing.assert_array_equal(np.asarray(saved[name]), expected)
