"""Token sampling against exact distributions computed in numpy."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from whale_jax.sampling import categorical

# Distinct logits (no ties), vocabulary of 7, in no particular order.
LOGITS = np.array([0.3, 2.0, -1.0, 1.2, 0.9, -0.4, 1.6], np.float32)
NUM_DRAWS = 20_000


def exact_distribution(logits, temperature, top_k, top_p):
  """The documented truncated distribution, by brute force over sorted tokens."""
  scaled = logits.astype(np.float64) / temperature
  probabilities = np.exp(scaled - scaled.max())
  probabilities /= probabilities.sum()
  order = np.argsort(-scaled)
  kept = np.zeros(len(logits), bool)
  mass = 0.0
  for rank, token in enumerate(order):
    if (top_k and rank >= top_k) or (top_p < 1.0 and mass >= top_p):
      break
    kept[token] = True
    mass += probabilities[token]
  truncated = np.where(kept, probabilities, 0.0)
  return truncated / truncated.sum()


_sample = jax.jit(categorical.sample)


def draw(logits, temperature, top_k, top_p, seed=0):
  """NUM_DRAWS tokens: one row per draw, each at its own step of one random stream."""
  rows = np.broadcast_to(logits, (NUM_DRAWS, len(logits)))
  rng = categorical.sample_rng(seed, 0, 0)
  tokens, logprobs = _sample(jnp.asarray(rows), jnp.asarray(np.broadcast_to(rng, (NUM_DRAWS, 2))),
                             jnp.arange(NUM_DRAWS, dtype=jnp.int32),
                             jnp.full((NUM_DRAWS,), temperature, jnp.float32),
                             jnp.full((NUM_DRAWS,), top_k, jnp.int32),
                             jnp.full((NUM_DRAWS,), top_p, jnp.float32))
  return np.asarray(tokens), np.asarray(logprobs)


@pytest.mark.parametrize("temperature, top_k, top_p", [
    (1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 3, 1.0), (1.0, 0, 0.6), (0.5, 4, 0.8), (1.3, 1, 1.0),
    (1.0, 0, 0.05)])
def test_frequencies_match_exact_truncated_distribution(temperature, top_k, top_p):
  tokens, _ = draw(LOGITS, temperature, top_k, top_p)
  expected = exact_distribution(LOGITS, temperature, top_k, top_p)
  frequencies = np.bincount(tokens, minlength=len(LOGITS)) / NUM_DRAWS
  # Truncated tokens never appear; the rest are within 5 standard errors (fixed seed, so the
  # check is deterministic; a wrong truncation or temperature moves them by far more).
  np.testing.assert_array_equal(frequencies[expected == 0], 0.0)
  tolerance = 5 * np.sqrt(expected * (1 - expected) / NUM_DRAWS) + 1e-12
  assert np.all(np.abs(frequencies - expected) <= tolerance), (frequencies, expected)


def test_logprobs_are_full_vocabulary_log_softmax_of_scaled_logits():
  temperature = 0.7
  tokens, logprobs = draw(LOGITS, temperature, top_k=2, top_p=1.0)
  scaled = LOGITS.astype(np.float64) / temperature
  log_softmax = scaled - scaled.max() - np.log(np.exp(scaled - scaled.max()).sum())
  np.testing.assert_allclose(logprobs, log_softmax[tokens], atol=1e-6, rtol=0)


def test_greedy_takes_argmax_and_reports_temperature_one_logprob():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(5, 300)).astype(np.float32) * 3
  tokens, logprobs = jax.jit(categorical.sample)(
      jnp.asarray(logits), jnp.zeros((5, 2), jnp.uint32), jnp.zeros((5,), jnp.int32),
      jnp.zeros((5,), jnp.float32), jnp.full((5,), 2, jnp.int32), jnp.ones((5,)))
  np.testing.assert_array_equal(tokens, logits.argmax(-1))
  log_softmax = logits - logits.max(-1, keepdims=True)
  log_softmax -= np.log(np.exp(log_softmax).sum(-1, keepdims=True))
  np.testing.assert_allclose(logprobs, log_softmax[np.arange(5), logits.argmax(-1)], atol=1e-5)


def test_a_row_draws_the_same_token_whatever_the_other_rows():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(6, 1000)).astype(np.float32)
  rngs = np.stack([categorical.sample_rng(7, key, 0) for key in range(6)])
  steps = np.arange(6, dtype=np.int32) * 3
  temperature = np.array([1.0, 0.7, 0.0, 1.0, 1.2, 0.9], np.float32)
  top_k = np.array([0, 5, 0, 0, 50, 0], np.int32)
  top_p = np.array([1.0, 1.0, 1.0, 0.9, 1.0, 0.5], np.float32)
  batched, _ = _sample(logits, rngs, steps, temperature, top_k, top_p)
  for row in range(6):
    alone, _ = _sample(logits[row:row + 1], rngs[row:row + 1], steps[row:row + 1],
                       temperature[row:row + 1], top_k[row:row + 1], top_p[row:row + 1])
    assert int(alone[0]) == int(batched[row])


def test_columns_draw_the_rows_tokens():
  """Logits as columns [V, B] (vocab_axis=0, the 16-bit decode step's layout) give each row
  the token rows [B, V] give, for greedy, plain, top-k and top-p rows alike, and the
  full-vocabulary log-softmax of numpy."""
  rng = np.random.default_rng(2)
  logits = rng.normal(size=(8, 1000)).astype(np.float32) * 2
  rngs = np.stack([categorical.sample_rng(3, key, 1) for key in range(8)])
  steps = np.arange(8, dtype=np.int32) * 5
  temperature = np.array([1.0, 0.7, 0.0, 1.0, 1.2, 0.9, 1.0, 0.5], np.float32)
  top_k = np.array([0, 5, 0, 0, 50, 0, 1, 3], np.int32)
  top_p = np.array([1.0, 1.0, 1.0, 0.9, 1.0, 0.5, 1.0, 0.8], np.float32)
  tokens, logprobs = _sample(logits, rngs, steps, temperature, top_k, top_p)
  columns = jax.jit(categorical.sample, static_argnames="vocab_axis")(
      logits.T, rngs, steps, temperature, top_k, top_p, vocab_axis=0)
  np.testing.assert_array_equal(columns[0], tokens)
  np.testing.assert_array_equal(columns[0][2], logits[2].argmax())
  scaled = logits.astype(np.float64) / np.where(temperature > 0, temperature, 1.0)[:, None]
  log_softmax = scaled - scaled.max(-1, keepdims=True)
  log_softmax -= np.log(np.exp(log_softmax).sum(-1, keepdims=True))
  np.testing.assert_allclose(columns[1], log_softmax[np.arange(8), tokens], atol=1e-5, rtol=0)
  np.testing.assert_allclose(columns[1], logprobs, atol=1e-6, rtol=0)


def test_columns_frequencies_match_exact_truncated_distribution():
  temperature, top_k, top_p = 0.8, 5, 0.9
  rows = np.broadcast_to(LOGITS, (NUM_DRAWS, len(LOGITS)))
  rng = categorical.sample_rng(1, 0, 0)
  tokens, _ = jax.jit(categorical.sample, static_argnames="vocab_axis")(
      jnp.asarray(rows.T), jnp.asarray(np.broadcast_to(rng, (NUM_DRAWS, 2))),
      jnp.arange(NUM_DRAWS, dtype=jnp.int32), jnp.full((NUM_DRAWS,), temperature),
      jnp.full((NUM_DRAWS,), top_k, jnp.int32), jnp.full((NUM_DRAWS,), top_p), vocab_axis=0)
  expected = exact_distribution(LOGITS, temperature, top_k, top_p)
  frequencies = np.bincount(np.asarray(tokens), minlength=len(LOGITS)) / NUM_DRAWS
  np.testing.assert_array_equal(frequencies[expected == 0], 0.0)
  tolerance = 5 * np.sqrt(expected * (1 - expected) / NUM_DRAWS) + 1e-12
  assert np.all(np.abs(frequencies - expected) <= tolerance), (frequencies, expected)


@pytest.mark.parametrize("vocab_axis", [-1, 0])
def test_inverse_cdf_never_returns_a_zero_weight_token(vocab_axis):
  weights = np.zeros((4, 1000), np.float32)
  weights[:, 997] = 1.0  # the only token: in the last, partly padded block
  weights[1, 3] = 1e-30
  uniform = np.array([0.0, 0.999999, 0.5, 1 - 2**-24], np.float32)
  if vocab_axis == 0:
    weights = weights.T
  tokens = np.asarray(jax.jit(categorical.inverse_cdf, static_argnames="vocab_axis")(
      weights, uniform, vocab_axis=vocab_axis))
  assert tokens[0] == 997 and tokens[2] == 997 and tokens[3] == 997
  assert tokens[1] in (3, 997)


def test_streams_differ_by_seed_key_and_index_and_are_reproducible():
  base = categorical.sample_rng(5, 2, 1)
  np.testing.assert_array_equal(base, categorical.sample_rng(5, 2, 1))
  others = [categorical.sample_rng(6, 2, 1), categorical.sample_rng(5, 3, 1),
            categorical.sample_rng(5, 2, 0), categorical.sample_rng(5 + 2**32, 2, 1),
            categorical.sample_rng(5, 2 + 2**32, 1)]
  assert all(not np.array_equal(base, other) for other in others)


@pytest.mark.parametrize("triple, message", [((-1, 0, 0), "seed=-1"),
                                             ((0, 2**64, 0), "request_key=18446744073709551616"),
                                             ((0, 0, 1.5), "sample_index=1.5")])
def test_bad_stream_numbers_are_named(triple, message):
  with pytest.raises(ValueError, match=message):
    categorical.sample_rngs([triple])
