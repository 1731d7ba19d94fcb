"""Decoding in bfloat16 keeps the logprob contract: the sampler's logprobs stay within a stated
gap of the float32 trainer's on the same tokens, small enough for GRPO's importance weights.

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

from tests.sampling import tiny_model
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.train import logprobs as train_logprobs

CONFIG = tiny_model.CONFIG
# (max |trainer - sampler|, mean |trainer - sampler|) per decode dtype, over the tokens below;
# docs/design.md (sampler section) states the same numbers.
TOLERANCES = {"float32": (1e-5, 1e-6), "bfloat16": (0.1, 0.02)}


def _trainer_logprobs(params, outs):
  sequences = [out.prompt_token_ids + out.token_ids for out in outs]
  length = max(len(s) for s in sequences)
  batch = {name: np.zeros((len(outs), length), np.int32)
           for name in ("tokens", "positions", "segment_ids")}
  for row, sequence in enumerate(sequences):
    batch["tokens"][row, :len(sequence)] = sequence
    batch["positions"][row, :len(sequence)] = np.arange(len(sequence))
    batch["segment_ids"][row, :len(sequence)] = 1
  scores = np.asarray(jax.jit(train_logprobs.token_logprobs, static_argnums=(1, 3))(
      params, CONFIG, {k: jnp.asarray(v) for k, v in batch.items()}, 1.0))
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
  gaps = np.concatenate([np.abs(np.asarray(out.logprobs) - expected)
                         for out, expected in zip(outs, _trainer_logprobs(params, outs))])
  largest, mean = TOLERANCES[dtype]
  assert gaps.size == 16 * 24
  assert gaps.max() <= largest and gaps.mean() <= mean, (gaps.max(), gaps.mean())
  assert np.all(gaps < np.log(2.0))  # no importance weight reaches GRPO's default cap
