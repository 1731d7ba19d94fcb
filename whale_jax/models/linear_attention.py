"""Qwen3.5's Gated DeltaNet layer (linear attention) as pure functions over a params dict.

Shape letters: B batch, T new tokens, D model width, K key heads, N value heads (G = N // K
value heads share one key head), H key head dim, E value head dim, C convolution channels
(C = 2 * K * H + N * E: query, key and value, in that order), W convolution width.

  qkv = x @ qkv                             [B, T, C]
  qkv = silu(causal depthwise conv_W(qkv))  each channel sees its own last W inputs
  query, key = l2-normalized per head; query *= H ** -0.5; both repeated to N heads
  beta = sigmoid(x @ beta)                  [B, T, N] write strength
  g = -exp(log_decay_rate) * softplus(x @ decay + decay_bias)   [B, T, N] log decay
  o = gated delta rule (gated_delta.py)     [B, T, N, E]
  out = (RMSNorm(o) * norm * silu(x @ output_gate)) @ output    [B, T, D]

Decoding state of one layer (what kv_cache keeps per linear layer):
  convolution window [B, W - 1, C]: the last W - 1 convolution inputs of each row;
  recurrent state    [B, N, H, E] float32.

Masking: tokens with valid = False (padding) are skipped, wherever they are. The convolution
runs over each row's valid tokens only (compacted, then scattered back), so a token's window
holds the previous real tokens even across padding; beta = g = 0 makes the delta rule pass
the state through padding unchanged. Every row's outputs, state and window are therefore those
of the row without its padding. (transformers only zeroes padded inputs, which is the same at
the start or end of a row but not in its middle.) resets (packed sequences) zero the state
before a token and hide earlier tokens from its convolution window.
"""
import jax
import jax.numpy as jnp

from whale_jax.models import gated_delta

L2_NORM_EPS = 1e-6  # inside the rsqrt, as transformers' and FLA's l2norm


def init(config, rng):
  """Parameters of one layer (unstacked), drawn at the scale transformers initializes them."""
  embed, channels, width = config.embed_dim, config.linear_conv_channels, config.linear_conv_width
  value_heads, value_dim = config.linear_num_value_heads, config.linear_value_head_dim
  rngs = jax.random.split(rng, 7)
  dtype = config.param_jnp_dtype
  normal = lambda rng, shape, fan_in: (jax.random.normal(rng, shape) * fan_in**-0.5).astype(dtype)
  return {
      "qkv": normal(rngs[0], (embed, channels), embed),
      "convolution": normal(rngs[1], (width, channels), width),
      "beta": normal(rngs[2], (embed, value_heads), embed),
      "decay": normal(rngs[3], (embed, value_heads), embed),
      "decay_bias": jnp.ones((value_heads,), dtype),
      "log_decay_rate": jnp.log(jax.random.uniform(rngs[4], (value_heads,), minval=0.01,
                                                   maxval=16.0)).astype(dtype),
      "output_gate": normal(rngs[5], (embed, value_heads, value_dim), embed),
      "norm": jnp.ones((value_dim,), dtype),
      "output": normal(rngs[6], (value_heads, value_dim, embed), value_heads * value_dim),
  }


def logical_axes(config):
  """Same tree as init(), with logical axis names at each leaf.

  The fused query/key/value channels ("linear_channels") are left to the rules table (by
  default replicated: they split into three parts of different widths); value heads are
  "linear_heads".
  """
  del config
  return {"qkv": ("embed", "linear_channels"),                      # [D, C]
          "convolution": ("conv_width", "linear_channels"),         # [W, C]
          "beta": ("embed", "linear_heads"),                        # [D, N]
          "decay": ("embed", "linear_heads"),                       # [D, N]
          "decay_bias": ("linear_heads",),                          # [N]
          "log_decay_rate": ("linear_heads",),                      # [N]
          "output_gate": ("embed", "linear_heads", "head_dim"),     # [D, N, E]
          "norm": ("head_dim",),                                    # [E]
          "output": ("linear_heads", "head_dim", "embed")}          # [N, E, D]


def causal_convolution(inputs, window, weights, segments=None):
  """Depthwise causal convolution of inputs [B, T, C] continuing from window [B, W - 1, C].

  Output t is sum_w weights[w] * x[t - (W - 1) + w] over the window followed by the inputs
  (weights [W, C]; the last tap is the current token). segments [B, T] int (or None): a tap
  reading an earlier segment contributes zero; the window belongs to segment 0.
  Returns:
    [B, T, C] (before the activation)
  """
  width = weights.shape[0]
  length = inputs.shape[1]
  extended = jnp.concatenate([window.astype(inputs.dtype), inputs], axis=1)  # [B, W-1+T, C]
  if segments is not None:
    extended_segments = jnp.pad(segments, [(0, 0), (width - 1, 0)])  # window: segment 0
  output = jnp.zeros_like(inputs)
  for tap in range(width):
    shifted = extended[:, tap:tap + length]
    if segments is not None:
      same = extended_segments[:, tap:tap + length] == segments
      shifted = jnp.where(same[..., None], shifted, 0)
    output = output + shifted * weights[tap]
  return output


def _l2_normalize(x):
  x = x.astype(jnp.float32)
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + L2_NORM_EPS)


def _gated_rms_norm(x, gate, scale, eps):
  """RMSNorm of x [..., E] (plain scale), times silu(gate) in float32, back in x's dtype."""
  dtype = x.dtype
  normed = x.astype(jnp.float32)
  normed = (normed * jax.lax.rsqrt(jnp.mean(normed * normed, axis=-1, keepdims=True) + eps))
  normed = scale.astype(dtype) * normed.astype(dtype)
  return (normed.astype(jnp.float32) * jax.nn.silu(gate.astype(jnp.float32))).astype(dtype)


def _compact(x, valid):
  """Moves each row's valid entries of x [B, T, ...] to its front, in order; zeros after."""
  rank = jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1  # [B, T] index among valid tokens
  target = jnp.where(valid, rank, x.shape[1])  # padding goes out of range and is dropped
  rows = jnp.arange(x.shape[0])[:, None]
  return jnp.zeros_like(x).at[rows, target].set(x, mode="drop"), jnp.maximum(rank, 0)


def apply(params, config, x, valid=None, resets=None, window=None, state=None,
          recurrent=False):
  """The whole layer over T new tokens, continuing from a window and state (or from nothing).

  Args:
    x: [B, T, D] (normalized) residual stream.
    valid: [B, T] bool, False for padding (anywhere in the row); None = all valid.
    resets: [B, T] bool, True where a new packed segment starts; None = one segment per row.
    window: [B, W - 1, C] convolution inputs before these tokens; None = zeros.
    state: [B, N, H, E] recurrent state before these tokens; None = zeros.
    recurrent: run the delta rule one token at a time (gated_delta.recurrent, for decoding a
      few tokens) instead of chunk-parallel (gated_delta.chunked, for prefill and training).
  Returns:
    (out [B, T, D], new window [B, W - 1, C], new state [B, N, H, E] float32); the window
    holds the last W - 1 valid inputs (continuing the old window if there are fewer).
  """
  batch_size, length, _ = x.shape
  key_heads, key_dim = config.linear_num_key_heads, config.linear_key_head_dim
  value_heads, value_dim = config.linear_num_value_heads, config.linear_value_head_dim
  width = config.linear_conv_width
  if window is None:
    window = jnp.zeros((batch_size, width - 1, config.linear_conv_channels), x.dtype)

  inputs = jnp.einsum("BTD,DC->BTC", x, params["qkv"])
  segments = None if resets is None else jnp.cumsum(resets.astype(jnp.int32), axis=1)
  if valid is None:
    num_valid = jnp.full((batch_size,), length, jnp.int32)
    convolved = causal_convolution(inputs, window, params["convolution"], segments)
  else:
    num_valid = jnp.sum(valid, axis=1, dtype=jnp.int32)
    inputs, rank = _compact(inputs, valid)
    if segments is not None:
      segments, _ = _compact(segments, valid)
    convolved = causal_convolution(inputs, window, params["convolution"], segments)
    convolved = jnp.take_along_axis(convolved, rank[..., None], axis=1)  # back in place
  mixed = jax.nn.silu(convolved)
  query, key, value = jnp.split(mixed, [key_heads * key_dim, 2 * key_heads * key_dim], axis=-1)
  group = value_heads // key_heads
  query = jnp.repeat(query.reshape(batch_size, length, key_heads, key_dim), group, axis=2)
  key = jnp.repeat(key.reshape(batch_size, length, key_heads, key_dim), group, axis=2)
  value = value.reshape(batch_size, length, value_heads, value_dim)
  query = _l2_normalize(query) * key_dim**-0.5  # [B, T, N, H]
  key = _l2_normalize(key)

  beta = jax.nn.sigmoid(jnp.einsum("BTD,DN->BTN", x, params["beta"]).astype(jnp.float32))
  log_decay = -jnp.exp(params["log_decay_rate"].astype(jnp.float32)) * jax.nn.softplus(
      jnp.einsum("BTD,DN->BTN", x, params["decay"]).astype(jnp.float32)
      + params["decay_bias"].astype(jnp.float32))
  if valid is not None:
    beta = jnp.where(valid[..., None], beta, 0.0)
    log_decay = jnp.where(valid[..., None], log_decay, 0.0)
  rule = gated_delta.recurrent if recurrent else gated_delta.chunked
  encoded, state = rule(query, key, value, log_decay, beta, state, resets)

  gate = jnp.einsum("BTD,DNE->BTNE", x, params["output_gate"])
  encoded = _gated_rms_norm(encoded.astype(x.dtype), gate, params["norm"], config.rms_norm_eps)
  out = jnp.einsum("BTNE,NED->BTD", encoded, params["output"])

  # The last W - 1 of (old window, this call's valid inputs), per row.
  extended = jnp.concatenate([window.astype(inputs.dtype), inputs], axis=1)  # [B, W-1+T, C]
  index = num_valid[:, None] + jnp.arange(width - 1)  # [B, W - 1]
  new_window = jnp.take_along_axis(extended, index[..., None], axis=1)
  return out, new_window.astype(window.dtype), state
