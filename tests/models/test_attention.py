"""Blockwise (online-softmax) attention against the dense version and a numpy loop."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from whale_jax.models import attention

# Distinct sizes; LENGTH is not a multiple of BLOCK, so the last blocks are padded.
BATCH, LENGTH, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK = 3, 37, 6, 3, 8, 8


def _inputs(seed=0, key_length=LENGTH):
  rng = np.random.default_rng(seed)
  query = rng.normal(size=(BATCH, LENGTH, NUM_HEADS, HEAD_DIM)).astype(np.float32)
  key = rng.normal(size=(BATCH, key_length, NUM_KV_HEADS, HEAD_DIM)).astype(np.float32)
  value = rng.normal(size=(BATCH, key_length, NUM_KV_HEADS, HEAD_DIM)).astype(np.float32)
  return query, key, value


def _packed_mask():
  """Row 0: three packed segments then padding (segment 0); row 1: one segment with a
  padding key inside (attention_mask 0); row 2: left padding (first queries see nothing)."""
  segments = np.zeros((BATCH, LENGTH), np.int32)
  segments[0, :10], segments[0, 10:29], segments[0, 29:33] = 1, 2, 3
  segments[1, :] = 1
  segments[2, 5:] = 1
  valid = np.ones((BATCH, LENGTH), bool)
  valid[1, 3] = False
  valid[2, :5] = False
  return attention.sequence_mask(LENGTH, BATCH, jnp.asarray(valid), jnp.asarray(segments))


def _reference(query, key, value, allowed):
  """One (row, query, head) at a time; rows that see no key give zeros."""
  out = np.zeros_like(query)
  group = NUM_HEADS // NUM_KV_HEADS
  for b, t, n in np.ndindex(*query.shape[:3]):
    if not allowed[b, t].any():
      continue
    scores = key[b, :, n // group] @ query[b, t, n] / np.sqrt(HEAD_DIM)
    scores = np.where(allowed[b, t], scores, -np.inf)
    weights = np.exp(scores - scores.max())
    out[b, t, n] = weights / weights.sum() @ value[b, :, n // group]
  return out


def test_blockwise_matches_numpy_with_packing_and_padding():
  query, key, value = _inputs()
  mask = _packed_mask()
  allowed = np.asarray(mask.dense())
  actual = attention.attend_blockwise(jnp.asarray(query), jnp.asarray(key), jnp.asarray(value),
                                      mask, BLOCK)
  np.testing.assert_allclose(actual, _reference(query, key, value, allowed), atol=1e-5)


def test_blockwise_equals_dense_forward_and_gradient():
  query, key, value = (jnp.asarray(x) for x in _inputs(1))
  mask = _packed_mask()
  seen = np.asarray(mask.dense()).any(-1)  # [B, T]: queries with at least one key
  weights = jnp.asarray(np.random.default_rng(2).normal(size=query.shape), jnp.float32)
  weights = weights * seen[:, :, None, None]  # the loss ignores queries that see nothing

  def loss(fn):
    return lambda q, k, v: jnp.sum(fn(q, k, v) * weights)

  dense = lambda q, k, v: attention.attend(q, k, v, mask.dense())
  blockwise = lambda q, k, v: attention.attend_blockwise(q, k, v, mask, BLOCK)
  np.testing.assert_allclose(np.asarray(blockwise(query, key, value))[seen],
                             np.asarray(dense(query, key, value))[seen], atol=1e-5)
  dense_grads = jax.grad(loss(dense), argnums=(0, 1, 2))(query, key, value)
  blockwise_grads = jax.jit(jax.grad(loss(blockwise), argnums=(0, 1, 2)))(query, key, value)
  for name, expected, actual in zip(("query", "key", "value"), dense_grads, blockwise_grads):
    np.testing.assert_allclose(actual, expected, atol=1e-5, err_msg=name)


def test_blockwise_against_a_cache_with_offsets():
  """Prefill into a cache: queries at slots offset + t over S > T keys, some never written."""
  capacity = 2 * LENGTH + 3
  query, key, value = (jnp.asarray(x) for x in _inputs(3, key_length=capacity))
  offsets = jnp.asarray([0, 5, LENGTH])
  query_index = offsets[:, None] + jnp.arange(LENGTH)[None]
  mask = attention.CausalMask(query_index, capacity)
  expected = attention.attend(query, key, value, mask.dense())
  actual = attention.attend_blockwise(query, key, value, mask, BLOCK)
  np.testing.assert_allclose(actual, expected, atol=1e-5)


def test_one_query_block_over_a_long_cache_forward_and_gradient():
  """A prefill chunk: T <= block queries at offsets over S >> T keys, so the keys stay as stored
  and only the blocks seen move (keys_stored); forward and gradients against the dense
  version."""
  chunk, capacity = BLOCK - 2, 4 * BLOCK + 3
  rng = np.random.default_rng(4)
  query = jnp.asarray(rng.normal(size=(BATCH, chunk, NUM_HEADS, HEAD_DIM)), jnp.float32)
  key, value = (jnp.asarray(rng.normal(size=(BATCH, capacity, NUM_KV_HEADS, HEAD_DIM)),
                            jnp.float32) for _ in range(2))
  offsets = jnp.asarray([0, 9, capacity - chunk])  # first block only; across two; the last
  mask = attention.CausalMask(offsets[:, None] + jnp.arange(chunk)[None], capacity)
  weights = jnp.asarray(rng.normal(size=query.shape), jnp.float32)
  dense = lambda q, k, v: attention.attend(q, k, v, mask.dense())
  blockwise = lambda q, k, v: attention.attend_blockwise(q, k, v, mask, BLOCK)
  np.testing.assert_allclose(blockwise(query, key, value), dense(query, key, value), atol=1e-5)
  loss = lambda fn: lambda q, k, v: jnp.sum(fn(q, k, v) * weights)
  dense_grads = jax.grad(loss(dense), argnums=(0, 1, 2))(query, key, value)
  blockwise_grads = jax.jit(jax.grad(loss(blockwise), argnums=(0, 1, 2)))(query, key, value)
  for name, expected, actual in zip(("query", "key", "value"), dense_grads, blockwise_grads):
    np.testing.assert_allclose(actual, expected, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("choice,expected", [("dense", "dense"), ("blockwise", "blockwise"),
                                             ("splash", "blockwise")])
def test_implementation_choice(choice, expected):
  """splash falls back to blockwise for shapes (and platforms) the kernel does not take."""
  from whale_jax.models import config as config_lib
  config = config_lib.ModelConfig(vocab_size=11, num_layers=1, embed_dim=8, mlp_dim=8,
                                  num_heads=2, num_kv_heads=1, head_dim=4, attention=choice)
  assert attention.implementation(config, _packed_mask()) == expected


def test_auto_is_dense_for_one_block_and_blockwise_beyond():
  from whale_jax.models import config as config_lib
  config = config_lib.ModelConfig(vocab_size=11, num_layers=1, embed_dim=8, mlp_dim=8,
                                  num_heads=2, num_kv_heads=1, head_dim=4,
                                  attention_block_size=16)
  assert attention.implementation(config, _packed_mask()) == "blockwise"  # 37 > 16 keys
  decode = attention.CausalMask(jnp.zeros((BATCH, 1), jnp.int32), LENGTH)
  assert attention.implementation(config, decode) == "dense"  # one query: nothing to save
  assert attention.implementation(config.replace(attention_block_size=64),
                                  _packed_mask()) == "dense"


@pytest.mark.slow  # the Pallas kernel in interpret mode on CPU: ~2 minutes
def test_splash_kernel_equals_dense_forward_and_gradient():
  """The TPU splash path (run here in interpret mode): layout, scaling and segment masks."""
  from whale_jax.models import splash_attention
  batch_size, length, num_heads, num_kv_heads, head_dim = 1, 256, 2, 1, 128
  rng = np.random.default_rng(4)
  query = jnp.asarray(rng.normal(size=(batch_size, length, num_heads, head_dim)), jnp.float32)
  key, value = (jnp.asarray(rng.normal(size=(batch_size, length, num_kv_heads, head_dim)),
                            jnp.float32) for _ in range(2))
  segments = np.ones((batch_size, length), np.int32)
  segments[0, 100:], segments[0, 200:] = 2, 0  # two samples, then padding
  segments = jnp.asarray(segments)
  mask = attention.sequence_mask(length, batch_size, None, segments).dense()
  weights = jnp.asarray(rng.normal(size=query.shape), jnp.float32)
  splash = lambda q, k, v: splash_attention.attend(q, k, v, segments, interpret=True)
  dense = lambda q, k, v: attention.attend(q, k, v, mask)
  np.testing.assert_allclose(splash(query, key, value), dense(query, key, value), atol=1e-5)
  loss = lambda fn: lambda q, k, v: jnp.sum(fn(q, k, v) * weights)
  for expected, actual in zip(jax.grad(loss(dense), argnums=(0, 1, 2))(query, key, value),
                              jax.grad(loss(splash), argnums=(0, 1, 2))(query, key, value)):
    np.testing.assert_allclose(actual, expected, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("key_length", [LENGTH, 40])  # odd: plain transposes; even: split ones
def test_inference_layout_matches_numpy(key_length, dtype):
  """attend(inference=True) against the numpy loop on a causal mask over a longer cache
  (queries at its end, padded keys past them): float32 (attend()'s own form) to rounding,
  bfloat16 (the inference layout) to the dtype's precision (inputs rounded to it in both)."""
  query, key, value = _inputs(2, key_length)
  query, key, value = (np.asarray(jnp.asarray(x).astype(dtype).astype(jnp.float32))
                       for x in (query, key, value))
  offset = max(key_length - LENGTH - 2, 0)  # every query sees a key
  query_index = offset + np.arange(LENGTH)[None].repeat(BATCH, 0)
  allowed = np.arange(key_length)[None, None, :] <= query_index[:, :, None]
  actual = jax.jit(attention.attend, static_argnums=4)(
      *(jnp.asarray(x).astype(dtype) for x in (query, key, value)), jnp.asarray(allowed), True)
  assert actual.dtype == jnp.dtype(dtype)
  expected = _reference(query, key, value, allowed)
  if dtype == "float32":
    tolerance = 1e-5
  else:
    # bfloat16 rounding (u = 2**-8) of the scores s moves each softmax weight by a relative
    # 2 u max|s| at most, of the weights themselves by u, and of the output by u |out|; with
    # the products accumulating in float32, |out - expected| <= u (|expected| + max|v| (1 + 2
    # max|s|)) (0.17-0.21 here; measured gap 0.011, which a fixed 2e-2 held within 2x).
    scores = np.einsum("btnh,bsnh->bnts", query,
                       np.repeat(key, NUM_HEADS // NUM_KV_HEADS, axis=2)) / np.sqrt(HEAD_DIM)
    largest_score = np.max(np.abs(np.where(allowed[:, None], scores, 0)))
    tolerance = 2.0**-8 * (np.abs(expected) + np.max(np.abs(value)) * (1 + 2 * largest_score))
  gap = np.abs(np.asarray(actual.astype(jnp.float32)) - expected)
  assert np.all(gap <= tolerance)
