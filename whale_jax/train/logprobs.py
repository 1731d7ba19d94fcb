"""Per-token log-probabilities (and entropies) of a batch under the model.

Shape letters: B rows, T row length, V vocabulary.

logprobs[b, t] = log_softmax(logits[b, t - 1] / temperature)[tokens[b, t]], and 0 at t = 0.
The sampler reports its log-probabilities with the same formula, so a sampled token's
logprob and the trainer's agree up to float error at the same weights and temperature.

token_logprobs never holds the [B, T, V] logits: it unembeds the final hidden states
chunk_size positions at a time under a scan, each chunk rematerialized in the backward pass,
so at most [B, chunk_size, V] logits exist (V = 248k for Qwen3.5). A single chunk (T <=
chunk_size) is kept for the backward pass instead: nothing runs between its forward and its
backward, so keeping it costs no memory and spares the unembedding's recomputation (1 of its
4 products; ~100M at 4 x 128 tokens: ~7% of the train step). from_logits is the plain version
over full logits.
"""
import jax
import jax.numpy as jnp

from whale_jax.models import decoder
from whale_jax.train import options


check_temperature = options.check_temperature


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


CHUNK_SIZE = 512  # positions unembedded at once by token_logprobs


def _shift(x):
  return jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], axis=1)


def chunked_from_hidden(params, model_config, hidden, tokens, temperature=1.0,
                        with_entropy=False, chunk_size=None):
  """from_logits(decoder.unembed(params, model_config, hidden), tokens, ...) without the
  full logits: hidden [B, T, D] is unembedded chunk_size (default CHUNK_SIZE) positions at
  a time."""
  check_temperature(temperature)
  chunk_size = chunk_size or CHUNK_SIZE
  batch_size, length, _ = hidden.shape
  chunk_size = min(chunk_size, length)
  num_chunks = -(-length // chunk_size)
  pad = num_chunks * chunk_size - length
  next_tokens = jnp.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)  # [B, T]
  hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
  next_tokens = jnp.pad(next_tokens, ((0, 0), (0, pad)))
  to_chunks = lambda x: jnp.swapaxes(x.reshape(batch_size, num_chunks, chunk_size,
                                               *x.shape[2:]), 0, 1)

  def chunk_terms(hidden, next_tokens):
    logits = decoder.unembed(params, model_config, hidden) / temperature  # [B, C, V]
    log_normalizer = jax.nn.logsumexp(logits, axis=-1)
    vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 2)
    target = jnp.sum(jnp.where(vocab == next_tokens[..., None], logits, 0.0), axis=-1)
    if not with_entropy:
      return target - log_normalizer, None
    probabilities = jnp.exp(logits - log_normalizer[..., None])
    return target - log_normalizer, log_normalizer - jnp.sum(probabilities * logits, axis=-1)

  if num_chunks > 1:  # one chunk's logits live from its forward to its backward: keep them
    chunk_terms = jax.checkpoint(chunk_terms)
  _, (logprobs, entropy) = jax.lax.scan(
      lambda carry, inputs: (carry, chunk_terms(*inputs)), None,
      (to_chunks(hidden), to_chunks(next_tokens)))
  from_chunks = lambda x: jnp.swapaxes(x, 0, 1).reshape(batch_size, -1)[:, :length]
  logprobs = _shift(from_chunks(logprobs))
  if not with_entropy:
    return logprobs
  return logprobs, _shift(from_chunks(entropy))


def token_logprobs(params, model_config, batch, temperature=1.0, with_entropy=False,
                   chunk_size=None):
  """[B, T] log-probabilities of batch["tokens"] (see module docstring); + entropy [B, T]."""
  hidden = decoder.hidden_states(params, model_config, batch["tokens"],
                                 positions=batch["positions"], segment_ids=batch["segment_ids"])
  dtype = model_config.compute_jnp_dtype  # the unembedding's leaves, as decoder.forward casts
  params = {name: value.astype(dtype) for name, value in params.items() if "layers" not in name}
  return chunked_from_hidden(params, model_config, hidden, batch["tokens"], temperature,
                             with_entropy, chunk_size)
