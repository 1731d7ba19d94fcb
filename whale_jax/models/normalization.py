"""RMSNorm, computed in float32 and cast back, as transformers' Qwen and Llama models do."""
import jax
import jax.numpy as jnp


def rms_norm(x, scale, eps):
  """Normalizes the last axis of x by its root mean square, then multiplies by scale."""
  dtype = x.dtype
  x = x.astype(jnp.float32)
  x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps)
  return scale.astype(dtype) * x.astype(dtype)
