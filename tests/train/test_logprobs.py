"""Chunked log-probabilities (no [B, T, V] logits) against the full-logits version.

The two run the same model as different programs, so their reductions may round in other
orders: logprobs may differ by tests/float_bounds.py's float32 bound (over the logits divided
by the temperature), and entropies by what that moves them: when every log p_v moves by at
most e, each p_v moves by at most p_v (exp(e) - 1), so H = -sum p log p moves by at most
(exp(e) - 1)(H + e + 1) + e, plus the float32 rounding of the two V-term sums (V u H each).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import float_bounds
from tests.train import random_params
from whale_jax.models import config as config_lib
from whale_jax.models import decoder
from whale_jax.train import logprobs as logprobs_lib

MODEL = config_lib.ModelConfig(vocab_size=53, num_layers=2, embed_dim=16, mlp_dim=24,
                               num_heads=4, num_kv_heads=2, head_dim=8, tie_embeddings=False)
BATCH, LENGTH = 2, 21


def _batch():
  rng = np.random.default_rng(0)
  segments = np.ones((BATCH, LENGTH), np.int32)
  segments[0, 12:] = 2
  segments[1, 17:] = 0  # padding
  positions = np.zeros((BATCH, LENGTH), np.int32)
  for b in range(BATCH):
    for s in np.unique(segments[b]):
      where = np.flatnonzero(segments[b] == s)
      positions[b, where] = np.arange(len(where))
  return {"tokens": jnp.asarray(rng.integers(0, MODEL.vocab_size, (BATCH, LENGTH)), jnp.int32),
          "positions": jnp.asarray(positions), "segment_ids": jnp.asarray(segments)}


def _full(params, batch, temperature, with_entropy):
  logits = decoder.forward(params, MODEL, batch["tokens"], positions=batch["positions"],
                           segment_ids=batch["segment_ids"])
  return logprobs_lib.from_logits(logits, batch["tokens"], temperature, with_entropy)


# Jitted once here: eager calls dispatch (and compile) the model op by op.
_token_logprobs = jax.jit(logprobs_lib.token_logprobs, static_argnums=(1, 3, 4),
                          static_argnames="chunk_size")


@functools.cache
def _expected_at_temperature_0_7():
  """The full-logits logprobs and entropies, computed once for every chunk size."""
  return jax.jit(_full, static_argnums=(2, 3))(random_params.numpy_params(MODEL), _batch(),
                                                0.7, True)


@pytest.mark.parametrize("chunk_size", [4, 7, 64])  # 21 = 5 chunks of 4 + padding, 3 of 7, 1
def test_chunked_logprobs_and_entropy_equal_full_logits(chunk_size):
  params = random_params.numpy_params(MODEL)
  batch = _batch()
  expected = _expected_at_temperature_0_7()
  actual = _token_logprobs(params, MODEL, batch, 0.7, True, chunk_size=chunk_size)
  bound = float_bounds.float32_logprob_bound(MODEL, params, max_length=LENGTH) / 0.7
  np.testing.assert_allclose(actual[0], expected[0], atol=bound, rtol=0)
  entropy = np.asarray(expected[1], np.float64)
  entropy_bound = (np.expm1(bound) * (entropy + bound + 1) + bound +
                   2 * MODEL.vocab_size * float_bounds.UNIT_ROUNDOFF * entropy)
  assert np.all(np.abs(np.asarray(actual[1], np.float64) - entropy) <= entropy_bound)


def test_chunked_logprobs_gradient_equals_full_logits():
  params = random_params.numpy_params(MODEL)
  batch = _batch()
  weights = jnp.asarray(np.random.default_rng(1).normal(size=(BATCH, LENGTH)), jnp.float32)
  full_grad = jax.grad(lambda p: jnp.sum(_full(p, batch, 1.0, False) * weights))
  chunked_grad = jax.grad(lambda p: jnp.sum(logprobs_lib.token_logprobs(
      p, MODEL, batch, chunk_size=5) * weights))
  # Both in one program: one compilation, still two separate backward passes.
  full, chunked = jax.jit(lambda p: (full_grad(p), chunked_grad(p)))(params)
  for path_and_want, got in zip(jax.tree_util.tree_flatten_with_path(full)[0],
                                jax.tree.leaves(chunked)):
    path, want = path_and_want
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=str(path))
