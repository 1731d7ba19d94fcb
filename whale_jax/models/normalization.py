"""RMSNorm, computed in float32 and cast back, as transformers' Qwen and Llama models do.

rms_norm multiplies by the stored scale; zero_centered_rms_norm (Qwen3.5) stores the scale's
offset from 1 and multiplies by 1 + weight in float32 before casting back.
"""
import jax
import jax.numpy as jnp


def rms_norm(x, scale, eps, axis=-1):
  """Normalizes x's axis by its root mean square, then multiplies by scale (that axis' size)."""
  dtype = x.dtype
  axis %= x.ndim
  x = x.astype(jnp.float32)
  x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=axis, keepdims=True) + eps)
  scale = scale.reshape(scale.shape + (1,) * (x.ndim - 1 - axis))
  return scale.astype(dtype) * x.astype(dtype)


def zero_centered_rms_norm(x, weight, eps):
  """RMSNorm over the last axis with scale 1 + weight, multiplied in float32, cast back."""
  dtype = x.dtype
  x = x.astype(jnp.float32)
  x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps)
  return (x * (1.0 + weight.astype(jnp.float32))).astype(dtype)
