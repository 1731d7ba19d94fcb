"""whale_jax logits and greedy tokens equal transformers' on tiny random checkpoints."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.models import hf_fixtures
from whale_jax.models import decoder
from whale_jax.models import hf
from whale_jax.models import kv_cache

NAMES = sorted(hf_fixtures.CONFIGS)


@pytest.fixture(scope="module", params=NAMES)
def checkpoint(request, tmp_path_factory):
  directory = tmp_path_factory.mktemp(request.param)
  model = hf_fixtures.build(request.param, directory)
  config, params = hf.load_hf(str(directory), dtype="float32")
  return request.param, directory, model, config, params


@pytest.mark.parametrize("left", [True, False], ids=["left_pad", "right_pad"])
def test_logits_match_transformers_on_padded_batch(checkpoint, left):
  _, _, model, config, params = checkpoint
  tokens, mask = hf_fixtures.padded_batch(np.random.default_rng(1), [9, 5, 12], 12, left=left)
  expected = hf_fixtures.torch_logits(model, tokens, mask)
  actual = np.asarray(jax.jit(decoder.forward, static_argnums=1)(
      params, config, jnp.asarray(tokens, jnp.int32), attention_mask=jnp.asarray(mask)))
  real = mask.astype(bool)
  assert actual.shape == expected.shape
  np.testing.assert_allclose(actual[real], expected[real], atol=1e-4, rtol=0)


def greedy_with_cache(params, config, prompts, num_new_tokens):
  """Greedy decoding through the KV-cache path: right-padded prefill, then one token a step."""
  lengths = np.array([len(p) for p in prompts], np.int32)
  tokens = np.zeros((len(prompts), lengths.max()), np.int32)
  for row, prompt in enumerate(prompts):
    tokens[row, :len(prompt)] = prompt
  return np.asarray(_greedy(params, config, jnp.asarray(tokens), jnp.asarray(lengths),
                            num_new_tokens))


@functools.partial(jax.jit, static_argnums=(1, 4))
def _greedy(params, config, tokens, lengths, num_new_tokens):
  """The prefill and the decode steps (a scan) as one program: one compilation per model."""
  batch_size = tokens.shape[0]
  cache = kv_cache.init(config, batch_size, tokens.shape[1] + num_new_tokens)
  logits, cache = decoder.forward_with_cache(params, config, tokens, cache,
                                             num_new_tokens=lengths)
  first = jnp.argmax(logits[jnp.arange(batch_size), lengths - 1], axis=-1)

  def step(carry, _):
    last, cache = carry
    logits, cache = decoder.forward_with_cache(params, config, last[:, None].astype(jnp.int32),
                                               cache)
    last = jnp.argmax(logits[:, -1], axis=-1)
    return (last, cache), last

  _, rest = jax.lax.scan(step, (first, cache), length=num_new_tokens - 1)
  return jnp.concatenate([first[:, None], rest.T], axis=1)  # [B, num_new_tokens]


def test_greedy_continuation_matches_transformers(checkpoint):
  _, _, model, config, params = checkpoint
  tokens, mask = hf_fixtures.padded_batch(np.random.default_rng(2), [7, 4, 10], 10, left=True)
  with torch.no_grad():
    expected = model.generate(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                              max_new_tokens=16, do_sample=False, eos_token_id=None,
                              pad_token_id=0)[:, tokens.shape[1]:].numpy()
  prompts = [row[m.astype(bool)] for row, m in zip(tokens, mask)]
  actual = greedy_with_cache(params, config, prompts, 16)
  np.testing.assert_array_equal(actual, expected)


def test_save_hf_round_trips_through_transformers(checkpoint, tmp_path):
  _, _, model, config, params = checkpoint
  hf.save_hf(str(tmp_path), config, params, max_shard_bytes=60_000)  # forces several shards
  assert (tmp_path / "model.safetensors.index.json").exists()
  import transformers  # pylint: disable=g-import-not-at-top
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path),
                                                               dtype=torch.float32).eval()
  tokens, mask = hf_fixtures.padded_batch(np.random.default_rng(3), [6, 11], 11, left=True)
  expected = hf_fixtures.torch_logits(model, tokens, mask)
  actual = hf_fixtures.torch_logits(reloaded, tokens, mask)
  real = mask.astype(bool)
  np.testing.assert_allclose(actual[real], expected[real], atol=1e-5, rtol=0)
