"""products: the inference weight products against a numpy float64 reference."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from whale_jax.models import products


def _reference(x, w, transposed):
  x = np.asarray(x.astype(jnp.float32), np.float64)
  w = np.asarray(w.astype(jnp.float32), np.float64)
  return x @ (w.T if transposed else w)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("rows,width,out", [(1, 64, 96), (3, 40, 61), (8, 39, 64),
                                            (5, 39, 61), (32, 128, 256)])
def test_matmul_in_both_layouts(dtype, transposed, rows, width, out):
  """Every layout and shape parity (the 16-bit [out, in] form transposes through an even axis
  and falls back to a plain product without one): float32 results to accumulation error, the
  dtype's results to one rounding."""
  keys = jax.random.split(jax.random.key(0), 2)
  x = jax.random.normal(keys[0], (rows, width)).astype(dtype)
  w = jax.random.normal(keys[1], (out, width) if transposed else (width, out)).astype(dtype)
  reference = _reference(x, w, transposed)
  product = jax.jit(products.matmul, static_argnums=(2, 3))
  exact = np.asarray(product(x, w, transposed, jnp.float32))
  assert exact.dtype == np.float32 and exact.shape == (rows, out)
  np.testing.assert_allclose(exact, reference, rtol=0, atol=2e-5 * np.sqrt(width))
  rounded = product(x, w, transposed, None)
  assert rounded.dtype == jnp.dtype(dtype)
  ulp = 2.0**-7 if dtype == "bfloat16" else 2.0**-22
  np.testing.assert_allclose(np.asarray(rounded.astype(jnp.float32)), reference,
                             rtol=ulp, atol=2e-5 * np.sqrt(width))


def test_einsum_accumulates_in_float32():
  """A bfloat16 einsum over 4096 terms: rounded once at the end, not at each partial sum."""
  x = jnp.full((1, 4096), 1.0, jnp.bfloat16)
  w = jnp.full((4096, 2), 2.0**-8, jnp.bfloat16)  # 16.0 exactly in float32 accumulation
  y = products.einsum("BD,DO->BO", x, w)
  assert y.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(y.astype(jnp.float32)), [[16.0, 16.0]])
