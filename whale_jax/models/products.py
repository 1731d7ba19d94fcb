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
import jax
import jax.numpy as jnp


def einsum(spec, x, w):
  """jnp.einsum(spec, x, w) accumulated in float32, in x's dtype."""
  return jnp.einsum(spec, x, w.astype(x.dtype),
                    preferred_element_type=jnp.float32).astype(x.dtype)


def matmul(x, w, transposed=False, out_dtype=None):
  """x [B, in] times w, accumulated in float32, in out_dtype (default x's dtype).

  w is [in, out], or [out, in] when transposed. In the transposed layout a 16-bit product is
  written w @ x.T with the weights on the left: XLA's CPU matmul library prepares (packs) its
  right side at every call, which for the weights costs as much as the product itself, while
  it reads a left side as stored; packing x.T (a few rows) is nearly free. ~100M bfloat16
  shapes at batch 32: 12.7-14.3 ms against 23.4-24.1 ms for the same products the other way
  round (docs/benchmarks.md). In float32 that form is 4x slower on an Intel Xeon with AMX, so
  here the [out, in] side is contracted on the right; on an AMD EPYC it is the fastest form,
  and the sampler's layout has such steps keep their activations as columns (left).
  """
  w = w.astype(x.dtype)
  out_dtype = out_dtype or x.dtype
  if not transposed:
    return jnp.dot(x, w, preferred_element_type=jnp.float32).astype(out_dtype)
  if x.dtype.itemsize == 2 and (x.shape[0] % 2 == 0 or (x.shape[1] % 2 == 0
                                                        and w.shape[0] % 2 == 0)):
    return transpose(left(w, transpose(x), out_dtype))
  return jnp.dot(x, w.T, preferred_element_type=jnp.float32).astype(out_dtype)


def left(w, columns, out_dtype=None):
  """w [out, in] @ columns [in, B], accumulated in float32, in out_dtype (default columns').

  The weights-on-the-left form of matmul's 16-bit [out, in] product, for callers that keep
  their activations as columns (decode_step's steps in columns) and so need no transposes.
  """
  return jnp.dot(w.astype(columns.dtype), columns,
                 preferred_element_type=jnp.float32).astype(out_dtype or columns.dtype)


def transpose(x):
  """x.T for a 2-D x, as an array of its own where an axis has even length.

  XLA folds a plain transpose into the dot that reads or makes it (contracting the right
  side's last axis, or swapping the sides), and a 16-bit dot in such a form leaves the matmul
  library: XLA converts both sides, the weights included, to float32, or for a float32 result
  fails to run it; a float32 dot in such a form runs, in another (slower) form. Transposed
  through a split of an even axis, the transpose stays a separate copy (of a few rows here).
  With both axes odd (float32 steps only: 16-bit ones in columns have an even batch), x.T
  behind a barrier, which keeps it out of the dot that makes x.
  """
  rows, width = x.shape
  if width % 2 == 0:
    return x.reshape(rows, 2, width // 2).transpose(1, 2, 0).reshape(width, rows)
  if rows % 2 == 0:
    return x.reshape(2, rows // 2, width).transpose(2, 0, 1).reshape(width, rows)
  return jax.lax.optimization_barrier(x).T
