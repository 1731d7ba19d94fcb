"""Sampler against transformers (greedy tokens) and the trainer (per-token logprobs)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.models import hf_fixtures
from whale_jax.models import hf
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.sampling import layout as layout_lib
from whale_jax.train import logprobs as train_logprobs

NAMES = ["qwen3_tied", "qwen2_bias", "llama3_scaled", "qwen3_5_untied"]
PROMPT_LENGTHS = [7, 1, 12, 4]
NEW_TOKENS = 12
# Sampler logprobs against the trainer's, float32. The Qwen3.5 hybrid's sampler steps its
# gated delta layers one token at a time while the trainer runs the chunked form over the
# whole sequence: the same recurrence summed in another order, whose float32 rounding
# (seen up to 1.4e-5 on an AVX-512 host) is allowed a wider bound than attention's.
LOGPROB_ATOL = {"qwen3_5": 5e-5}


@pytest.fixture(scope="module", params=NAMES)
def checkpoint(request, tmp_path_factory):
  directory = tmp_path_factory.mktemp(request.param)
  model = hf_fixtures.build(request.param, directory)
  config, params = hf.load_hf(str(directory), dtype="float32")
  sampler = Sampler(config, params, max_slots=8, steps_per_call=8)
  yield model, config, params, sampler
  sampler.close()


def _prompts(seed):
  tokens, mask = hf_fixtures.padded_batch(np.random.default_rng(seed), PROMPT_LENGTHS,
                                          max(PROMPT_LENGTHS), left=True)
  return tokens, mask, [row[m.astype(bool)].tolist() for row, m in zip(tokens, mask)]


def _transformers_greedy(model, tokens, mask):
  with torch.no_grad():
    return model.generate(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                          max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                          pad_token_id=0)[:, tokens.shape[1]:].numpy()


def test_greedy_matches_transformers_on_ragged_batch(checkpoint):
  model, _, _, sampler = checkpoint
  _check_greedy(model, sampler)


def _check_greedy(model, sampler):
  tokens, mask, prompts = _prompts(seed=4)
  expected = _transformers_greedy(model, tokens, mask)
  outs = sampler.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0,
                                                  ignore_eos=True))
  np.testing.assert_array_equal([out.token_ids for out in outs], expected)
  assert all(out.finish_reason == "length" for out in outs)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_trainer_logprobs(checkpoint, temperature):
  _, config, params, sampler = checkpoint
  _check_logprobs(config, params, sampler, temperature)


def _check_logprobs(config, params, sampler, temperature):
  atol = LOGPROB_ATOL.get(config.model_type, 1e-5)
  _, _, prompts = _prompts(seed=5)
  outs = sampler.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=temperature,
                                                  seed=11, ignore_eos=True, n=2))
  sequences = [out.prompt_token_ids + out.token_ids for out in outs]
  length = max(len(s) for s in sequences)
  batch = {"tokens": np.zeros((len(outs), length), np.int32),
           "positions": np.zeros((len(outs), length), np.int32),
           "segment_ids": np.zeros((len(outs), length), np.int32)}
  for row, sequence in enumerate(sequences):
    batch["tokens"][row, :len(sequence)] = sequence
    batch["positions"][row, :len(sequence)] = np.arange(len(sequence))
    batch["segment_ids"][row, :len(sequence)] = 1
  expected = np.asarray(jax.jit(train_logprobs.token_logprobs, static_argnums=(1, 3))(
      params, config, {k: jnp.asarray(v) for k, v in batch.items()}, temperature))
  for row, out in enumerate(outs):
    start = len(out.prompt_token_ids)
    np.testing.assert_allclose(out.logprobs, expected[row, start:start + NEW_TOKENS],
                               atol=atol, rtol=0)
  # The two samples of each prompt draw from different streams.
  assert any(outs[2 * r].token_ids != outs[2 * r + 1].token_ids for r in range(len(prompts)))


def test_reused_slots_start_clean(checkpoint):
  """Two slots serve four prompts one after another: a slot's next sample must not see its
  previous sample's KV entries or (Qwen3.5) recurrent state and convolution window."""
  model, config, params, _ = checkpoint
  tokens, mask, prompts = _prompts(seed=6)
  expected = _transformers_greedy(model, tokens, mask)
  with Sampler(config, params, max_slots=1, steps_per_call=8) as sampler:
    outs = [sampler.generate([prompt], SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0,
                                                      ignore_eos=True))[0]
            for prompt in reversed(prompts)]
  np.testing.assert_array_equal([out.token_ids for out in reversed(outs)], expected)


# The float32 decode forms Layout.for_batch picks on CPU, as (transposed, columns), with the
# CPU vendor and columns threshold that pick each (set here, whatever this machine is).
FLOAT32_FORMS = {"[in, out] rows": ("AuthenticAMD", 2**62, (False, False)),
                 "[out, in] on the right": ("GenuineIntel", 0, (True, False)),
                 "[out, in] on the left, in columns": ("AuthenticAMD", 0, (True, True))}


@pytest.mark.parametrize("form", FLOAT32_FORMS)
def test_every_float32_decode_form_matches_transformers_and_the_trainer(form, monkeypatch,
                                                                        tmp_path):
  """The engine's decode in each weight form a CPU may get (this machine runs one of them by
  default): greedy tokens equal transformers', logprobs the trainer's."""
  vendor, min_bytes, expected = FLOAT32_FORMS[form]
  monkeypatch.setattr(layout_lib, "cpu_vendor", lambda: vendor)
  monkeypatch.setattr(layout_lib, "COLUMNS_MIN_BYTES", min_bytes)
  model = hf_fixtures.build("qwen3_tied", tmp_path)
  config, params = hf.load_hf(str(tmp_path), dtype="float32")
  with Sampler(config, params, max_slots=8, steps_per_call=8) as sampler:
    for batch_size in (4, 8):  # the greedy and the logprob calls' slot batches
      batch_layout = sampler.layout.for_batch(config, batch_size)
      assert (batch_layout.transposed, batch_layout.columns) == expected
    _check_greedy(model, sampler)
    _check_logprobs(config, params, sampler, temperature=1.0)
