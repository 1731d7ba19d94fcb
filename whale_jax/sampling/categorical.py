"""Per-row token sampling: greedy, temperature, top-k and top-p, with each token's logprob.

Shape letters: B rows, V vocabulary, A blocks of the vocabulary, W tokens per block.

Logits come as rows [B, V] (vocab_axis=-1) or as columns [V, B] (vocab_axis=0): the 16-bit
decode step computes them as columns (models/decode_step.py), and sampling there reads them as
they are, instead of through a transpose of [B, V] floats that XLA's CPU compiler fuses into
each reader as a strided read (~100M at batch 32: a step 44.4 ms before, 42.2 after). Both
layouts draw the same tokens from the same streams; their sums run in another order, so a
logprob may differ between them in its last bits (about 1e-6).

Each row samples on its own: its token depends only on its logits, its parameters and its own
random stream, never on the other rows of the batch. A row's stream is fixed by three
integers, (seed, request_key, sample_index), folded into a base key by `sample_rng`; step j of
the row draws one uniform number u = uniform(fold_in(base key, j)) and takes the first token
(in vocabulary order) where the cumulative distribution exceeds u times the total mass.

Distribution sampled from, per row (temperature 0 = greedy = argmax of the raw logits):
  scaled = logits / temperature
  top-k keeps the top_k largest scaled logits (0 = off); top-p keeps the smallest set of most
  likely tokens whose probability reaches top_p (1.0 = off). Both on: a token must pass both.
  Tokens tied with the last kept one are kept too.
The returned logprob is log_softmax(scaled)[token] over the whole vocabulary (top-k/top-p do
not renormalize it), with temperature 1 for greedy rows: the number the trainer's forward pass
computes for the same token at the same temperature.

No sort: a sort of [B, V] is slow on CPU. The top-k/top-p cutoff is found by bisection over
the float ordering of the logits (32 passes over V, only when a row asks for truncation), and
the inverse CDF is taken in two levels (blocks of W tokens, then one block).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np

_UINT32 = 2**32


def sample_rng(seed, request_key, sample_index):
  """[2] uint32 base key of one sample's random stream (see sample_rngs)."""
  return sample_rngs([(seed, request_key, sample_index)])[0]


def sample_rngs(triples):
  """[M, 2] uint32 base keys for M (seed, request_key, sample_index) triples.

  Each is PRNGKey(0) folded with seed's low and high 32 bits, request_key's low and high 32
  bits, then sample_index. seed and request_key may be up to 2**64 - 1, sample_index 2**32 - 1.
  """
  words = []
  for seed, request_key, sample_index in triples:
    for name, value, limit in (("seed", seed, 2**64), ("request_key", request_key, 2**64),
                               ("sample_index", sample_index, _UINT32)):
      if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not (
          0 <= value < limit):
        raise ValueError(f"{name}={value!r} must be an integer in [0, {limit}).")
    words.append((seed % _UINT32, seed // _UINT32, request_key % _UINT32,
                   request_key // _UINT32, sample_index))
  count = len(words)
  padded = np.zeros((max(1, 1 << (count - 1).bit_length()), 5), np.uint32)  # few shapes
  padded[:count] = np.asarray(words, np.uint64).astype(np.uint32)
  return np.asarray(_fold_words(padded))[:count]


@jax.jit
@jax.vmap
def _fold_words(words):
  rng = jax.random.PRNGKey(0)
  for i in range(words.shape[0]):
    rng = jax.random.fold_in(rng, words[i])
  return rng


def step_uniform(rngs, steps):
  """[B] float32 in [0, 1): the draw of step steps[b] from base key rngs[b] ([B, 2] uint32)."""
  return jax.vmap(lambda rng, step: jax.random.uniform(jax.random.fold_in(rng, step)))(
      rngs, steps)


def _ordered(x):
  """float32 -> int32 with the same order (and its own inverse, through bitcasts)."""
  bits = jax.lax.bitcast_convert_type(x, jnp.int32)
  return jnp.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


def _from_ordered(i):
  return jax.lax.bitcast_convert_type(jnp.where(i >= 0, i, i ^ 0x7FFFFFFF), jnp.float32)


def _layout(vocab_axis):
  """(the vocabulary's axis, a function giving a [B] array that axis) for rows or columns."""
  if vocab_axis in (-1, 1):
    return 1, lambda x: x[:, None]
  if vocab_axis in (0, -2):
    return 0, lambda x: x[None, :]
  raise ValueError(f"vocab_axis={vocab_axis!r}: logits are [B, V] (-1) or [V, B] (0).")


def truncation_threshold(scaled, weights, top_k, top_p, vocab_axis=-1):
  """[B] smallest scaled logit that both top-k and top-p keep; tokens >= it survive.

  Args:
    scaled: [B, V] logits / temperature ([V, B] with vocab_axis=0).
    weights: exp(scaled - max), unnormalized probabilities, laid out as scaled.
    top_k: [B] int (0 = off); top_p: [B] float (1.0 = off).
  Top-k alone cuts at the largest t with count(scaled >= t) >= top_k, top-p alone at the
  largest t with mass(scaled >= t) >= top_p * total; both on, the larger of the two cuts wins,
  i.e. the largest t meeting either condition. A bisection over the int32 ordering of floats
  finds it exactly (it is one of the logits) in 32 halvings.
  """
  axis, per_row = _layout(vocab_axis)
  needed_mass = top_p * jnp.sum(weights, axis=axis)

  def enough(threshold):  # [B] bool: is cutting at threshold still within both filters?
    above = scaled >= per_row(_from_ordered(threshold))
    count = jnp.sum(above, axis=axis)
    mass = jnp.sum(jnp.where(above, weights, 0.0), axis=axis)
    return (((top_k > 0) & (count >= top_k)) |
            ((top_p < 1.0) & (mass >= needed_mass)))

  low = _ordered(jnp.min(scaled, axis=axis))       # keeps everything
  high = _ordered(jnp.max(scaled, axis=axis)) + 1  # keeps nothing: never enough

  def halve(_, bounds):
    low, high = bounds
    middle = (low >> 1) + (high >> 1) + (low & high & 1)  # floor((low + high) / 2), no overflow
    ok = enough(middle)
    return jnp.where(ok, middle, low), jnp.where(ok, high, middle)

  low, _ = jax.lax.fori_loop(0, 32, halve, (low, high))
  return _from_ordered(low)


def _block_width(vocab_size):
  return max(16, 2 ** round(math.log2(math.sqrt(vocab_size))))


def _first_and_last_positive(weights):
  """Indices of the first and last positive entry along the last axis."""
  positive = weights > 0
  size = weights.shape[-1]
  first = jnp.argmax(positive, axis=-1)
  last = size - 1 - jnp.argmax(positive[..., ::-1], axis=-1)
  return first, last


def inverse_cdf(weights, uniform, vocab_axis=-1):
  """[B] first index where cumsum(weights) > uniform * sum(weights); weights [B, V] >= 0
  ([V, B] with vocab_axis=0).

  Never returns a zero-weight index, whatever the rounding.
  """
  axis, _ = _layout(vocab_axis)
  vocab_size, batch_size = weights.shape[axis], weights.shape[1 - axis]
  width = _block_width(vocab_size)
  num_blocks = -(-vocab_size // width)
  padding = [(0, 0), (0, 0)]
  padding[axis] = (0, num_blocks * width - vocab_size)
  padded = jnp.pad(weights, padding)
  rows = jnp.arange(batch_size)
  if axis == 1:
    blocks = padded.reshape(batch_size, num_blocks, width)  # [B, A, W]
    block_mass = jnp.sum(blocks, axis=-1)  # [B, A]
  else:
    blocks = padded.reshape(num_blocks, width, batch_size)  # [A, W, B]
    block_mass = jnp.sum(blocks, axis=1).T  # [B, A]
  block_cdf = jnp.cumsum(block_mass, axis=-1)
  target = uniform * block_cdf[:, -1]
  first, last = _first_and_last_positive(block_mass)
  block = jnp.clip(jnp.sum(block_cdf <= target[:, None], axis=-1), first, last)
  within = blocks[rows, block] if axis == 1 else blocks[block, :, rows]  # [B, W]
  left = target - (block_cdf[rows, block] - block_mass[rows, block])
  first, last = _first_and_last_positive(within)
  index = jnp.clip(jnp.sum(jnp.cumsum(within, axis=-1) <= left[:, None], axis=-1), first, last)
  return (block * width + index).astype(jnp.int32)


def sample(logits, rngs, steps, temperature, top_k, top_p, vocab_axis=-1):
  """Samples one token per row.

  Args:
    logits: [B, V] float32, or [V, B] with vocab_axis=0 (static).
    rngs: [B, 2] uint32 base keys (sample_rng); steps: [B] int32 step index of each row.
    temperature: [B] float32 (0 = greedy); top_k: [B] int32; top_p: [B] float32.
  Returns:
    (tokens [B] int32, logprobs [B] float32)
  """
  axis, per_row = _layout(vocab_axis)
  greedy = temperature <= 0
  scaled = logits / per_row(jnp.where(greedy, 1.0, temperature))
  maximum = jnp.max(scaled, axis=axis, keepdims=True)
  weights = jnp.exp(scaled - maximum)
  log_total = jnp.log(jnp.sum(weights, axis=axis))
  truncates = ~greedy & ((top_k > 0) | (top_p < 1.0))
  threshold = jax.lax.cond(
      jnp.any(truncates),
      lambda: jnp.where(truncates,
                        truncation_threshold(scaled, weights, top_k, top_p, vocab_axis),
                        -jnp.inf),
      lambda: jnp.full(truncates.shape, -jnp.inf, scaled.dtype))
  kept = jnp.where(scaled >= per_row(threshold), weights, 0.0)
  drawn = inverse_cdf(kept, step_uniform(rngs, steps), vocab_axis)
  tokens = jax.lax.cond(
      jnp.any(greedy),
      lambda: jnp.where(greedy, jnp.argmax(logits, axis=axis).astype(jnp.int32), drawn),
      lambda: drawn)
  shifted = jnp.take_along_axis(scaled - maximum, per_row(tokens), axis=axis).reshape(-1)
  logprobs = shifted - log_total  # = log_softmax(scaled)[token], same operation order
  return tokens, logprobs
