"""The decoding cache: one buffer per tensor with all layers (of one kind) stacked.

Shape letters: L layers, B batch, S cache capacity, T new tokens, K key/value heads, H head dim.
  {"key": [L, B, S, K, H], "value": [L, B, S, K, H], "length": [B] int32 filled slots}
Slot s of row b holds the token at index s of that row's sequence. New tokens are scattered
straight into the stacked buffers, so inside a jitted decode loop the update is in place.

Hybrid models (config.is_hybrid, Qwen3.5) keep key/value only for their L_full full-attention
layers and add, for their L_linear Gated DeltaNet layers (W convolution width, C convolution
channels, N value heads, H' key head dim, E value head dim):
  "convolution_window": [L_linear, B, W - 1, C]  the last W - 1 convolution inputs of each row
  "recurrent_state":    [L_linear, B, N, H', E]  float32
These summarize the whole prefix of a row, whatever "length" is.

Convention: every leaf except "length" has the layer on axis 0 and the batch row on axis 1,
and "length" has the batch on axis 0. A sampler can therefore copy, gather or insert rows of
any model's cache generically (e.g. jax.tree.map over the leaves with the batch axis taken
from that rule) without knowing which entries it holds. An empty row (length 0) must have
zeros in every leaf: a recurrent state is not reset by writing at slot 0.
"""
import jax
import jax.numpy as jnp


def init(config, batch_size, max_length, dtype=None):
  """An empty cache for batch_size rows of up to max_length tokens each.

  dtype applies to key/value and the convolution window (default config.compute_dtype); the
  recurrent state of hybrid models is always float32.
  """
  dtype = dtype or config.compute_jnp_dtype
  cache = {"length": jnp.zeros((batch_size,), jnp.int32)}
  num_attention_layers = len(config.attention_layer_indices)
  if num_attention_layers:
    shape = (num_attention_layers, batch_size, max_length, config.num_kv_heads, config.head_dim)
    cache.update(key=jnp.zeros(shape, dtype), value=jnp.zeros(shape, dtype))
  num_linear_layers = len(config.linear_layer_indices)
  if num_linear_layers:
    cache["convolution_window"] = jnp.zeros(
        (num_linear_layers, batch_size, config.linear_conv_width - 1,
         config.linear_conv_channels), dtype)
    cache["recurrent_state"] = jnp.zeros(
        (num_linear_layers, batch_size, config.linear_num_value_heads,
         config.linear_key_head_dim, config.linear_value_head_dim), jnp.float32)
  return cache


def layer_leaves(config):
  """Names of the cache leaves stacked per layer (all but "length"), for this config."""
  names = ()
  if config.attention_layer_indices:
    names += ("key", "value")
  if config.linear_layer_indices:
    names += ("convolution_window", "recurrent_state")
  return names


def logical_axes(config=None):
  """Logical axis names of the cache tree (for sharding); config is needed for hybrid models."""
  names = ("layers", "batch", "cache_length", "kv_heads", "head_dim")
  axes = {"key": names, "value": names, "length": ("batch",)}
  if config is not None and config.is_hybrid:
    axes = {name: axes[name] for name in ("length",) + layer_leaves(config) if name in axes}
    if config.linear_layer_indices:
      axes["convolution_window"] = ("layers", "batch", "conv_width", "linear_channels")
      axes["recurrent_state"] = ("layers", "batch", "linear_heads", "linear_key_head_dim",
                                 "head_dim")
  return axes


def bits_dtype(dtype):
  """The dtype a buffer of dtype is stored as by as_bits: uint16 for 16-bit floats."""
  dtype = jnp.dtype(dtype)
  return jnp.dtype(jnp.uint16) if jnp.issubdtype(dtype, jnp.floating) and (
      dtype.itemsize == 2) else dtype


def as_bits(x, enabled=True):
  """A 16-bit float array's bits as uint16; any other array, or any with enabled False, as it
  is.

  A storage form for inference: XLA's CPU compiler runs scatter, gather and dynamic-slice of
  a 16-bit float buffer in float32, converting the whole buffer and back at each of them (for
  a prefill's stacked weights and cache, or a 1 GB prefix-cache pool, more than the products
  cost); on the bits they move two bytes an element in place. The sampler picks this storage
  (sampling/layout.py); the model code reads whatever it is given through load(). Not
  differentiable.
  """
  if not enabled or bits_dtype(x.dtype) == x.dtype:
    return x
  return jax.lax.bitcast_convert_type(x, jnp.uint16)


def is_bits(x):
  """Whether x holds a 16-bit float's bits (as_bits' uint16)."""
  return x.dtype == jnp.uint16


def from_bits(x, dtype):
  """as_bits undone: x's bits as dtype (a 16-bit float) where x holds bits; x itself
  otherwise."""
  if not is_bits(x) or jnp.dtype(dtype) == x.dtype:
    return x
  if bits_dtype(dtype) != jnp.dtype(jnp.uint16):
    raise ValueError(f"from_bits: uint16 bits read as {jnp.dtype(dtype)}; bits stand for a "
                     f"16-bit float (bfloat16, float16) only.")
  return jax.lax.bitcast_convert_type(x, dtype)


def load(x, dtype):
  """A stored array in dtype: its bits reinterpreted where it holds bits (as_bits), then cast
  (no-op when it already is dtype)."""
  x = from_bits(x, dtype)
  return x if x.dtype == dtype else x.astype(dtype)


def store(x, dtype):
  """x as a buffer of dtype stores it: its bits where dtype is uint16 (x a 16-bit float),
  cast otherwise."""
  if jnp.dtype(dtype) == jnp.uint16 and jnp.issubdtype(x.dtype, jnp.floating):
    if bits_dtype(x.dtype) != jnp.dtype(jnp.uint16):
      raise ValueError(f"store: a {x.dtype} value cannot go into a buffer of 16-bit float "
                       f"bits; cast it to the buffer's float dtype first.")
    return as_bits(x)
  return x.astype(dtype)


def write_layer(keys, values, layer, slots, key, value):
  """Writes one layer's new key/value [B, T, K, H] at slots [B, T] of the stacked buffers
  (as the buffers store them: store()).

  Returns:
    (keys, values, layer_keys, layer_values): the updated stacked buffers [L, B, S, K, H] and
    this layer's full cache [B, S, K, H] for attention. Out-of-range slots are dropped.
  """
  rows = jnp.arange(key.shape[0])[:, None]  # [B, 1]
  keys = keys.at[layer, rows, slots].set(store(key, keys.dtype), mode="drop")
  values = values.at[layer, rows, slots].set(store(value, values.dtype), mode="drop")
  layer_keys = jax.lax.dynamic_index_in_dim(keys, layer, axis=0, keepdims=False)
  layer_values = jax.lax.dynamic_index_in_dim(values, layer, axis=0, keepdims=False)
  return keys, values, layer_keys, layer_values
