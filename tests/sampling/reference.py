"""Slow and obviously correct generation: the full forward pass at every step, no cache."""
import functools

import jax
import numpy as np

from whale_jax.models import decoder

PADDED_LENGTH = 256


@functools.lru_cache(maxsize=8)
def _forward(config):
  return jax.jit(lambda params, tokens: decoder.forward(params, config, tokens))


def greedy(params, config, prompt, num_tokens):
  """num_tokens greedy tokens after prompt (one padded shape, so one compilation)."""
  forward = _forward(config)
  sequence = list(prompt)
  assert len(sequence) + num_tokens <= PADDED_LENGTH
  for _ in range(num_tokens):
    tokens = np.zeros((1, PADDED_LENGTH), np.int32)  # causal: padding after never matters
    tokens[0, :len(sequence)] = sequence
    sequence.append(int(np.argmax(forward(params, tokens)[0, len(sequence) - 1])))
  return sequence[len(prompt):]
