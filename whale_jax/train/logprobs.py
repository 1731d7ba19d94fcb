"""Per-token log-probabilities (and entropies) of a batch under the model.

Shape letters: B rows, T row length, V vocabulary.

logprobs[b, t] = log_softmax(logits[b, t - 1] / temperature)[tokens[b, t]], and 0 at t = 0.
The sampler reports its log-probabilities with the same formula, so a sampled token's
logprob and the trainer's agree up to float error at the same weights and temperature.
"""
import jax
import jax.numpy as jnp

from whale_jax.models import decoder


def check_temperature(temperature):
  if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or (
      temperature <= 0):
    raise ValueError(f"temperature={temperature!r} must be a positive number (1.0 = the "
                     "model's own distribution).")


def from_logits(logits, tokens, temperature=1.0, with_entropy=False):
  """Log-probabilities of tokens from the logits that precede them.

  Args:
    logits: [B, T, V] float32; logits[:, t] predict tokens[:, t + 1].
    tokens: [B, T] int.
  Returns:
    logprobs [B, T] (0 at t = 0), and entropy [B, T] of the distribution predicting token t
    (0 at t = 0) when with_entropy.
  """
  check_temperature(temperature)
  logits = logits.astype(jnp.float32) / temperature
  next_tokens = jnp.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)  # [B, T]
  log_normalizer = jax.nn.logsumexp(logits, axis=-1)  # [B, T]
  vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 2)
  target_logits = jnp.sum(jnp.where(vocab == next_tokens[..., None], logits, 0.0), axis=-1)
  shift = lambda x: jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], axis=1)
  logprobs = shift(target_logits - log_normalizer)
  if not with_entropy:
    return logprobs
  probabilities = jnp.exp(logits - log_normalizer[..., None])
  entropy = log_normalizer - jnp.sum(probabilities * logits, axis=-1)
  return logprobs, shift(entropy)


def token_logprobs(params, model_config, batch, temperature=1.0, with_entropy=False):
  """[B, T] log-probabilities of batch["tokens"] (see module docstring); + entropy [B, T]."""
  logits = decoder.forward(params, model_config, batch["tokens"], positions=batch["positions"],
                           segment_ids=batch["segment_ids"])
  return from_logits(logits, batch["tokens"], temperature, with_entropy)
