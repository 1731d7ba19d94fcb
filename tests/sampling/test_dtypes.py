"""Decoding in bfloat16 keeps the logprob contract: the sampler's logprobs stay within a stated
gap of the float32 trainer's on the same tokens, small enough for GRPO's importance weights.

The gap is bounded by what each dtype's rounding allows, not by one measured number: in
float32, the rounding bound of two reduction orders (tests/float_bounds.py); in bfloat16, the
gap that bfloat16 itself opens, observed independently by the trainer's forward pass run in
bfloat16 on the same tokens (a sampler that added error of its own, e.g. a KV cache or an
attention product kept at lower precision, would exceed it). Over params/prompt seeds 0-7 the
sampler's mean gap was 0.93-1.07x and its largest 0.74-1.21x the bfloat16 trainer's (while the
largest gap itself ranged 0.051-0.130), hence the factors below.

The trainer (train/logprobs.token_logprobs) scores the sampled sequences with the float32
weights; the sampler decoded them from the same weights cast to bfloat16 with bfloat16
activations and KV cache. The gap per token, rho = exp(trainer - sampler), is what GRPO's
importance-sampling correction (train/grpo.py) divides out; with its default cap of 2 a token
is truncated only when |trainer - sampler| > log 2.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import float_bounds
from tests.sampling import tiny_model
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.train import logprobs as train_logprobs

CONFIG = tiny_model.CONFIG
# The sampler's bfloat16 gap to the float32 trainer, as a multiple of the bfloat16 trainer's
# (largest, mean) over the same tokens; docs/design.md (sampler section) states the same.
BFLOAT16_FACTORS = (2.0, 1.25)


def _trainer_logprobs(config, params, outs):
  sequences = [out.prompt_token_ids + out.token_ids for out in outs]
  length = max(len(s) for s in sequences)
  batch = {name: np.zeros((len(outs), length), np.int32)
           for name in ("tokens", "positions", "segment_ids")}
  for row, sequence in enumerate(sequences):
    batch["tokens"][row, :len(sequence)] = sequence
    batch["positions"][row, :len(sequence)] = np.arange(len(sequence))
    batch["segment_ids"][row, :len(sequence)] = 1
  scores = np.asarray(jax.jit(train_logprobs.token_logprobs, static_argnums=(1, 3))(
      params, config, {k: jnp.asarray(v) for k, v in batch.items()}, 1.0))
  return [scores[row, len(out.prompt_token_ids):len(out.prompt_token_ids) + len(out.token_ids)]
          for row, out in enumerate(outs)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sampler_logprobs_match_float32_trainer_within_dtype_tolerance(dtype):
  params = tiny_model.params(seed=7)
  config = CONFIG.replace(param_dtype=dtype, compute_dtype=dtype)
  decode_params = jax.tree.map(lambda x: x.astype(dtype), params)
  rng = np.random.default_rng(2)
  prompts = [rng.integers(3, CONFIG.vocab_size, n).tolist() for n in (5, 23, 40, 61)]
  with Sampler(config, decode_params, max_slots=16, steps_per_call=8) as sampler:
    outs = sampler.generate(prompts, SamplingParams(max_tokens=24, n=4, seed=1,
                                                    ignore_eos=True))
  trainer = _trainer_logprobs(CONFIG, params, outs)
  gaps = np.concatenate([np.abs(np.asarray(out.logprobs) - expected)
                         for out, expected in zip(outs, trainer)])
  assert gaps.size == 16 * 24
  if dtype == "float32":
    longest = max(len(out.prompt_token_ids) + len(out.token_ids) for out in outs)
    bound = float_bounds.float32_logprob_bound(CONFIG, params, max_length=longest)
    assert gaps.max() <= bound, (gaps.max(), bound)
  else:
    rounded = _trainer_logprobs(config, decode_params, outs)
    dtype_gaps = np.concatenate([np.abs(got - expected)
                                 for got, expected in zip(rounded, trainer)])
    largest, mean = BFLOAT16_FACTORS
    assert gaps.max() <= largest * dtype_gaps.max(), (gaps.max(), dtype_gaps.max())
    assert gaps.mean() <= mean * dtype_gaps.mean(), (gaps.mean(), dtype_gaps.mean())
  assert np.all(gaps < np.log(2.0))  # no importance weight reaches GRPO's default cap
