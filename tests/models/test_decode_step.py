"""decode_step (one buffer per layer, unrolled) equals the plain full forward pass."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from whale_jax.models import ModelConfig
from whale_jax.models import decode_step
from whale_jax.models import decoder
from whale_jax.models import kv_cache

CONFIG = ModelConfig(vocab_size=61, num_layers=3, embed_dim=40, mlp_dim=56, num_heads=4,
                     num_kv_heads=2, head_dim=12, model_type="qwen2", qk_norm=False,
                     qkv_bias=True, tie_embeddings=False, rope_theta=10_000.0)
BATCH, LENGTH, CAPACITY = 3, 9, 16


@functools.cache
def _params(config):
  params = jax.jit(decoder.init_params, static_argnums=0)(config, jax.random.key(0))
  # Non-trivial norms and biases so that every parameter matters.
  rng = np.random.default_rng(1)
  return jax.tree.map(lambda p: p + 0.1 * rng.normal(size=p.shape).astype(np.float32), params)


def _forward(params, config, tokens):
  return np.asarray(jax.jit(decoder.forward, static_argnums=1)(params, config, tokens))


NUM_STEPS = 4
# (transposed, columns) of split_layers: [in, out] rows; [out, in] contracted on the right
# (16-bit even batches: on the left, in columns); [out, in] on the left, in columns.
FORMS = ((False, False), (True, False), (True, True))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _ragged_run(config, low, reference_params, params, tokens, prompt_lengths):
  """One program per case (compiling is most of the time): the float32 full forward pass
  over reference_params, the same pass in low's dtype over params, and from one prefill
  NUM_STEPS steps in each weight form (FORMS), each step also run with vocab_major=True."""
  batch = tokens.shape[0]
  prefill = jnp.where(jnp.arange(LENGTH)[None] < prompt_lengths[:, None], tokens, 0)
  stacked = kv_cache.init(low, batch, LENGTH)
  _, stacked = decoder.forward_with_cache(params, low, prefill[:, :5], stacked,
                                          num_new_tokens=prompt_lengths)
  cache = decode_step.init_cache(low, batch, CAPACITY)
  keys, values = decode_step.from_stacked(stacked["key"], stacked["value"])
  cache = {"key": tuple(c.at[:, :, :, :5].set(k[..., :5]) for c, k in zip(cache["key"], keys)),
           "value": tuple(c.at[:, :, :5].set(v[:, :, :5]) for c, v in zip(cache["value"], values)),
           "length": prompt_lengths}
  positions = prompt_lengths + jnp.arange(NUM_STEPS)[:, None]  # [steps, B]
  inputs = tokens[jnp.arange(batch), positions]  # [steps, B]
  runs = {}
  for form in FORMS:
    layers = decode_step.split_layers(params, low, *form)
    if low.compute_dtype == "bfloat16" and config.tie_embeddings:  # stored as bits: the sampler
      layers = dataclasses.replace(layers, embedding=kv_cache.as_bits(params["embedding"]))

    def one_step(cache, token, layers=layers):
      columns, _ = decode_step.step(params, layers, low, token, cache, None,
                                    vocab_major=True)  # [V, B]: the same numbers
      logits, cache = decode_step.step(params, layers, low, token, cache, None)
      return cache, (logits, columns)

    runs[form] = jax.lax.scan(one_step, cache, inputs)
  full = decoder.forward(reference_params, config, tokens)
  # bfloat16's own gap: the full forward pass over the same weights in bfloat16
  rounded = decoder.forward(params, low, tokens).astype(jnp.float32)
  return full, rounded, runs


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("prompt_lengths", [(2, 5, 3), (2, 5, 3, 1)])
def test_ragged_steps_equal_full_forward(prompt_lengths, tied, dtype):
  """Rows prefilled to different lengths, then decoded one token at a time, in both weight
  layouts, with a tied or separate unembedding (split_layers copies it into the layout or
  leaves it to the params). The reference is the float32 full forward pass over the same
  weights (rounded to dtype); in bfloat16 the step's activations and KV round to 8 bits.
  An even batch in bfloat16 and [out, in] runs the step on columns (products.left), as
  float32 does with columns=True at any batch size."""
  config = CONFIG.replace(tie_embeddings=tied)
  reference_params = _params(config)
  if dtype != "float32":
    reference_params = jax.tree.map(lambda p: p.astype(dtype).astype(jnp.float32),
                                    reference_params)
  params = jax.tree.map(lambda p: p.astype(dtype), reference_params)
  low = config.replace(param_dtype=dtype, compute_dtype=dtype)
  prompt_lengths = np.array(prompt_lengths, np.int32)
  batch = len(prompt_lengths)
  tokens = np.asarray(jax.random.randint(jax.random.key(2), (batch, LENGTH), 0, 61))
  full, rounded, runs = _ragged_run(config, low, reference_params, params, jnp.asarray(tokens),
                                    jnp.asarray(prompt_lengths))
  positions = prompt_lengths + np.arange(NUM_STEPS)[:, None]  # [steps, B]
  expected = np.asarray(full)[np.arange(batch), positions]
  dtype_gaps = np.max(np.abs(np.asarray(rounded)[np.arange(batch), positions] - expected),
                      axis=(1, 2))
  for form in FORMS:
    transposed, in_columns = form
    layers = jax.eval_shape(lambda p, f=form: decode_step.split_layers(p, low, *f), params)
    assert (layers.unembedding is None) == (tied == transposed)
    assert (layers.transposed, layers.columns) == form
    assert decode_step.in_columns(low, batch, layers) == (
        transposed and (in_columns if dtype == "float32" else batch % 2 == 0))
    cache, (logits, columns) = runs[form]
    np.testing.assert_array_equal(np.swapaxes(np.asarray(columns), 1, 2), logits)
    gaps = np.max(np.abs(np.asarray(logits, np.float32) - expected), axis=(1, 2))
    if dtype == "float32":  # measured at most 3.5e-6
      assert max(gaps) <= 1e-5, (form, max(gaps))
    else:  # bfloat16 rounding, not the step, sets the gap: measured 0.83x the forward pass's
      assert max(gaps) <= 2 * max(dtype_gaps), (form, max(gaps), max(dtype_gaps))
    np.testing.assert_array_equal(cache["length"], prompt_lengths + NUM_STEPS)


def test_columns_need_transposed_weights():
  with pytest.raises(ValueError, match="columns=True.*transposed=True"):
    decode_step.split_layers(_params(CONFIG), CONFIG, transposed=False, columns=True)


def test_rows_that_do_not_advance_keep_their_length_and_later_match():
  config = CONFIG.replace(model_type="qwen3", qk_norm=True, qkv_bias=False, tie_embeddings=True)
  params = _params(config)
  tokens = np.asarray(jax.random.randint(jax.random.key(3), (2, 4), 0, 61))
  cache = decode_step.init_cache(config, 2, 8)
  layers = jax.jit(decode_step.split_layers, static_argnums=1)(params, config)
  # Row 1 idles (advance 0) on its first step, then reads tokens 0..2 one step late.
  step = jax.jit(lambda p, l, t, c, a: decode_step.step(p, l, config, t, c, a))
  logits = []
  feeds = [(tokens[0, 0], tokens[1, 0], [1, 0]), (tokens[0, 1], tokens[1, 0], [1, 1]),
           (tokens[0, 2], tokens[1, 1], [1, 1]), (tokens[0, 3], tokens[1, 2], [1, 1])]
  for first, second, advance in feeds:
    step_logits, cache = step(params, layers, jnp.asarray([first, second]), cache,
                              jnp.asarray(advance))
    logits.append(np.asarray(step_logits))
  full = _forward(params, config, jnp.asarray(tokens))
  np.testing.assert_allclose(np.stack([l[0] for l in logits]), full[0], atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.stack([l[1] for l in logits[1:]]), full[1, :3], atol=1e-5,
                             rtol=0)
  np.testing.assert_array_equal(cache["length"], [4, 3])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_step_writes_each_rows_key_and_value_at_its_length_only(dtype):
  """The cache after one step, against numpy: row b's new key/value (recomputed here from the
  weights) at position length[b], nothing else changed; a row at capacity writes nothing."""
  config = CONFIG.replace(param_dtype=dtype, compute_dtype=dtype, qkv_bias=False)
  params = jax.tree.map(lambda p: p.astype(dtype), _params(CONFIG))
  rng = np.random.default_rng(4)
  cache = decode_step.init_cache(config, BATCH, CAPACITY)
  before_keys = [rng.normal(size=k.shape).astype(np.float32) for k in cache["key"]]
  before_values = [rng.normal(size=v.shape).astype(np.float32) for v in cache["value"]]
  lengths = np.array([0, 7, CAPACITY], np.int32)  # the last row is full: its write is dropped
  cache = {"key": tuple(jnp.asarray(k, dtype) for k in before_keys),
           "value": tuple(jnp.asarray(v, dtype) for v in before_values),
           "length": jnp.asarray(lengths)}
  tokens = np.array([5, 17, 33])
  layers = jax.jit(decode_step.split_layers, static_argnums=1)(params, config)
  _, after = jax.jit(lambda p, l, t, c: decode_step.step(p, l, config, t, c))(
      params, layers, jnp.asarray(tokens), cache)
  # Layer 0's new value from the embedding, the attention norm and the value projection (no
  # bias, no norm on values, no rope on values), in float32 numpy.
  x = np.asarray(params["embedding"], np.float32)[tokens]
  norm = np.asarray(params["layers"]["attention_norm"][0], np.float32)
  h = x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + config.rms_norm_eps) * norm
  value_weight = np.asarray(params["layers"]["attention"]["value"][0], np.float32)
  expected_value = np.einsum("bd,dkh->bkh", h, value_weight.reshape(CONFIG.embed_dim, 2, 12))
  tolerance = 1e-5 if dtype == "float32" else 0.05
  for layer in range(CONFIG.num_layers):
    got_keys = np.asarray(after["key"][layer], np.float32)
    got_values = np.asarray(after["value"][layer], np.float32)
    written = np.zeros(got_values.shape[:3], bool)  # [B, K, S]
    for row, length in enumerate(lengths):
      if length < CAPACITY:
        written[row, :, length] = True
    unchanged_keys = np.asarray(jnp.asarray(before_keys[layer], dtype), np.float32)
    unchanged_values = np.asarray(jnp.asarray(before_values[layer], dtype), np.float32)
    np.testing.assert_array_equal(np.where(written[:, :, None, :], 0, got_keys),
                                  np.where(written[:, :, None, :], 0, unchanged_keys))
    np.testing.assert_array_equal(np.where(written[..., None], 0, got_values),
                                  np.where(written[..., None], 0, unchanged_values))
    assert not np.any(np.isclose(got_values[written], unchanged_values[written]))
    if layer == 0:
      for row in range(2):
        np.testing.assert_allclose(got_values[row, :, lengths[row]], expected_value[row],
                                   atol=tolerance, rtol=tolerance)
  np.testing.assert_array_equal(after["length"], lengths + 1)


@pytest.mark.parametrize("length", [1, 16, 48, 96, 7, 10])
def test_tree_reduce_matches_numpy(length):
  """The softmax's maximum and sum over the cache: halves and thirds for the sampler's cache
  lengths (2^k, 3 * 2^k), a plain reduction for others (7; 10 halves once, then 5)."""
  x = np.random.default_rng(length).normal(size=(2, 3, length)).astype(np.float32)
  np.testing.assert_array_equal(decode_step._tree_reduce(x, jnp.maximum),
                                x.max(-1, keepdims=True))
  # Any order of an n-term float32 sum is within (n - 1) u sum |x| of the exact sum (Higham,
  # Accuracy and Stability of Numerical Algorithms, 2002, eq. 4.4), u = 2**-24.
  exact = x.astype(np.float64).sum(-1, keepdims=True)
  bound = (length - 1) * 2.0**-24 * np.abs(x.astype(np.float64)).sum(-1, keepdims=True)
  assert np.all(np.abs(np.asarray(decode_step._tree_reduce(x, jnp.add), np.float64) - exact)
                <= bound)
