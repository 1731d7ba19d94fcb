"""Decoder invariants: attention against a numpy loop, cached decode equals the full pass."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from whale_jax.models import ModelConfig
from whale_jax.models import attention
from whale_jax.models import decoder
from whale_jax.models import kv_cache

# Distinct sizes: a swapped axis fails loudly instead of broadcasting.
BATCH, LENGTH, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 2, 7, 6, 3, 4

CONFIG = ModelConfig(vocab_size=61, num_layers=3, embed_dim=40, mlp_dim=56, num_heads=4,
                     num_kv_heads=2, head_dim=12, model_type="qwen3", tie_embeddings=False,
                     rope_theta=10_000.0)

# Jitted once here and shared by the tests (eager calls compile the layer scan at every call).
_forward = jax.jit(decoder.forward, static_argnums=1)
_forward_with_cache = jax.jit(decoder.forward_with_cache, static_argnums=1)


@functools.cache
def _params():
  return jax.jit(decoder.init_params, static_argnums=0)(CONFIG, jax.random.key(0))


def reference_attend(query, key, value, mask):
  """Slow and obviously correct: one (batch, position, head) at a time."""
  encoded = np.zeros_like(query)
  for b, t, n in np.ndindex(*query.shape[:3]):
    kv_head = n // (query.shape[2] // key.shape[2])
    scores = np.where(mask[b, t], key[b, :, kv_head] @ query[b, t, n] / np.sqrt(HEAD_DIM),
                      -np.inf)
    weights = np.exp(scores - scores.max())
    encoded[b, t, n] = weights / weights.sum() @ value[b, :, kv_head]
  return encoded


def test_attend_matches_numpy_reference_with_gqa_and_padding():
  rng = np.random.default_rng(0)
  query = rng.normal(size=(BATCH, LENGTH, NUM_HEADS, HEAD_DIM)).astype(np.float32)
  key = rng.normal(size=(BATCH, LENGTH, NUM_KV_HEADS, HEAD_DIM)).astype(np.float32)
  value = rng.normal(size=(BATCH, LENGTH, NUM_KV_HEADS, HEAD_DIM)).astype(np.float32)
  index = np.broadcast_to(np.arange(LENGTH), (BATCH, LENGTH))
  valid = np.ones((BATCH, LENGTH), bool)
  valid[1, :3] = False  # left padding in row 1
  mask = np.array(attention.causal_mask(jnp.asarray(index), jnp.asarray(index),
                                         jnp.asarray(valid)))
  mask[1, :3, 0] = True  # padded queries see one key so the reference has no all -inf rows
  actual = attention.attend(query, key, value, mask)
  np.testing.assert_allclose(actual, reference_attend(query, key, value, mask), atol=1e-5)


def test_causal_mask_respects_segments():
  index = jnp.arange(5)[None]
  segments = jnp.array([[1, 1, 2, 2, 2]])
  mask = np.asarray(attention.causal_mask(index, index, None, segments, segments))[0]
  expected = np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0],
                       [0, 0, 1, 1, 1]], bool)
  np.testing.assert_array_equal(mask, expected)


@pytest.mark.parametrize("chunks", [(7,), (4, 1, 1, 1), (1, 2, 3, 1)])
def test_cached_decoding_equals_full_forward(chunks):
  params = _params()
  tokens = jax.random.randint(jax.random.key(1), (BATCH, LENGTH), 0, CONFIG.vocab_size)
  full = _forward(params, CONFIG, tokens)
  cache = kv_cache.init(CONFIG, BATCH, LENGTH + 3)
  pieces, start = [], 0
  for size in chunks:
    logits, cache = _forward_with_cache(params, CONFIG, tokens[:, start:start + size], cache)
    pieces.append(logits)
    start += size
  np.testing.assert_allclose(jnp.concatenate(pieces, axis=1), full, atol=1e-5, rtol=0)
  np.testing.assert_array_equal(cache["length"], [LENGTH] * BATCH)


def test_weights_and_cache_stored_as_bits_give_the_same_bfloat16_cache_and_logits():
  """forward_with_cache over weights and a cache stored as bfloat16's bits (uint16: what a
  sampler on CPU passes) equals the pass over the bfloat16 arrays themselves, bitwise, keeps
  the cache stored so, and matches the float32 full pass over the same rounded weights
  (bfloat16 tolerance)."""
  low = CONFIG.replace(param_dtype="bfloat16", compute_dtype="bfloat16")
  reference = jax.tree.map(lambda p: p.astype(jnp.bfloat16).astype(jnp.float32),
                           _params())
  params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), reference)
  as_bits = lambda x: jax.lax.bitcast_convert_type(x, jnp.uint16)
  stored = dict(params, embedding=as_bits(params["embedding"]),
                layers=jax.tree.map(as_bits, params["layers"]))
  tokens = jax.random.randint(jax.random.key(1), (BATCH, LENGTH), 0, CONFIG.vocab_size)
  run = jax.jit(lambda p, t, c: decoder.forward_with_cache(p, low, t, c))
  cache = kv_cache.init(low, BATCH, LENGTH)
  stored_cache = dict(cache, key=as_bits(cache["key"]), value=as_bits(cache["value"]))
  logits, from_stored = run(stored, tokens, stored_cache)
  plain_logits, plain = run(params, tokens, cache)
  assert from_stored["key"].dtype == jnp.uint16 and plain["key"].dtype == jnp.bfloat16
  np.testing.assert_array_equal(logits, plain_logits)
  for name in ("key", "value"):
    np.testing.assert_array_equal(np.asarray(from_stored[name]),
                                  np.asarray(plain[name]).view(np.uint16))
  np.testing.assert_allclose(logits, _forward(reference, CONFIG, tokens), atol=0.1, rtol=0)


def test_cached_decoding_with_ragged_prefill_equals_full_forward():
  """Rows with different prompt lengths: right-padded prefill, then per-row decode offsets."""
  params = _params()
  tokens = np.asarray(jax.random.randint(jax.random.key(2), (BATCH, LENGTH), 0, 61))
  prompt_lengths = np.array([3, 5], np.int32)
  prefill = tokens[:, :5].copy()
  prefill[0, 3:] = 0  # padding beyond row 0's prompt
  cache = kv_cache.init(CONFIG, BATCH, LENGTH)
  _, cache = _forward_with_cache(params, CONFIG, jnp.asarray(prefill), cache,
                                 num_new_tokens=jnp.asarray(prompt_lengths))
  # Next token of each row: row 0 continues at index 3, row 1 at index 5.
  step = jnp.asarray(tokens[np.arange(BATCH), prompt_lengths])[:, None]
  logits, cache = _forward_with_cache(params, CONFIG, step, cache)
  full = _forward(params, CONFIG, jnp.asarray(tokens))
  expected = np.asarray(full)[np.arange(BATCH), prompt_lengths]
  np.testing.assert_allclose(logits[:, 0], expected, atol=1e-5, rtol=0)
  np.testing.assert_array_equal(cache["length"], prompt_lengths + 1)


def test_unrolled_layers_equal_the_layer_scan():
  tokens = jnp.asarray(np.random.default_rng(4).integers(0, CONFIG.vocab_size, (BATCH, LENGTH)))
  loss = lambda params, config: jnp.sum(jnp.sin(decoder.forward(params, config, tokens)))
  value_and_grad = jax.jit(jax.value_and_grad(loss), static_argnums=1)
  expected = value_and_grad(_params(), CONFIG)
  actual = value_and_grad(_params(), CONFIG.replace(unroll_layers=True))
  for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


def test_logical_axes_mirror_params_and_ranks():
  for config in (CONFIG, CONFIG.replace(model_type="qwen2", qk_norm=False, qkv_bias=True,
                                        tie_embeddings=True)):
    shapes = jax.eval_shape(lambda c=config: decoder.init_params(c, jax.random.key(0)))
    axes = decoder.logical_axes(config)
    is_names = lambda x: isinstance(x, tuple)
    assert jax.tree.structure(shapes) == jax.tree.structure(axes, is_leaf=is_names)
    for shape, names in zip(jax.tree.leaves(shapes), jax.tree.leaves(axes, is_leaf=is_names)):
      assert len(shape.shape) == len(names), (shape, names)


def test_num_params_counts_every_parameter():
  for config in (CONFIG, CONFIG.replace(qkv_bias=True, output_bias=True, tie_embeddings=True)):
    shapes = jax.eval_shape(lambda c=config: decoder.init_params(c, jax.random.key(0)))
    assert config.num_params() == sum(np.prod(s.shape) for s in jax.tree.leaves(shapes))


def test_bad_config_names_the_field():
  with pytest.raises(ValueError, match="num_heads=6 is not a multiple of num_kv_heads=4"):
    CONFIG.replace(num_heads=6, num_kv_heads=4)
  with pytest.raises(ValueError, match="model_type='gpt2'"):
    CONFIG.replace(model_type="gpt2")
