"""Random decoder parameters drawn with numpy: no compilation, so tests stay fast.

Every leaf is drawn at a scale where it matters: weights ~ N(0, 1 / embed_dim), norms around 1,
biases around 0.
"""
import jax
import numpy as np

from whale_jax.models import hf


def numpy_params(model_config, seed=0):
  rng = np.random.default_rng(seed)

  def draw(path, shape):
    name = path[-1].key
    if name.endswith("norm"):
      value = 1.0 + 0.2 * rng.normal(size=shape.shape)
    elif name.endswith("bias"):
      value = 0.1 * rng.normal(size=shape.shape)
    else:
      value = rng.normal(size=shape.shape) / np.sqrt(model_config.embed_dim)
    return value.astype(shape.dtype)

  return jax.tree_util.tree_map_with_path(draw, hf.decoder_shapes(model_config))
