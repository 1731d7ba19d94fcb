"""The key/value cache for decoding: one buffer per tensor with all layers stacked.

Shape letters: L layers, B batch, S cache capacity, T new tokens, K key/value heads, H head dim.
  {"key": [L, B, S, K, H], "value": [L, B, S, K, H], "length": [B] int32 filled slots}
Slot s of row b holds the token at index s of that row's sequence. New tokens are scattered
straight into the stacked buffers, so inside a jitted decode loop the update is in place.
"""
import jax
import jax.numpy as jnp


def init(config, batch_size, max_length, dtype=None):
  """An empty cache for batch_size rows of up to max_length tokens each."""
  shape = (config.num_layers, batch_size, max_length, config.num_kv_heads, config.head_dim)
  dtype = dtype or config.compute_jnp_dtype
  return {"key": jnp.zeros(shape, dtype), "value": jnp.zeros(shape, dtype),
          "length": jnp.zeros((batch_size,), jnp.int32)}


def logical_axes():
  """Logical axis names of the cache tree (for sharding)."""
  names = ("layers", "batch", "cache_length", "kv_heads", "head_dim")
  return {"key": names, "value": names, "length": ("batch",)}


def write_layer(keys, values, layer, slots, key, value):
  """Writes one layer's new key/value [B, T, K, H] at slots [B, T] of the stacked buffers.

  Returns:
    (keys, values, layer_keys, layer_values): the updated stacked buffers [L, B, S, K, H] and
    this layer's full cache [B, S, K, H] for attention. Out-of-range slots are dropped.
  """
  rows = jnp.arange(key.shape[0])[:, None]  # [B, 1]
  keys = keys.at[layer, rows, slots].set(key.astype(keys.dtype), mode="drop")
  values = values.at[layer, rows, slots].set(value.astype(values.dtype), mode="drop")
  layer_keys = jax.lax.dynamic_index_in_dim(keys, layer, axis=0, keepdims=False)
  layer_values = jax.lax.dynamic_index_in_dim(values, layer, axis=0, keepdims=False)
  return keys, values, layer_keys, layer_values
