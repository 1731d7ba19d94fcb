"""Weight products of the inference paths, in the compute dtype, accumulated in float32.

  y = products.einsum("BTD,DNH->BTNH", x, w)   # x's dtype out

The same arithmetic as jnp.einsum(spec, x, w) with 16-bit inputs (float32 accumulation,
rounded to x's dtype), written so that XLA's CPU compiler hands the product to its matmul
library: it does so for bfloat16 only when the dot itself returns float32
(preferred_element_type), and that library product is 4-8x faster than float32 on a CPU with
AMX and ~5x faster than the bfloat16 dot without it (docs/benchmarks.md). On TPU the MXU
accumulates in float32 either way.

Only the non-differentiated paths use it (prefill, decoding): the transpose of a dot that
returns float32 takes a float32 cotangent, which would change the training step's backward.
"""
import jax.numpy as jnp


def einsum(spec, x, w):
  """jnp.einsum(spec, x, w) accumulated in float32, in x's dtype."""
  return jnp.einsum(spec, x, w.astype(x.dtype),
                    preferred_element_type=jnp.float32).astype(x.dtype)


def matmul(x, w):
  """x @ w accumulated in float32, in x's dtype (2-D w)."""
  return jnp.dot(x, w.astype(x.dtype), preferred_element_type=jnp.float32).astype(x.dtype)
