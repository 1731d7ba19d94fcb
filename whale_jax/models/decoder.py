"""The decoder-only transformer: parameters, logical axes and forward passes.

Shape letters: B batch, T length, S cache length, D model width, F MLP width, V vocabulary,
L layers, N query heads, K key/value heads, H head dim.

Params tree (layer weights stacked on a leading L axis and run under `jax.lax.scan`):
  {"embedding": [V, D],
   "layers": {"attention_norm": [L, D], "attention": {...see attention.py, each [L, ...]},
              "mlp_norm": [L, D], "mlp": {"gate": [L, D, F], "up": [L, D, F], "down": [L, F, D]}},
   "final_norm": [D],
   "unembedding": [D, V]}          # only when config.tie_embeddings is False

Two forward passes share one layer function:
  forward(params, config, tokens, ...)                     full sequence, no cache
  forward_with_cache(params, config, tokens, cache, ...)   prefill or decode against a KV cache

Hybrid models (config.is_hybrid: Qwen3.5) go through the same entry points; their layer stack,
params tree and cache entries are described in hybrid_decoder.py.
"""
import functools

import jax
import jax.numpy as jnp

from whale_jax.models import attention
from whale_jax.models import hybrid_decoder
from whale_jax.models import kv_cache
from whale_jax.models import normalization
from whale_jax.models import products
from whale_jax.models import remat
from whale_jax.parallel import rules


def _init_layer(config, rng):
  rngs = jax.random.split(rng, 4)
  dtype = config.param_jnp_dtype
  embed, mlp = config.embed_dim, config.mlp_dim
  normal = lambda rng, shape, fan_in: (jax.random.normal(rng, shape) * fan_in**-0.5).astype(dtype)
  return {
      "attention_norm": jnp.ones((embed,), dtype),
      "attention": attention.init(config, rngs[0]),
      "mlp_norm": jnp.ones((embed,), dtype),
      "mlp": {"gate": normal(rngs[1], (embed, mlp), embed),
              "up": normal(rngs[2], (embed, mlp), embed),
              "down": normal(rngs[3], (mlp, embed), mlp)},
  }


def init_params(config, rng):
  """Random parameters (scaled normal weights, unit norms, zero biases) in config.param_dtype."""
  if config.is_hybrid:
    return hybrid_decoder.init_params(config, rng)
  embedding_rng, unembedding_rng, layers_rng = jax.random.split(rng, 3)
  dtype = config.param_jnp_dtype
  layer_rngs = jax.random.split(layers_rng, config.num_layers)
  params = {
      # Scaled so that tied logits start near unit scale (a loss near log V).
      "embedding": (jax.random.normal(embedding_rng, (config.vocab_size, config.embed_dim))
                    * config.embed_dim**-0.5).astype(dtype),
      "layers": jax.vmap(functools.partial(_init_layer, config))(layer_rngs),
      "final_norm": jnp.ones((config.embed_dim,), dtype),
  }
  if not config.tie_embeddings:
    params["unembedding"] = (jax.random.normal(unembedding_rng, (config.embed_dim,
                                                                 config.vocab_size))
                             * config.embed_dim**-0.5).astype(dtype)
  return params


def logical_axes(config):
  """Same tree as init_params(), with a tuple of logical axis names at each leaf."""
  if config.is_hybrid:
    return hybrid_decoder.logical_axes(config)
  layer = {
      "attention_norm": ("norm",),
      "attention": attention.logical_axes(config),
      "mlp_norm": ("norm",),
      "mlp": {"gate": ("embed", "mlp"), "up": ("embed", "mlp"), "down": ("mlp", "embed")},
  }
  axes = {
      "embedding": ("vocab", "embed"),
      "layers": jax.tree.map(lambda names: ("layers", *names), layer,
                             is_leaf=lambda x: isinstance(x, tuple)),
      "final_norm": ("norm",),
  }
  if not config.tie_embeddings:
    axes["unembedding"] = ("embed", "vocab")
  return axes


def _mlp(params, x, inference=False):
  """SwiGLU on the rows of x [B, T, D]: 2-D matmuls, whose backward XLA lays out better on
  CPU than the 3-D einsums' (1.6x faster MLP backward measured in bench/train_throughput).
  inference: not differentiated; the products accumulate in float32 (models/products.py)."""
  matmul = products.matmul if inference else jnp.matmul
  rows = x.reshape(-1, x.shape[-1])  # [B * T, D]
  gate = matmul(rows, params["gate"])
  up = matmul(rows, params["up"])
  return matmul(jax.nn.silu(gate) * up, params["down"]).reshape(x.shape)


def _layer(config, params, x, positions, mask, kv_writer=None):
  """One pre-norm transformer block.

  mask: attention.CausalMask of the queries over the keys attention reads.
  kv_writer(key, value) -> (keys, values, state) stores this step's key/value [B, T, K, H] and
  returns what attention reads ([B, S, K, H]) plus a state passed back to the caller. With a
  kv_writer the block is on an inference path (forward_with_cache: prefill and decoding, never
  differentiated), whose weight products accumulate in float32 (models/products.py).
  Returns:
    (x [B, T, D], state or None)
  """
  x = rules.constrain(x, ("batch", "length", "embed"))
  h = normalization.rms_norm(x, params["attention_norm"], config.rms_norm_eps)
  inference = kv_writer is not None
  query, key, value = attention.project(params["attention"], config, h, positions, inference)
  state = None
  if inference:
    key, value, state = kv_writer(key, value)
  encoded = attention.causal_attend(config, query, key, value, mask, inference)
  x = x + attention.output(params["attention"], config, encoded, inference)
  h = normalization.rms_norm(x, params["mlp_norm"], config.rms_norm_eps)
  return x + _mlp(params["mlp"], h, inference), state


def _cast(params, config):
  dtype = config.compute_jnp_dtype
  return jax.tree.map(lambda p: p.astype(dtype) if p.dtype != dtype else p, params)


def embed(params, config, tokens, bits=False, table_bits=None):
  """tokens [B, T] -> [B, T, D] in the compute dtype.

  bits: gather a 16-bit embedding as its bits (kv_cache.as_bits: XLA's CPU gather would
  convert the whole table to float32 first); not differentiable.
  table_bits: with bits, inference_bits(params, config)["embedding"], made once, which spares
  this call the conversion of the whole table to its bits.
  """
  embedding = params["embedding"]
  if bits and table_bits is not None:
    rows = kv_cache.from_bits(jnp.take(table_bits, tokens, axis=0), config.compute_jnp_dtype)
  elif bits:
    rows = kv_cache.from_bits(jnp.take(kv_cache.as_bits(embedding), tokens, axis=0),
                              embedding.dtype)
  else:
    rows = jnp.take(embedding, tokens, axis=0)
  return rows.astype(config.compute_jnp_dtype)


def unembed(params, config, x):
  """Final norm and projection to the vocabulary: [B, T, D] -> float32 logits [B, T, V]."""
  if config.is_hybrid:
    x = hybrid_decoder.final_norm(params, config, x)
  else:
    x = normalization.rms_norm(x, params["final_norm"].astype(x.dtype), config.rms_norm_eps)
  if config.tie_embeddings:
    logits = jnp.einsum("BTD,VD->BTV", x, params["embedding"].astype(x.dtype),
                        preferred_element_type=jnp.float32)
  else:
    logits = jnp.einsum("BTD,DV->BTV", x, params["unembedding"].astype(x.dtype),
                        preferred_element_type=jnp.float32)
  return rules.constrain(logits, ("batch", "length", "vocab"))


def default_positions(tokens, attention_mask=None):
  """[B, T] RoPE positions: 0, 1, ... counted over the unmasked tokens of each row.

  With left padding the first real token gets position 0, as in an unpadded run.
  """
  if attention_mask is None:
    return jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
  return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=1) - 1, 0)


def hidden_states(params, config, tokens, positions=None, attention_mask=None,
                  segment_ids=None):
  """The residual stream after the last layer, before the final norm: [B, T, D].

  Args:
    tokens: [B, T] int token ids.
    positions: [B, T] int RoPE positions; default_positions(tokens, attention_mask) if None.
    attention_mask: [B, T], 1 for real tokens and 0 for padding (keys that nobody may see).
    segment_ids: [B, T] int; tokens attend only within their segment (sequence packing).
  """
  if positions is None:
    positions = default_positions(tokens, attention_mask)
  if config.is_hybrid:
    params = _cast(params, config)
    return hybrid_decoder.hidden_states(params, config, embed(params, config, tokens), positions,
                                        attention_mask, segment_ids)
  mask = attention.sequence_mask(tokens.shape[1], tokens.shape[0], attention_mask, segment_ids)
  params = _cast(params, config)
  x = embed(params, config, tokens)

  def body(x, layer_params):
    x, _ = _layer(config, layer_params, x, positions, mask)
    return x, None

  x, _ = jax.lax.scan(remat.wrap(config, body), x, params["layers"])
  return x


def forward(params, config, tokens, positions=None, attention_mask=None, segment_ids=None):
  """Logits [B, T, V] (float32) for tokens [B, T]; see hidden_states() for the arguments."""
  x = hidden_states(params, config, tokens, positions, attention_mask, segment_ids)
  return unembed(_cast(params, config), config, x)


def inference_bits(params, config):
  """The embedding and the stacked layer weights in the compute dtype, 16-bit floats as their
  bits: what forward_with_cache(bits=True) and decode_step.step gather and slice.

  A copy, made once per params version by callers that run many inference passes over it (the
  sampler): without it, every pass converts the embedding and the whole layer stacks again
  (~100M bfloat16 on 2 cores: ~70 ms of each prefill, ~20 ms of each decode call). Plain
  decoders only; for float32 it is the params themselves, so there is nothing to prepare.
  Returns {"embedding": [V, D], "layers": the params' layer tree}.
  """
  convert = lambda p: kv_cache.as_bits(p.astype(config.compute_jnp_dtype))
  return {"embedding": convert(params["embedding"]),
          "layers": jax.tree.map(convert, params["layers"])}


def forward_with_cache(params, config, tokens, cache, positions=None, num_new_tokens=None,
                       bits=False, weight_bits=None):
  """Runs tokens through the model against a KV cache: a prefill or one or more decode steps.

  Row b's T new tokens are written to cache slots cache["length"][b] + t and attend to all
  slots up to their own. Writes past the cache's capacity are dropped: callers size the cache.
  An inference path (prefill, decoding), never differentiated.

  Args:
    tokens: [B, T] int; with right padding when rows have different numbers of new tokens.
    cache: from kv_cache.init(); its batch size is B.
    positions: [B, T] RoPE positions; default cache["length"][:, None] + t.
    num_new_tokens: [B] int, how many of the T tokens are real in each row (default T); the
      cache length advances by this much, so padding is overwritten by the next call. In
      hybrid models padding also leaves each row's recurrent state and convolution window as
      they were after its last real token.
    bits: static; move 16-bit float weights, cache and embedding rows through the layer scan
      as their bits (kv_cache.as_bits). For XLA's CPU compiler, which otherwise runs their
      dynamic-slices, gathers and scatters in float32 over whole buffers; elsewhere (TPU) a
      bitcast may be a copy, so the default is off. Not differentiable when on.
    weight_bits: with bits, inference_bits(params, config) made once by the caller, read in
      place of converting the embedding and weights at each call (plain decoders only).
  Returns:
    (logits [B, T, V] float32, updated cache)
  """
  batch_size, length = tokens.shape
  offsets = cache["length"]
  query_index = offsets[:, None] + jnp.arange(length, dtype=jnp.int32)  # [B, T]
  if positions is None:
    positions = query_index
  if config.is_hybrid:
    if num_new_tokens is None:
      num_new_tokens = jnp.full((batch_size,), length, jnp.int32)
    params = _cast(params, config)
    x, new_cache = hybrid_decoder.forward_with_cache(params, config, embed(params, config, tokens),
                                                     cache, positions, num_new_tokens)
    new_cache["length"] = offsets + num_new_tokens
    return unembed(params, config, x), new_cache
  mask = attention.CausalMask(query_index, cache["key"].shape[2])
  params = _cast(params, config)
  if weight_bits is not None and not bits:
    raise ValueError("forward_with_cache: weight_bits is read only with bits=True.")
  table_bits = None if weight_bits is None else weight_bits["embedding"]
  x = embed(params, config, tokens, bits=bits, table_bits=table_bits)
  # The layer scan slices the stacked weights and writes the stacked cache: with bits, 16-bit
  # floats travel as their bits through it, as XLA's CPU compiler would otherwise convert both
  # stacks to float32 and back around the loop.
  dtype, cache_dtype = config.compute_jnp_dtype, cache["key"].dtype
  as_bits = functools.partial(kv_cache.as_bits, enabled=bits)

  def body(carry, inputs):
    x, keys, values = carry
    layer_bits, layer = inputs
    layer_params = jax.tree.map(lambda p: kv_cache.from_bits(p, dtype), layer_bits)

    def kv_writer(key, value):
      new_keys, new_values, layer_keys, layer_values = kv_cache.write_layer(
          keys, values, layer, query_index, as_bits(key.astype(cache_dtype)),
          as_bits(value.astype(cache_dtype)))
      return (kv_cache.from_bits(layer_keys, cache_dtype),
              kv_cache.from_bits(layer_values, cache_dtype), (new_keys, new_values))

    x, (keys, values) = _layer(config, layer_params, x, positions, mask, kv_writer)
    return (x, keys, values), None

  layers = jnp.arange(config.num_layers, dtype=jnp.int32)
  stacked = (jax.tree.map(as_bits, params["layers"]) if weight_bits is None
             else weight_bits["layers"])
  (x, keys, values), _ = jax.lax.scan(
      body, (x, as_bits(cache["key"]), as_bits(cache["value"])), (stacked, layers))
  if num_new_tokens is None:
    num_new_tokens = jnp.full((batch_size,), length, jnp.int32)
  new_cache = {"key": kv_cache.from_bits(keys, cache_dtype),
               "value": kv_cache.from_bits(values, cache_dtype),
               "length": offsets + num_new_tokens}
  return unembed(params, config, x), new_cache
