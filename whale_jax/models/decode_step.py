"""One decoding step with one cache buffer per layer: the fast twin of forward_with_cache.

Shape letters: L layers, B batch, S cache length, D model width, F MLP width, N query heads,
K key/value heads, G = N // K, H head dim, V vocabulary.

decoder.forward_with_cache runs the layers under lax.scan over stacked weights and a stacked
cache. On CPU, XLA copies each layer's slice of both out of the stacked buffers at every step,
which costs more than the step itself at small batch sizes. Here the layers are unrolled:
  cache: {"key": L buffers [B, K, H, S], "value": L buffers [B, K, S, H], "length": [B]}
    (keys with S minor and values with H minor are the layouts XLA's CPU dots read fastest)
  weights: split_layers(params), a Weights: the per-layer weights as 2-D matrices (a copy,
    made once per params version by the caller) stored [in, out] or [out, in] (the caller's
    choice, carried by the Weights as data: the sampler's layout picks the one XLA's CPU dots
    read fastest for the batch), and the unembedding in that orientation when the params' is
    the other.
A step writes each row's new key/value at slot length[b], then attends to slots 0..length[b].
Plain decoders only (not hybrid ones); decoder.forward_with_cache covers every model.
"""
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from whale_jax.models import attention
from whale_jax.models import decoder
from whale_jax.models import normalization
from whale_jax.models import products
from whale_jax.models import rope


def supports(config):
  """Whether step() can run this model."""
  return not getattr(config, "is_hybrid", False)


def init_cache(config, batch_size, max_length, dtype=None):
  """An empty cache for batch_size rows of up to max_length tokens each."""
  dtype = dtype or config.compute_jnp_dtype
  heads = (batch_size, config.num_kv_heads)
  return {
      "key": tuple(jnp.zeros(heads + (config.head_dim, max_length), dtype)
                   for _ in range(config.num_layers)),
      "value": tuple(jnp.zeros(heads + (max_length, config.head_dim), dtype)
                     for _ in range(config.num_layers)),
      "length": jnp.zeros((batch_size,), jnp.int32),
  }


def cache_logical_axes(config):
  """Logical axis names of the cache tree (for sharding)."""
  return {"key": (("batch", "kv_heads", "head_dim", "cache_length"),) * config.num_layers,
          "value": (("batch", "kv_heads", "cache_length", "head_dim"),) * config.num_layers,
          "length": ("batch",)}


def from_stacked(key, value):
  """kv_cache layout [L, B, S, K, H] -> (L keys [B, K, H, S], L values [B, K, S, H])."""
  keys = tuple(jnp.transpose(key[layer], (0, 2, 3, 1)) for layer in range(key.shape[0]))
  values = tuple(jnp.transpose(value[layer], (0, 2, 1, 3)) for layer in range(value.shape[0]))
  return keys, values


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Weights:
  """What step() reads besides the params: split_layers' copy, and how it is stored.

  layers: one dict of 2-D matrices and vectors per layer (split_layers).
  unembedding: [D, V] ([V, D] when transposed) where the params' own matrix is not in that
    orientation and dtype; None where it is.
  embedding: the table step() gathers the tokens' rows from in place of the params' (e.g. a
    copy stored as the compute dtype's bits, kv_cache.as_bits); None: the params'.
  transposed: static; the matrices are stored [out, in] (else [in, out]).
  columns: static, with transposed only; a float32 step keeps its residual stream as columns
    and multiplies the weights on the left, as 16-bit steps of even batches always do
    (in_columns).
  """
  layers: tuple
  unembedding: Any = None
  embedding: Any = None
  transposed: bool = dataclasses.field(default=False, metadata={"static": True})
  columns: bool = dataclasses.field(default=False, metadata={"static": True})


def split_layers(params, config, transposed=False, columns=False):
  """Per-layer weights as 2-D matrices in the compute dtype (a copy), for step(): a Weights.

  Each projection is stored [in, out] (transposed=False) or [out, in] (transposed=True); the
  two give the same numbers, and which is faster depends on the compiler and batch size (the
  sampler's layout chooses). The projections that read the same input
  are one matrix (query, key and value; gate and up): one product instead of three or two,
  which saves each product's fixed cost (a fifth of a small model's step).
  Weights.unembedding is [D, V] or [V, D] in that orientation, or None where the params' own
  (tied embedding [V, D], else unembedding [D, V]) already is. Per layer:
    attention_norm, mlp_norm [D]; qkv [D, N*H + 2*K*H] (query, key, value columns in that
    order); output [N*H, D]; gate_up [D, 2*F] (gate, then up); down [F, D] (each the other
    way round when transposed); query_bias [N*H], key_bias, value_bias [K*H], output_bias [D],
    query_norm, key_norm [H] when the model has them.
  columns (with transposed): Weights.columns.
  """
  if columns and not transposed:
    raise ValueError("split_layers(columns=True) needs transposed=True: a step in columns "
                     "multiplies [out, in] weights on the left.")
  dtype = config.compute_jnp_dtype
  embed_dim = config.embed_dim
  stacked = params["layers"]
  matrices = {"query": stacked["attention"]["query"], "key": stacked["attention"]["key"],
              "value": stacked["attention"]["value"], "gate": stacked["mlp"]["gate"],
              "up": stacked["mlp"]["up"]}
  vectors = {"attention_norm": stacked["attention_norm"], "mlp_norm": stacked["mlp_norm"]}
  vectors.update({name: w for name, w in stacked["attention"].items()
                  if name.endswith(("_bias", "_norm"))})
  layers = []
  for layer in range(config.num_layers):
    parts = {name: w[layer].reshape(embed_dim, -1) for name, w in matrices.items()}
    weights = {"qkv": jnp.concatenate([parts["query"], parts["key"], parts["value"]], axis=1),
               "gate_up": jnp.concatenate([parts["gate"], parts["up"]], axis=1)}
    weights["output"] = stacked["attention"]["output"][layer].reshape(-1, embed_dim)
    weights["down"] = stacked["mlp"]["down"][layer]
    if transposed:
      weights = {name: w.T for name, w in weights.items()}
    weights.update({name: w[layer].reshape(-1) if name.endswith("_bias") else w[layer]
                    for name, w in vectors.items()})
    layers.append({name: w.astype(dtype) for name, w in weights.items()})
  if config.tie_embeddings:
    stored, stored_transposed = params["embedding"], True  # [V, D]
  else:
    stored, stored_transposed = params["unembedding"], False  # [D, V]
  unembedding = None
  if stored_transposed != transposed or stored.dtype != dtype:
    unembedding = (stored if stored_transposed == transposed else stored.T).astype(dtype)
  return Weights(tuple(layers), unembedding, transposed=transposed, columns=columns)


def _attend(query, keys, values, valid):
  """query [B, N, H] over keys [B, K, H, S] and values [B, K, S, H] -> [B, N, H]."""
  batch_size, num_heads, head_dim = query.shape
  query = query.reshape(batch_size, keys.shape[1], -1, head_dim)  # [B, K, G, H]
  logits = jnp.einsum("BKGH,BKHS->BKGS", query * jnp.asarray(head_dim**-0.5, query.dtype),
                      keys, preferred_element_type=jnp.float32)
  logits = jnp.where(valid[:, None, None], logits, attention.NEGATIVE_INFINITY)
  weights = jnp.exp(logits - _tree_reduce(logits, jnp.maximum))
  probabilities = (weights / _tree_reduce(weights, jnp.add)).astype(values.dtype)
  encoded = jnp.einsum("BKGS,BKSH->BKGH", probabilities, values,
                       preferred_element_type=jnp.float32).astype(values.dtype)
  return encoded.reshape(batch_size, num_heads, head_dim)


def _tree_reduce(x, combine):
  """x reduced over its last axis by combine (jnp.maximum or jnp.add), keeping the axis.

  Halves (or thirds) combined elementwise until one position is left, for the cache lengths
  the sampler uses (2^k and 3 * 2^k): XLA's CPU compiler keeps these in one loop fusion,
  where it hands a reduce to its library, whose call costs more than the work at these sizes
  (the softmax's max and sum: ~0.8 ms of a ~100M bfloat16 step at batch 32). Other lengths
  take a plain reduction.
  """
  while x.shape[-1] > 1:
    length = x.shape[-1]
    parts = 2 if length % 2 == 0 else 3 if length % 3 == 0 else 0
    if not parts:
      reduce = jnp.max if combine is jnp.maximum else jnp.sum
      return reduce(x, axis=-1, keepdims=True)
    width = length // parts
    pieces = [x[..., i * width:(i + 1) * width] for i in range(parts)]
    x = pieces[0]
    for piece in pieces[1:]:
      x = combine(x, piece)
  return x


def _write(buffer, new, lengths, axis):
  """buffer [B, ..., S, ...] with row b's new[b] at position lengths[b] of axis (dropped when
  past the end).

  A scatter in place for float32. For 16-bit floats, a select over the whole buffer: XLA's
  CPU scatter converts such a buffer to float32 and back in full at every write, which costs
  about four times as much.
  """
  new = new.astype(buffer.dtype)
  if buffer.dtype.itemsize == 2:
    positions = jnp.arange(buffer.shape[axis]).reshape((-1,) + (1,) * (buffer.ndim - 1 - axis))
    here = positions == lengths.reshape((-1,) + (1,) * (buffer.ndim - 1))  # [B, .., S, ..]
    return jnp.where(here, jnp.expand_dims(new, axis), buffer)
  index = (jnp.arange(buffer.shape[0]),) + (slice(None),) * (axis - 1) + (lengths,)
  return buffer.at[index].set(new, mode="drop")


def in_columns(config, batch_size, weights):
  """Whether step() keeps the residual stream as columns [D, B], every weight product then
  being W @ h with the weights [out, in] on the left: with weights stored [out, in], a 16-bit
  step of an even batch, and a float32 step where the Weights say so (Weights.columns)."""
  if not weights.transposed:
    return False
  if jnp.dtype(config.compute_jnp_dtype).itemsize == 2:
    return batch_size % 2 == 0
  return weights.columns


def step(params, weights, config, tokens, cache, advance=None, vocab_major=False):
  """Feeds one token per row and returns the next-token logits.

  Args:
    params: the full params tree (embedding, final norm, unembedding are read from it).
    weights: split_layers(params, config, transposed), a Weights (whose embedding a caller
      may set to a table of its own, e.g. stored as bits).
    tokens: [B] int.
    cache: from init_cache(); row b's token goes to slot cache["length"][b] (dropped if that
      is past the cache's capacity).
    advance: [B] int, 1 where the row's length grows (default all); a row with 0 still
      computes but its slot is overwritten by its next real token.
    vocab_major: static; return the logits as [V, B]. A step in columns (in_columns) makes
      them so, and a sampler that reads them that way (categorical.sample's vocab_axis=0)
      saves the transpose; elsewhere they are transposed.
  Returns:
    (logits [B, V] float32 ([V, B] with vocab_major), updated cache)
  """
  batch_size = tokens.shape[0]
  num_heads, num_kv_heads, head_dim = config.num_heads, config.num_kv_heads, config.head_dim
  eps = config.rms_norm_eps
  lengths = cache["length"]
  sin, cos = rope.sin_cos(config, lengths[:, None])  # [B, 1, H] each
  valid = jnp.arange(cache["value"][0].shape[2])[None, :] <= lengths[:, None]  # [B, S]
  table = params if weights.embedding is None else {"embedding": weights.embedding}
  x = decoder.embed(table, config, tokens[:, None])[:, 0]  # [B, D]

  # A step in columns (in_columns) keeps the residual stream as [D, B]: every weight product
  # is then W @ h (products.left) with no transposes but the two a layer needs around
  # attention, which works on rows. Elsewhere rows [B, D] and products.matmul.
  transposed = weights.transposed
  columns = in_columns(config, batch_size, weights)
  features = 0 if columns else -1  # the feature axis of x and of the products' outputs
  if columns:
    x = products.transpose(x)

  def matmul(h, weight):  # 2-D products on the stored layout: XLA copies no weight
    return products.left(weight, h) if columns else products.matmul(h, weight, transposed)

  def norm(h, scale):
    return normalization.rms_norm(h, scale, eps, axis=features)

  qkv_splits = (num_heads * head_dim, (num_heads + num_kv_heads) * head_dim)  # qkv's columns
  new_keys, new_values = [], []
  for layer, keys, values in zip(weights.layers, cache["key"], cache["value"]):
    qkv = matmul(norm(x, layer["attention_norm"]), layer["qkv"])
    if columns:
      qkv = products.transpose(qkv)
    query, key, value = jnp.split(qkv, qkv_splits, axis=-1)
    if config.qkv_bias:
      query += layer["query_bias"]
      key += layer["key_bias"]
      value += layer["value_bias"]
    query = query.reshape(batch_size, num_heads, head_dim)
    key = key.reshape(batch_size, num_kv_heads, head_dim)
    value = value.reshape(batch_size, num_kv_heads, head_dim)
    if config.qk_norm:
      query = normalization.rms_norm(query, layer["query_norm"], eps)
      key = normalization.rms_norm(key, layer["key_norm"], eps)
    query = rope.apply(query[:, None], sin, cos)[:, 0]
    key = rope.apply(key[:, None], sin, cos)[:, 0]
    keys = _write(keys, key, lengths, axis=3)  # keys [B, K, H, S]
    values = _write(values, value, lengths, axis=2)  # values [B, K, S, H]
    encoded = _attend(query, keys, values, valid).reshape(batch_size, -1)  # [B, N*H]
    if columns:
      encoded = products.transpose(encoded)
    x = x + matmul(encoded, layer["output"])
    if config.output_bias:
      x = x + (layer["output_bias"][:, None] if columns else layer["output_bias"])
    gate, up = jnp.split(matmul(norm(x, layer["mlp_norm"]), layer["gate_up"]), 2,
                         axis=features)
    x = x + matmul(jax.nn.silu(gate) * up, layer["down"])
    new_keys.append(keys)
    new_values.append(values)
  if advance is None:
    advance = jnp.ones((batch_size,), jnp.int32)
  unembedding = weights.unembedding
  if unembedding is None:  # the params' own matrix is in the layout
    unembedding = params["embedding"] if config.tie_embeddings else params["unembedding"]
  x = norm(x, params["final_norm"].astype(x.dtype))
  if columns:
    logits = products.left(unembedding, x, out_dtype=jnp.float32)  # [V, B]
    if not vocab_major:
      logits = products.transpose(logits)
  else:
    logits = products.matmul(x, unembedding, transposed, out_dtype=jnp.float32)
    if vocab_major:  # behind a barrier: XLA would fold the transpose into the dot (products.py)
      logits = jax.lax.optimization_barrier(logits).T
  return logits, {"key": tuple(new_keys), "value": tuple(new_values),
                  "length": lengths + advance.astype(jnp.int32)}
