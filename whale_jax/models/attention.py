"""Grouped-query causal self-attention as pure functions over a params dict.

Shape letters: B batch, T query length, S key/value length (S == T without a cache),
D model width, N query heads, K key/value heads, G = N // K, H head dim.
Supported: RoPE, Qwen3 q/k RMSNorm, bias on query/key/value (Qwen2) and output.
Not supported: sliding windows, logit soft-capping, attention sinks.
"""
import jax
import jax.numpy as jnp

from whale_jax.models import normalization
from whale_jax.models import rope

NEGATIVE_INFINITY = -2.3819763e38  # finite on purpose: a fully masked row stays finite, not NaN


def init(config, rng):
  """Parameters of one layer's attention (unstacked)."""
  embed, heads, kv_heads, head_dim = (config.embed_dim, config.num_heads, config.num_kv_heads,
                                      config.head_dim)
  rngs = jax.random.split(rng, 4)
  dtype = config.param_jnp_dtype
  normal = lambda rng, shape, fan_in: (jax.random.normal(rng, shape) * fan_in**-0.5).astype(dtype)
  params = {
      "query": normal(rngs[0], (embed, heads, head_dim), embed),
      "key": normal(rngs[1], (embed, kv_heads, head_dim), embed),
      "value": normal(rngs[2], (embed, kv_heads, head_dim), embed),
      "output": normal(rngs[3], (heads, head_dim, embed), heads * head_dim),
  }
  if config.qkv_bias:
    params["query_bias"] = jnp.zeros((heads, head_dim), dtype)
    params["key_bias"] = jnp.zeros((kv_heads, head_dim), dtype)
    params["value_bias"] = jnp.zeros((kv_heads, head_dim), dtype)
  if config.output_bias:
    params["output_bias"] = jnp.zeros((embed,), dtype)
  if config.qk_norm:
    params["query_norm"] = jnp.ones((head_dim,), dtype)
    params["key_norm"] = jnp.ones((head_dim,), dtype)
  return params


def logical_axes(config):
  """Same tree as init(), with logical axis names at each leaf."""
  axes = {"query": ("embed", "heads", "head_dim"),       # [D, N, H]
          "key": ("embed", "kv_heads", "head_dim"),      # [D, K, H]
          "value": ("embed", "kv_heads", "head_dim"),    # [D, K, H]
          "output": ("heads", "head_dim", "embed")}      # [N, H, D]
  if config.qkv_bias:
    axes.update(query_bias=("heads", "head_dim"), key_bias=("kv_heads", "head_dim"),
                value_bias=("kv_heads", "head_dim"))
  if config.output_bias:
    axes["output_bias"] = ("embed",)
  if config.qk_norm:
    axes.update(query_norm=("head_dim",), key_norm=("head_dim",))
  return axes


def project(params, config, x, positions):
  """x [B, T, D] -> query [B, T, N, H], key and value [B, T, K, H], RoPE applied."""
  query = jnp.einsum("BTD,DNH->BTNH", x, params["query"])
  key = jnp.einsum("BTD,DKH->BTKH", x, params["key"])
  value = jnp.einsum("BTD,DKH->BTKH", x, params["value"])
  if config.qkv_bias:
    query = query + params["query_bias"]
    key = key + params["key_bias"]
    value = value + params["value_bias"]
  if config.qk_norm:
    query = normalization.rms_norm(query, params["query_norm"], config.rms_norm_eps)
    key = normalization.rms_norm(key, params["key_norm"], config.rms_norm_eps)
  sin, cos = rope.sin_cos(config, positions)
  return rope.apply(query, sin, cos), rope.apply(key, sin, cos), value


def attend(query, key, value, mask):
  """Softmax attention of query [B, T, N, H] over key/value [B, S, K, H].

  Args:
    mask: [B, T, S] bool, True where query t may attend to key s.
  Returns:
    [B, T, N, H]
  """
  batch_size, query_length, num_heads, head_dim = query.shape
  num_kv_heads = key.shape[2]
  query = query.reshape(batch_size, query_length, num_kv_heads, -1, head_dim)  # [B, T, K, G, H]
  logits = jnp.einsum("BTKGH,BSKH->BKGTS", query * jnp.asarray(head_dim**-0.5, query.dtype),
                      key, preferred_element_type=jnp.float32)
  logits = jnp.where(mask[:, None, None], logits, NEGATIVE_INFINITY)
  probabilities = jax.nn.softmax(logits, axis=-1).astype(value.dtype)
  encoded = jnp.einsum("BKGTS,BSKH->BTKGH", probabilities, value)
  return encoded.reshape(batch_size, query_length, num_heads, head_dim)


def output(params, config, encoded):
  """encoded [B, T, N, H] -> [B, T, D]."""
  x = jnp.einsum("BTNH,NHD->BTD", encoded, params["output"])
  if config.output_bias:
    x = x + params["output_bias"]
  return x


def causal_mask(query_index, key_index, key_valid=None, query_segments=None,
                key_segments=None):
  """[B, T, S] bool: key index <= query index, the key is valid, and both are in one segment.

  Indices are slots in the sequence (or cache), not RoPE positions: with left padding or
  packing the two differ.
  """
  mask = key_index[:, None, :] <= query_index[:, :, None]
  if key_valid is not None:
    mask &= key_valid[:, None, :].astype(bool)
  if query_segments is not None:
    mask &= query_segments[:, :, None] == key_segments[:, None, :]
  return mask
