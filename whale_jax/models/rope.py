"""Rotary position embeddings (RoPE), "rotate half" layout as in transformers.

Shape letters: B batch, T length, N heads, H head dim.
Supported scalings: none ("default") and Llama 3's frequency-dependent scaling ("llama3").
"""
import math

import jax.numpy as jnp
import numpy as np


def inverse_frequencies(config, rotary_dim=None) -> np.ndarray:
  """[R // 2] float32 inverse frequencies, scaled per config.rope_type.

  R = rotary_dim, the number of rotated dims (default config.head_dim, the whole head).
  """
  head_dim = rotary_dim or config.head_dim
  exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim
  inverse = (1.0 / (np.float32(config.rope_theta) ** exponents)).astype(np.float32)
  if config.rope_type == "default":
    return inverse
  # Llama 3: keep high frequencies, divide low ones by `factor`, blend in between.
  factor = config.rope_factor
  low, high = config.rope_low_frequency_factor, config.rope_high_frequency_factor
  original = config.rope_original_max_positions
  wavelength = 2 * math.pi / inverse
  scaled = np.where(wavelength > original / low, inverse / factor, inverse)
  smooth = (original / wavelength - low) / (high - low)
  blended = (1 - smooth) * scaled / factor + smooth * scaled
  is_medium = (wavelength >= original / high) & (wavelength <= original / low)
  return np.where(is_medium, blended, scaled).astype(np.float32)


def sin_cos(config, positions, rotary_dim=None):
  """positions [B, T] int -> (sin, cos), each [B, T, R] float32 (R = rotary_dim or H)."""
  inverse = jnp.asarray(inverse_frequencies(config, rotary_dim))
  angles = positions.astype(jnp.float32)[..., None] * inverse  # [B, T, H/2]
  angles = jnp.concatenate([angles, angles], axis=-1)
  return jnp.sin(angles), jnp.cos(angles)


def apply(x, sin, cos):
  """Rotates x [B, T, N, H] by the angles in sin/cos [B, T, H]; keeps x's dtype."""
  first, second = jnp.split(x, 2, axis=-1)
  rotated = jnp.concatenate([-second, first], axis=-1)
  sin = sin[:, :, None, :].astype(x.dtype)
  cos = cos[:, :, None, :].astype(x.dtype)
  return x * cos + rotated * sin
