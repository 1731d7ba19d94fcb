"""Qwen3.5's full-attention layer: grouped-query attention with a sigmoid output gate.

Shape letters: B batch, T query length, S key/value length, D model width, N query heads,
K key/value heads, H head dim, R rotary dims (config.rotary_dim <= H).

Differences from attention.py (which it reuses for the softmax itself):
  - one projection gives each query head its query and an output gate (HF `q_proj` rows are
    [query head 0, gate head 0, query head 1, ...]); the attention output is multiplied by
    sigmoid(gate) before the output projection;
  - query/key RMSNorm is zero-centered (scale 1 + weight);
  - RoPE rotates only the first R dims of each head (partial rotary), the rest pass through.
Not supported: biases, sliding windows, multimodal (3D) RoPE positions (with text-only
positions all three M-RoPE sections see the same position, which is plain RoPE).
"""
import jax
import jax.numpy as jnp

from whale_jax.models import attention
from whale_jax.models import normalization
from whale_jax.models import rope


def init(config, rng):
  """Parameters of one layer (unstacked); norms are zero (scale 1)."""
  embed, heads, kv_heads, head_dim = (config.embed_dim, config.num_heads, config.num_kv_heads,
                                      config.head_dim)
  rngs = jax.random.split(rng, 4)
  dtype = config.param_jnp_dtype
  normal = lambda rng, shape, fan_in: (jax.random.normal(rng, shape) * fan_in**-0.5).astype(dtype)
  return {
      "query_and_gate": normal(rngs[0], (embed, heads, 2, head_dim), embed),
      "key": normal(rngs[1], (embed, kv_heads, head_dim), embed),
      "value": normal(rngs[2], (embed, kv_heads, head_dim), embed),
      "output": normal(rngs[3], (heads, head_dim, embed), heads * head_dim),
      "query_norm": jnp.zeros((head_dim,), dtype),
      "key_norm": jnp.zeros((head_dim,), dtype),
  }


def logical_axes(config):
  """Same tree as init(), with logical axis names at each leaf."""
  del config
  return {"query_and_gate": ("embed", "heads", None, "head_dim"),  # [D, N, 2, H]
          "key": ("embed", "kv_heads", "head_dim"),                # [D, K, H]
          "value": ("embed", "kv_heads", "head_dim"),              # [D, K, H]
          "output": ("heads", "head_dim", "embed"),                # [N, H, D]
          "query_norm": ("head_dim",), "key_norm": ("head_dim",)}


def _partial_rope(x, sin, cos):
  """Rotates the first R dims of x [B, T, N, H] (sin/cos [B, T, R]); the rest pass through."""
  rotary_dim = sin.shape[-1]
  return jnp.concatenate([rope.apply(x[..., :rotary_dim], sin, cos), x[..., rotary_dim:]],
                         axis=-1)


def project(params, config, x, positions):
  """x [B, T, D] -> query and gate [B, T, N, H], key and value [B, T, K, H], RoPE applied."""
  query = jnp.einsum("BTD,DNH->BTNH", x, params["query_and_gate"][:, :, 0])
  gate = jnp.einsum("BTD,DNH->BTNH", x, params["query_and_gate"][:, :, 1])
  key = jnp.einsum("BTD,DKH->BTKH", x, params["key"])
  value = jnp.einsum("BTD,DKH->BTKH", x, params["value"])
  query = normalization.zero_centered_rms_norm(query, params["query_norm"], config.rms_norm_eps)
  key = normalization.zero_centered_rms_norm(key, params["key_norm"], config.rms_norm_eps)
  sin, cos = rope.sin_cos(config, positions, config.rotary_dim)
  return _partial_rope(query, sin, cos), gate, _partial_rope(key, sin, cos), value


def output(params, encoded, gate):
  """Gated output projection: encoded and gate [B, T, N, H] -> [B, T, D]."""
  return jnp.einsum("BTNH,NHD->BTD", encoded * jax.nn.sigmoid(gate), params["output"])


def apply(params, config, x, positions, mask, kv_writer=None):
  """The whole layer: project, (store key/value), attend, gate, project back.

  mask: attention.CausalMask; kv_writer(key, value) -> (keys, values, state), as in
  decoder._layer.
  Returns:
    (x [B, T, D], state or None)
  """
  query, gate, key, value = project(params, config, x, positions)
  state = None
  if kv_writer is not None:
    key, value, state = kv_writer(key, value)
  encoded = attention.causal_attend(config, query, key, value, mask)
  return output(params, encoded, gate), state
