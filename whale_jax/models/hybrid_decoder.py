"""Qwen3.5's hybrid layer stack: Gated DeltaNet layers interleaved with gated full attention.

Shape letters: B batch, T length, S cache length, D model width, F MLP width, L layers of one
kind, K key/value heads, H head dim. decoder.py calls into this module for model_type
"qwen3_5"; its public entry points (forward, hidden_states, forward_with_cache,
init_params, logical_axes) stay the ones to use.

Params tree: the two kinds of layers have different weights, so each kind is stacked on its
own leading axis, in layer order:
  {"embedding": [V, D], "final_norm": [D], "unembedding": [D, V] (untied only),
   "linear_layers":    {"attention_norm": [L, D], "linear_attention": {see linear_attention.py},
                        "mlp_norm": [L, D], "mlp": {"gate": [L, D, F], ...}},
   "attention_layers": {"attention_norm": [L, D], "attention": {see gated_attention.py},
                        "mlp_norm": [L, D], "mlp": {...}}}
All RMSNorm weights here are zero-centered (scale = 1 + weight), as in the checkpoints.
A stack is absent when config.layer_types has no layer of that kind.

Layer schedule and compile time: config.layer_types is split into its shortest repeating
pattern (Qwen3.5: 3 linear + 1 full attention, repeated 6 or 8 times). Each stack is reshaped
(free) to [repeats, layers of that kind per pattern, ...], and a `lax.scan` over the repeats
runs one pattern per step; inside it, each run of same-kind layers is an inner scan. The
compiled program therefore holds one linear layer and one attention layer whatever the depth.
A schedule with no repetition (pattern = all layers) still works; only then does compile time
grow with the number of runs of same-kind layers.

Decoding cache (kv_cache.init): "key"/"value" [L_full, B, S, K, H] for the attention layers,
"convolution_window" [L_linear, B, W - 1, C] and "recurrent_state" [L_linear, B, N, H, E] for
the linear ones, "length" [B]. All are carried through the scans and updated in place.
"""
import functools

import jax
import jax.numpy as jnp

from whale_jax.models import attention
from whale_jax.models import gated_attention
from whale_jax.models import kv_cache
from whale_jax.models import linear_attention
from whale_jax.models import normalization
from whale_jax.models import remat
from whale_jax.parallel import rules

LINEAR, FULL = "linear_attention", "full_attention"
_STACKS = {LINEAR: "linear_layers", FULL: "attention_layers"}
_MIXERS = {LINEAR: "linear_attention", FULL: "attention"}


def schedule(config):
  """(pattern, repeats): config.layer_types == pattern * repeats with the shortest pattern."""
  types = config.layer_types
  for size in range(1, len(types) + 1):
    if len(types) % size == 0 and types == types[:size] * (len(types) // size):
      return types[:size], len(types) // size
  raise AssertionError("unreachable: the whole list is always a pattern")


def _runs(pattern):
  """[(kind, first index within that kind's per-pattern block, count)] for each run."""
  runs, seen = [], {LINEAR: 0, FULL: 0}
  for kind in pattern:
    if runs and runs[-1][0] == kind:
      runs[-1] = (kind, runs[-1][1], runs[-1][2] + 1)
    else:
      runs.append((kind, seen[kind], 1))
    seen[kind] += 1
  return runs


def _init_layer(config, kind, rng):
  rngs = jax.random.split(rng, 4)
  dtype = config.param_jnp_dtype
  embed, mlp = config.embed_dim, config.mlp_dim
  normal = lambda rng, shape, fan_in: (jax.random.normal(rng, shape) * fan_in**-0.5).astype(dtype)
  mixer = (linear_attention.init if kind == LINEAR else gated_attention.init)(config, rngs[0])
  return {"attention_norm": jnp.zeros((embed,), dtype), _MIXERS[kind]: mixer,
          "mlp_norm": jnp.zeros((embed,), dtype),
          "mlp": {"gate": normal(rngs[1], (embed, mlp), embed),
                  "up": normal(rngs[2], (embed, mlp), embed),
                  "down": normal(rngs[3], (mlp, embed), mlp)}}


def init_params(config, rng):
  """Random parameters in config.param_dtype (zero norm weights = unit scale)."""
  embedding_rng, unembedding_rng, layers_rng = jax.random.split(rng, 3)
  dtype = config.param_jnp_dtype
  layer_rngs = jax.random.split(layers_rng, config.num_layers)
  params = {
      "embedding": jax.random.normal(embedding_rng, (config.vocab_size, config.embed_dim)
                                     ).astype(dtype),
      "final_norm": jnp.zeros((config.embed_dim,), dtype),
  }
  for kind, indices in ((LINEAR, config.linear_layer_indices),
                        (FULL, config.attention_layer_indices)):
    if indices:
      init = jax.vmap(functools.partial(_init_layer, config, kind))
      params[_STACKS[kind]] = init(layer_rngs[jnp.asarray(indices)])
  if not config.tie_embeddings:
    params["unembedding"] = (jax.random.normal(unembedding_rng, (config.embed_dim,
                                                                 config.vocab_size))
                             * config.embed_dim**-0.5).astype(dtype)
  return params


def logical_axes(config):
  """Same tree as init_params(), with a tuple of logical axis names at each leaf."""
  axes = {"embedding": ("vocab", "embed"), "final_norm": ("norm",)}
  mlp = {"gate": ("embed", "mlp"), "up": ("embed", "mlp"), "down": ("mlp", "embed")}
  for kind, indices, mixer in ((LINEAR, config.linear_layer_indices,
                                linear_attention.logical_axes(config)),
                               (FULL, config.attention_layer_indices,
                                gated_attention.logical_axes(config))):
    if indices:
      layer = {"attention_norm": ("norm",), _MIXERS[kind]: mixer, "mlp_norm": ("norm",),
               "mlp": mlp}
      axes[_STACKS[kind]] = jax.tree.map(lambda names: ("layers", *names), layer,
                                         is_leaf=lambda x: isinstance(x, tuple))
  if not config.tie_embeddings:
    axes["unembedding"] = ("embed", "vocab")
  return axes


def final_norm(params, config, x):
  return normalization.zero_centered_rms_norm(x, params["final_norm"], config.rms_norm_eps)


def _mlp(params, x):
  gate = jnp.einsum("BTD,DF->BTF", x, params["gate"])
  up = jnp.einsum("BTD,DF->BTF", x, params["up"])
  return jnp.einsum("BTF,FD->BTD", jax.nn.silu(gate) * up, params["down"])


def _block(config, params, x, mixer):
  """Pre-norm residual block around mixer(h) -> (out, state), then the MLP block."""
  x = rules.constrain(x, ("batch", "length", "embed"))
  h = normalization.zero_centered_rms_norm(x, params["attention_norm"], config.rms_norm_eps)
  out, state = mixer(h)
  x = x + out
  h = normalization.zero_centered_rms_norm(x, params["mlp_norm"], config.rms_norm_eps)
  return x + _mlp(params["mlp"], h), state


def _run_stack(config, params, x, carry, layer_fns):
  """Runs all layers in schedule order.

  layer_fns[kind](layer_params, x, carry, index) -> (x, carry), where index is the layer's
  position in its kind's stack (a traced int32). carry is threaded through every layer.
  """
  pattern, repeats = schedule(config)
  per_pattern = {kind: pattern.count(kind) for kind in (LINEAR, FULL)}
  stacks = {kind: jax.tree.map(lambda p, n=per_pattern[kind]: p.reshape(repeats, n,
                                                                          *p.shape[1:]),
                               params[_STACKS[kind]])
            for kind in (LINEAR, FULL) if per_pattern[kind]}

  def pattern_body(state, inputs):
    x, carry = state
    block_params, repeat = inputs
    for kind, start, count in _runs(pattern):
      run = jax.tree.map(lambda p, s=start, c=count: p[s:s + c], block_params[kind])
      first = repeat * per_pattern[kind] + start

      def layer_body(state, inputs, kind=kind):
        x, carry = state
        layer_params, index = inputs
        return layer_fns[kind](layer_params, x, carry, index), None

      indices = first + jnp.arange(count, dtype=jnp.int32)
      if count == 1:
        (x, carry), _ = layer_body((x, carry), (jax.tree.map(lambda p: p[0], run), indices[0]))
      else:
        (x, carry), _ = jax.lax.scan(layer_body, (x, carry), (run, indices))
    return (x, carry), None

  (x, carry), _ = jax.lax.scan(pattern_body, (x, carry),
                               (stacks, jnp.arange(repeats, dtype=jnp.int32)))
  return x, carry


def hidden_states(params, config, x, positions, attention_mask=None, segment_ids=None):
  """Residual stream [B, T, D] after the last layer for embedded tokens x [B, T, D].

  attention_mask [B, T] (1 = real token) and segment_ids [B, T] (packing) are applied by both
  kinds of layers: full attention masks keys; linear layers skip padding and restart their
  state and convolution window where a segment starts.
  """
  batch_size, length, _ = x.shape
  mask = attention.sequence_mask(length, batch_size, attention_mask, segment_ids)
  valid = None if attention_mask is None else attention_mask.astype(bool)
  resets = None
  if segment_ids is not None:
    resets = jnp.concatenate([jnp.zeros((batch_size, 1), bool),
                              segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)

  def linear_layer(layer_params, x, carry, index):
    del index

    def mixer(h):
      out, _, _ = linear_attention.apply(layer_params["linear_attention"], config, h,
                                         valid=valid, resets=resets)
      return out, None

    x, _ = _block(config, layer_params, x, mixer)
    return x, carry

  def attention_layer(layer_params, x, carry, index):
    del index
    mixer = lambda h: gated_attention.apply(layer_params["attention"], config, h, positions,
                                            mask)
    x, _ = _block(config, layer_params, x, mixer)
    return x, carry

  x, _ = _run_stack(config, params, x, (), {LINEAR: remat.wrap(config, linear_layer),
                                            FULL: remat.wrap(config, attention_layer)})
  return x


def forward_with_cache(params, config, x, cache, positions, num_new_tokens):
  """Embedded new tokens x [B, T, D] through the stack against a cache.

  Linear layers run the chunked delta rule when T > 1 and the recurrence when T == 1; rows'
  padding beyond num_new_tokens[b] leaves their recurrent state and window untouched.
  Returns:
    (residual stream [B, T, D], updated cache without its "length" advanced)
  """
  batch_size, length, _ = x.shape
  offsets = cache["length"]
  query_index = offsets[:, None] + jnp.arange(length, dtype=jnp.int32)  # [B, T]
  carry = {name: cache[name] for name in kv_cache.layer_leaves(config)}
  if "key" in carry:
    mask = attention.CausalMask(query_index, cache["key"].shape[2])
  valid = jnp.arange(length)[None, :] < num_new_tokens[:, None]  # [B, T]

  def linear_layer(layer_params, x, carry, index):
    window = jax.lax.dynamic_index_in_dim(carry["convolution_window"], index, 0, False)
    state = jax.lax.dynamic_index_in_dim(carry["recurrent_state"], index, 0, False)
    outputs = {}

    def mixer(h):
      out, outputs["window"], outputs["state"] = linear_attention.apply(
          layer_params["linear_attention"], config, h, valid=valid, window=window, state=state,
          recurrent=length == 1)
      return out, None

    x, _ = _block(config, layer_params, x, mixer)
    carry = dict(carry)
    carry["convolution_window"] = jax.lax.dynamic_update_index_in_dim(
        carry["convolution_window"], outputs["window"].astype(carry["convolution_window"].dtype),
        index, 0)
    carry["recurrent_state"] = jax.lax.dynamic_update_index_in_dim(
        carry["recurrent_state"], outputs["state"].astype(carry["recurrent_state"].dtype), index, 0)
    return x, carry

  def attention_layer(layer_params, x, carry, index):
    def kv_writer(key, value):
      keys, values, layer_keys, layer_values = kv_cache.write_layer(
          carry["key"], carry["value"], index, query_index, key, value)
      return layer_keys, layer_values, (keys, values)

    mixer = lambda h: gated_attention.apply(layer_params["attention"], config, h, positions,
                                            mask, kv_writer)
    x, (keys, values) = _block(config, layer_params, x, mixer)
    return x, {**carry, "key": keys, "value": values}

  x, carry = _run_stack(config, params, x, carry, {LINEAR: linear_layer, FULL: attention_layer})
  return x, {**cache, **carry}
