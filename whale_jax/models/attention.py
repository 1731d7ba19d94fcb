"""Grouped-query causal self-attention as pure functions over a params dict.

Shape letters: B batch, T query length, S key/value length (S == T without a cache),
D model width, N query heads, K key/value heads, G = N // K, H head dim.
Supported: RoPE, Qwen3 q/k RMSNorm, bias on query/key/value (Qwen2) and output.
Not supported: sliding windows, logit soft-capping, attention sinks.

Three implementations of the softmax under a causal mask, picked by config.attention
(causal_attend): attend() (dense: the [B, N, T, S] scores, the plain version every test
compares against), attend_blockwise() (online softmax over key blocks, with its own backward
pass; memory linear in T), and the Pallas splash kernel on TPU (splash_attention.py).
"""
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from whale_jax.models import normalization
from whale_jax.models import products
from whale_jax.models import rope
from whale_jax.models import splash_attention
from whale_jax.parallel import rules

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


def project(params, config, x, positions, inference=False):
  """x [B, T, D] -> query [B, T, N, H], key and value [B, T, K, H], RoPE applied.

  inference: not differentiated; the products accumulate in float32 (models/products.py).
  """
  einsum = products.einsum if inference else _heads_product
  query = einsum("BTD,DNH->BTNH", x, params["query"])
  key = einsum("BTD,DKH->BTKH", x, params["key"])
  value = einsum("BTD,DKH->BTKH", x, params["value"])
  if config.qkv_bias:
    query = query + params["query_bias"]
    key = key + params["key_bias"]
    value = value + params["value_bias"]
  if config.qk_norm:
    query = normalization.rms_norm(query, params["query_norm"], config.rms_norm_eps)
    key = normalization.rms_norm(key, params["key_norm"], config.rms_norm_eps)
  sin, cos = rope.sin_cos(config, positions)
  return rope.apply(query, sin, cos), rope.apply(key, sin, cos), value


def attend(query, key, value, mask, inference=False):
  """Softmax attention of query [B, T, N, H] over key/value [B, S, K, H] (the dense version).

  Args:
    mask: [B, T, S] bool, True where query t may attend to key s.
    inference: static; an inference path (prefill, decoding; never differentiated): for
      16-bit floats the same arithmetic in the layout XLA's CPU dots run fastest
      (_attend_inference).
  Returns:
    [B, T, N, H]
  """
  if inference and jnp.dtype(key.dtype).itemsize == 2:
    return _attend_inference(query, key, value, mask)
  batch_size, query_length, num_heads, head_dim = query.shape
  num_kv_heads = key.shape[2]
  query = query.reshape(batch_size, query_length, num_kv_heads, -1, head_dim)  # [B, T, K, G, H]
  logits = jnp.einsum("BTKGH,BSKH->BKGTS", query * jnp.asarray(head_dim**-0.5, query.dtype),
                      key, preferred_element_type=jnp.float32)
  logits = jnp.where(mask[:, None, None], logits, NEGATIVE_INFINITY)
  probabilities = jax.nn.softmax(logits, axis=-1).astype(value.dtype)
  encoded = jnp.einsum("BKGTS,BSKH->BTKGH", probabilities, value)
  return encoded.reshape(batch_size, query_length, num_heads, head_dim)


def _attend_inference(query, key, value, mask):
  """attend() with the key/value heads as a batch axis in front of every operand.

  Both products then read [B, K, ...] operands whose contracted axis is the left side's last
  and the right side's first, the form XLA's CPU compiler hands to its matmul library in
  16-bit floats (otherwise it converts the cache to float32 and transposes it for each
  product: ~100M shapes, 64 prompt tokens over 192 positions, 22.7 against 53 ms a layer in
  bfloat16, docs/benchmarks.md). Both accumulate in float32. The key/value copies transpose
  through a split of S, which XLA cannot fold into the dots. float32 keeps attend()'s form:
  in this one XLA's float32 dots sum in an order that depends on the number of queries, so a
  prefill from cached prompt blocks would no longer be bitwise a fresh one's (1e-7 apart).
  """
  batch_size, query_length, num_heads, head_dim = query.shape
  key_length, num_kv_heads = key.shape[1], key.shape[2]
  query = query.reshape(batch_size, query_length, num_kv_heads, -1, head_dim)
  query = jnp.swapaxes(query * jnp.asarray(head_dim**-0.5, query.dtype), 1, 2)  # [B,K,T,G,H]
  if key_length % 2 == 0:
    split = (batch_size, 2, key_length // 2, num_kv_heads, head_dim)
    keys = key.reshape(split).transpose(0, 3, 4, 1, 2)
    values = value.reshape(split).transpose(0, 3, 1, 2, 4)
  else:
    keys, values = key.transpose(0, 2, 3, 1), value.transpose(0, 2, 1, 3)
  keys = keys.reshape(batch_size, num_kv_heads, head_dim, key_length)  # [B, K, H, S]
  values = values.reshape(batch_size, num_kv_heads, key_length, head_dim)  # [B, K, S, H]
  logits = jnp.einsum("BKTGH,BKHS->BKTGS", query, keys, preferred_element_type=jnp.float32)
  logits = jnp.where(mask[:, None, :, None, :], logits, NEGATIVE_INFINITY)
  probabilities = jax.nn.softmax(logits, axis=-1).astype(value.dtype)
  encoded = jnp.einsum("BKTGS,BKSH->BKTGH", probabilities, values,
                       preferred_element_type=jnp.float32).astype(value.dtype)
  return jnp.swapaxes(encoded, 1, 2).reshape(batch_size, query_length, num_heads, head_dim)


def _heads_product(spec, x, w):
  """jnp.einsum(spec, x, w) for the projections to and from the heads ("BTD,DNH->BTNH",
  "BTNH,NHD->BTD"), as one 2-D matmul: [B * T, D] x [D, N * H], or [B * T, N * H] x
  [N * H, D]. As with the MLP's (decoder._mlp), XLA's CPU compiler then runs the backward
  products on the weights as stored, where for the 3-D einsums it copied a transposed slice of
  each weight (~100M, 4 x 128 tokens: 60 copies a step, which ran 6% faster without them)."""
  del spec  # x's axes after B, T contract with w's leading axes
  contracted = x.ndim - 2
  rows = x.reshape(-1, math.prod(x.shape[2:]))
  flat = w.reshape(math.prod(w.shape[:contracted]), -1)
  return jnp.matmul(rows, flat).reshape(*x.shape[:2], *w.shape[contracted:])


def output(params, config, encoded, inference=False):
  """encoded [B, T, N, H] -> [B, T, D] (inference: as in project)."""
  x = (products.einsum if inference else _heads_product)("BTNH,NHD->BTD", encoded,
                                                         params["output"])
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


class CausalMask(NamedTuple):
  """What a query may see, without the [B, T, S] mask itself.

  Key slots are 0, 1, ..., S - 1 (a sequence or a cache). Query t of row b sits at slot
  query_index[b, t] and sees key s when s <= query_index[b, t], key_valid[b, s] is true and
  both are in one segment. `self_attention` is true when the keys are the queries' own tokens
  (query_index = 0..T-1, no cache), the only case the splash kernel handles.
  """
  query_index: jax.Array                 # [B, T] int32
  key_length: int                        # S
  key_valid: jax.Array | None = None     # [B, S] bool
  query_segments: jax.Array | None = None  # [B, T] int
  key_segments: jax.Array | None = None    # [B, S] int
  self_attention: bool = False

  def dense(self):
    """The [B, T, S] bool mask of attend()."""
    batch_size = self.query_index.shape[0]
    key_index = jnp.broadcast_to(jnp.arange(self.key_length, dtype=jnp.int32),
                                 (batch_size, self.key_length))
    return causal_mask(self.query_index, key_index, self.key_valid, self.query_segments,
                       self.key_segments)


def sequence_mask(length, batch_size, attention_mask=None, segment_ids=None):
  """CausalMask of a batch of [B, T] sequences attending to themselves (no cache)."""
  index = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch_size, length))
  valid = None if attention_mask is None else attention_mask.astype(bool)
  return CausalMask(index, length, valid, segment_ids, segment_ids, self_attention=True)


def implementation(config, mask):
  """The attention config.attention resolves to for this call: dense, blockwise or splash."""
  choice = config.attention
  # The kernel takes causal + segment masks of self-attention only (no cache, no padding mask).
  splash_fits = (mask.self_attention and mask.key_valid is None
                 and splash_attention.supported(config, mask.key_length))
  if choice == "splash" and not splash_fits:
    choice = "blockwise"
  if choice == "auto":
    if splash_fits and rules.active_platform() == "tpu":
      choice = "splash"
    elif mask.key_length > config.attention_block_size and mask.query_index.shape[1] > 1:
      choice = "blockwise"
    else:
      choice = "dense"
  return choice


def causal_attend(config, query, key, value, mask, inference=False):
  """Attention of query [B, T, N, H] over key/value [B, S, K, H] under a CausalMask, by the
  implementation config.attention picks (see implementation()). Returns [B, T, N, H].
  inference: static, as attend()'s (the dense version only)."""
  choice = implementation(config, mask)
  if choice == "dense":
    return attend(query, key, value, mask.dense(), inference)
  if choice == "splash":
    return splash_attention.attend(query, key, value, mask.query_segments)
  return attend_blockwise(query, key, value, mask, config.attention_block_size)


# Blockwise attention: queries and keys in blocks; per query block, a running maximum m,
# normalizer l and weighted sum over the key blocks it can see (online softmax), so no more
# than [block, block] scores exist at once. Its backward pass (custom_vjp) recomputes each
# block's probabilities from the saved log-normalizer. Key blocks after a query block's last
# slot are skipped (a loop with a traced trip count), so causal attention does about half the
# work of the dense version. Inside, the heads lead: query [B, K, G, T, H], key and value
# [B, K, S, H], so that every block product reads and writes its operands as stored (the
# layout moves once per call, not once per block pair). With one query block (a prefill chunk
# over a long cache) each key block is visited at most once: the keys and values stay as
# stored ([B, S, K, H], keys_stored) and only the blocks seen move, not the whole cache.


def _pad_to(x, multiple, axis, value):
  pad = -x.shape[axis] % multiple
  if not pad:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, pad)
  return jnp.pad(x, widths, constant_values=value)


def attend_blockwise(query, key, value, mask, block_size=512):
  """attend() under a CausalMask, never building more than [block, block] scores.

  Queries that see no key at all (left padding) give zeros here; attend() gives the mean of
  all values there. Neither is used downstream.
  """
  batch_size, query_length, num_heads, head_dim = query.shape
  key_length, num_kv_heads = key.shape[1], key.shape[2]
  query_block = min(block_size, query_length)
  key_block = min(block_size, key_length)
  key_valid = (jnp.ones((batch_size, key_length), bool) if mask.key_valid is None
               else mask.key_valid.astype(bool))
  if mask.query_segments is None:
    query_segments = jnp.zeros((batch_size, query_length), jnp.int32)
    key_segments = jnp.zeros((batch_size, key_length), jnp.int32)
  else:
    query_segments = mask.query_segments.astype(jnp.int32)
    key_segments = mask.key_segments.astype(jnp.int32)
  query = query.reshape(batch_size, query_length, num_kv_heads, -1, head_dim)
  query = jnp.einsum("BTKGH->BKGTH", query)
  keys_stored = query_length == query_block
  if not keys_stored:
    key, value = jnp.einsum("BSKH->BKSH", key), jnp.einsum("BSKH->BKSH", value)
  key_axis = 1 if keys_stored else 2
  inputs = (_pad_to(query, query_block, 3, 0), _pad_to(key, key_block, key_axis, 0),
            _pad_to(value, key_block, key_axis, 0),
            _pad_to(mask.query_index.astype(jnp.int32), query_block, 1, -1),
            _pad_to(key_valid, key_block, 1, False), _pad_to(query_segments, query_block, 1, 0),
            _pad_to(key_segments, key_block, 1, 0))
  encoded = _blockwise(query_block, key_block, keys_stored, *inputs)[:, :, :, :query_length]
  encoded = jnp.einsum("BKGTH->BTKGH", encoded)
  return encoded.reshape(batch_size, query_length, num_heads, head_dim)


def _blocks(x, block, axis):
  """Splits axis (length T) into [T / block, block] and moves the T / block axis first."""
  x = x.reshape(*x.shape[:axis], x.shape[axis] // block, block, *x.shape[axis + 1:])
  return jnp.moveaxis(x, axis, 0)


def _unblocks(x, axis):
  """_blocks' inverse: [T / block, ..., block (at axis), ...] -> [..., T (at axis), ...]."""
  x = jnp.moveaxis(x, 0, axis)
  return x.reshape(*x.shape[:axis], -1, *x.shape[axis + 2:])


def _key_blocks_seen(query_index, key_block, num_key_blocks):
  """How many leading key blocks any query of this block (query_index [B, block]) sees."""
  return jnp.clip(jnp.max(query_index) // key_block + 1, 0, num_key_blocks)


def _query_block_bias(query_index, query_segments, key_valid, key_segments):
  """[B, bq, S] float32: 0 where a query of this block may see the key, NEGATIVE_INFINITY
  elsewhere. Made once per query block and added to each key block's scores: the mask's
  compares then run over [B, bq, S], not inside every pass over the [B, K, G, bq, bk] scores."""
  key_index = jnp.arange(key_valid.shape[1], dtype=jnp.int32)
  visible = ((key_index[None, None, :] <= query_index[:, :, None]) & key_valid[:, None, :]
             & (query_segments[:, :, None] == key_segments[:, None, :]))
  return jnp.where(visible, 0.0, NEGATIVE_INFINITY).astype(jnp.float32)


def _block_scores(query, key, bias, start):
  """Scaled scores [B, K, G, bq, bk] float32 of query [B, K, G, bq, H] and the key block at
  start, plus the block's bias (NEGATIVE_INFINITY where masked; adding it to a score leaves
  exactly NEGATIVE_INFINITY)."""
  scores = jnp.einsum("BKGTH,BKSH->BKGTS", query, key, preferred_element_type=jnp.float32)
  return scores + jax.lax.dynamic_slice_in_dim(bias, start, key.shape[2], axis=2)[:, None, None]


def _key_slices(key_block, keys_stored, start, *arrays):
  """The key block at start of each array as [B, K, bk, H]: of [B, K, S, H] arrays, or of
  [B, S, K, H] ones (keys_stored) with the block's heads moved ahead."""
  if keys_stored:
    return [jnp.einsum("BSKH->BKSH", jax.lax.dynamic_slice_in_dim(x, start, key_block, axis=1))
            for x in arrays]
  return [jax.lax.dynamic_slice_in_dim(x, start, key_block, axis=2) for x in arrays]


def _forward_blocks(query_block, key_block, keys_stored, query, key, value, query_index,
                    key_valid, query_segments, key_segments):
  """(encoded [B, K, G, T, H], log-normalizer [B, K, G, T] float32) of padded inputs.

  Masked scores are NEGATIVE_INFINITY, not skipped: while a query has seen only masked keys
  its running maximum is NEGATIVE_INFINITY and those keys weigh exp(0) = 1, and the first
  visible key rescales them by exp(NEGATIVE_INFINITY - score) = 0. A query that never sees a
  key keeps that maximum, and gives zeros (log-normalizer +inf).
  """
  head_dim = query.shape[-1]
  num_key_blocks = key_valid.shape[1] // key_block
  query = query * jnp.asarray(head_dim**-0.5, query.dtype)

  def one_query_block(inputs):
    query, query_index, query_segments = inputs  # [B, K, G, bq, H], [B, bq], [B, bq]
    batch_size, num_kv_heads, group, block, _ = query.shape
    bias = _query_block_bias(query_index, query_segments, key_valid, key_segments)
    stats = jnp.full((batch_size, num_kv_heads, group, block), NEGATIVE_INFINITY, jnp.float32)

    def key_step(j, carry):
      maximum, normalizer, total = carry
      start = j * key_block
      key_j, value_j = _key_slices(key_block, keys_stored, start, key, value)
      scores = _block_scores(query, key_j, bias, start)
      new_maximum = jnp.maximum(maximum, jnp.max(scores, axis=-1))
      probabilities = jnp.exp(scores - new_maximum[..., None])
      correction = jnp.exp(maximum - new_maximum)
      normalizer = normalizer * correction + jnp.sum(probabilities, axis=-1)
      total = total * correction[..., None] + jnp.einsum(
          "BKGTS,BKSH->BKGTH", probabilities.astype(value.dtype), value_j,
          preferred_element_type=jnp.float32)
      return new_maximum, normalizer, total

    carry = (stats, jnp.zeros_like(stats),
             jnp.zeros((batch_size, num_kv_heads, group, block, head_dim), jnp.float32))
    maximum, normalizer, total = jax.lax.fori_loop(
        0, _key_blocks_seen(query_index, key_block, num_key_blocks), key_step, carry)
    seen = maximum > NEGATIVE_INFINITY / 2
    normalizer = jnp.where(seen, normalizer, 1.0)
    encoded = jnp.where(seen[..., None], total / normalizer[..., None], 0.0)
    log_normalizer = jnp.where(seen, maximum + jnp.log(normalizer), jnp.inf)
    return encoded.astype(value.dtype), log_normalizer

  encoded, log_normalizer = jax.lax.map(one_query_block, (
      _blocks(query, query_block, 3), _blocks(query_index, query_block, 1),
      _blocks(query_segments, query_block, 1)))
  return _unblocks(encoded, 3), _unblocks(log_normalizer, 3)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _blockwise(query_block, key_block, keys_stored, query, key, value, query_index, key_valid,
               query_segments, key_segments):
  return _forward_blocks(query_block, key_block, keys_stored, query, key, value, query_index,
                         key_valid, query_segments, key_segments)[0]


def _blockwise_forward(query_block, key_block, keys_stored, *inputs):
  encoded, log_normalizer = _forward_blocks(query_block, key_block, keys_stored, *inputs)
  return encoded, (inputs, encoded, log_normalizer)


def _blockwise_backward(query_block, key_block, keys_stored, residuals, encoded_cotangent):
  """The gradients, key block by key block. Every product reads its operands as stored: the
  key and value gradients accumulate transposed ([B, K, H, S]), from the query block's query
  and cotangent transposed once ([B, K, H, G, bq]), so no [bq, bk] block is ever transposed."""
  (query, key, value, query_index, key_valid, query_segments, key_segments), encoded, \
      log_normalizer = residuals
  if keys_stored:  # one query block: the layout moves once here either way
    key, value = jnp.einsum("BSKH->BKSH", key), jnp.einsum("BSKH->BKSH", value)
  head_dim = query.shape[-1]
  scale = jnp.asarray(head_dim**-0.5, query.dtype)
  num_key_blocks = key.shape[2] // key_block
  scaled_query = query * scale
  # D = rowsum(dO * O), the softmax backward's per-row term: [B, K, G, T].
  row_terms = jnp.einsum("BKGTH,BKGTH->BKGT", encoded_cotangent.astype(jnp.float32),
                         encoded.astype(jnp.float32))

  def one_query_block(carry, inputs):
    key_grad, value_grad = carry  # [B, K, H, S] float32
    query, cotangent, query_index, query_segments, log_normalizer, row_term = inputs
    bias = _query_block_bias(query_index, query_segments, key_valid, key_segments)
    query_transposed = jnp.einsum("BKGTH->BKHGT", query)
    cotangent_transposed = jnp.einsum("BKGTH->BKHGT", cotangent)

    def key_step(j, carry):
      query_grad, key_grad, value_grad = carry
      start = j * key_block
      key_j, value_j = _key_slices(key_block, False, start, key, value)
      scores = _block_scores(query, key_j, bias, start)
      probabilities = jnp.exp(scores - log_normalizer[..., None])  # 0 where masked
      value_part = jnp.einsum("BKHGT,BKGTS->BKHS", cotangent_transposed,
                              probabilities.astype(cotangent.dtype),
                              preferred_element_type=jnp.float32)
      probability_grad = jnp.einsum("BKGTH,BKSH->BKGTS", cotangent, value_j,
                                    preferred_element_type=jnp.float32)
      score_grad = probabilities * (probability_grad - row_term[..., None])
      query_grad = query_grad + jnp.einsum("BKGTS,BKSH->BKGTH", score_grad.astype(key_j.dtype),
                                           key_j, preferred_element_type=jnp.float32)
      key_part = jnp.einsum("BKHGT,BKGTS->BKHS", query_transposed,
                            score_grad.astype(query.dtype), preferred_element_type=jnp.float32)
      add = lambda total, part: jax.lax.dynamic_update_slice_in_dim(
          total, jax.lax.dynamic_slice_in_dim(total, start, key_block, axis=3) + part, start,
          axis=3)
      return query_grad, add(key_grad, key_part), add(value_grad, value_part)

    query_grad, key_grad, value_grad = jax.lax.fori_loop(
        0, _key_blocks_seen(query_index, key_block, num_key_blocks), key_step,
        (jnp.zeros(query.shape, jnp.float32), key_grad, value_grad))
    return (key_grad, value_grad), query_grad * scale.astype(jnp.float32)

  batch_size, num_kv_heads, key_length, _ = key.shape
  zeros = jnp.zeros((batch_size, num_kv_heads, head_dim, key_length), jnp.float32)
  (key_grad, value_grad), query_grad = jax.lax.scan(one_query_block, (zeros, zeros), (
      _blocks(scaled_query, query_block, 3), _blocks(encoded_cotangent, query_block, 3),
      _blocks(query_index, query_block, 1), _blocks(query_segments, query_block, 1),
      _blocks(log_normalizer, query_block, 3), _blocks(row_terms, query_block, 3)))
  grad_layout = "BKHS->BSKH" if keys_stored else "BKHS->BKSH"
  return (_unblocks(query_grad, 3).astype(query.dtype),
          jnp.einsum(grad_layout, key_grad).astype(key.dtype),
          jnp.einsum(grad_layout, value_grad).astype(value.dtype), None, None, None, None)


_blockwise.defvjp(_blockwise_forward, _blockwise_backward)
