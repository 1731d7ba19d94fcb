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
  """params in the compute dtype (kv_cache.load: stored bits read as such)."""
  dtype = config.compute_jnp_dtype
  return jax.tree.map(lambda p: kv_cache.load(p, dtype), params)


def embed(params, config, tokens):
  """tokens [B, T] -> [B, T, D] in the compute dtype.

  The embedding is gathered as stored: an inference caller may store it as the compute
  dtype's bits (kv_cache.as_bits), and the rows are then loaded from those.
  """
  return kv_cache.load(jnp.take(params["embedding"], tokens, axis=0), config.compute_jnp_dtype)


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

  x, _ = jax.lax.scan(remat.wrap(config, body), x, params["layers"],
                      unroll=config.unroll_layers)
  return x


def forward(params, config, tokens, positions=None, attention_mask=None, segment_ids=None):
  """Logits [B, T, V] (float32) for tokens [B, T]; see hidden_states() for the arguments."""
  x = hidden_states(params, config, tokens, positions, attention_mask, segment_ids)
  return unembed(_cast(params, config), config, x)


def forward_with_cache(params, config, tokens, cache, positions=None, num_new_tokens=None):
  """Runs tokens through the model against a KV cache: a prefill or one or more decode steps.

  Row b's T new tokens are written to cache slots cache["length"][b] + t and attend to all
  slots up to their own. Writes past the cache's capacity are dropped: callers size the cache.
  An inference path (prefill, decoding), never differentiated.

  Args:
    params: the params tree. A plain decoder's embedding and layer weights, and the cache's
      key and value, may be stored as the compute dtype's bits (kv_cache.as_bits): each layer
      loads its slice of them (kv_cache.load) and the cache keeps its storage. This is how a
      sampler on XLA's CPU compiler keeps 16-bit floats (sampling/layout.py).
    tokens: [B, T] int; with right padding when rows have different numbers of new tokens.
    cache: from kv_cache.init(); its batch size is B.
    positions: [B, T] RoPE positions; default cache["length"][:, None] + t.
    num_new_tokens: [B] int, how many of the T tokens are real in each row (default T); the
      cache length advances by this much, so padding is overwritten by the next call. In
      hybrid models padding also leaves each row's recurrent state and convolution window as
      they were after its last real token.
  Returns:
    (logits [B, T, V] float32, updated cache)
  """
  batch_size, length = tokens.shape
  offsets = cache["length"]
  query_index = offsets[:, None] + jnp.arange(length, dtype=jnp.int32)  # [B, T]
  if positions is None:
    positions = query_index
  if num_new_tokens is None:
    num_new_tokens = jnp.full((batch_size,), length, jnp.int32)
  if config.is_hybrid:
    params = _cast(params, config)
    x, new_cache = hybrid_decoder.forward_with_cache(params, config, embed(params, config, tokens),
                                                     cache, positions, num_new_tokens)
    new_cache["length"] = offsets + num_new_tokens
    return unembed(params, config, x), new_cache
  mask = attention.CausalMask(query_index, cache["key"].shape[2])
  dtype = config.compute_jnp_dtype
  x = embed(params, config, tokens)
  # The scan slices each layer's weights and cache out of the stacks as they are stored.
  cache_dtype = dtype if kv_cache.is_bits(cache["key"]) else cache["key"].dtype

  def body(carry, inputs):
    x, keys, values = carry
    layer_params, layer = inputs
    layer_params = jax.tree.map(lambda p: kv_cache.load(p, dtype), layer_params)

    def kv_writer(key, value):
      new_keys, new_values, layer_keys, layer_values = kv_cache.write_layer(
          keys, values, layer, query_index, key.astype(cache_dtype), value.astype(cache_dtype))
      return (kv_cache.from_bits(layer_keys, cache_dtype),
              kv_cache.from_bits(layer_values, cache_dtype), (new_keys, new_values))

    x, (keys, values) = _layer(config, layer_params, x, positions, mask, kv_writer)
    return (x, keys, values), None

  layers = jnp.arange(config.num_layers, dtype=jnp.int32)
  (x, keys, values), _ = jax.lax.scan(
      body, (x, cache["key"], cache["value"]), (params["layers"], layers))
  new_cache = {"key": keys, "value": values, "length": offsets + num_new_tokens}
  top = {name: value for name, value in params.items() if name != "layers"}
  return unembed(_cast(top, config), config, x), new_cache
