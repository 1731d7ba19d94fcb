"""RSFT loss and per-token logprobs against numpy loops and against torch/transformers."""
import jax
import numpy as np
import pytest
import torch

from tests.models import hf_fixtures
from whale_jax.models import hf
from whale_jax.train import logprobs as logprobs_lib
from whale_jax.train import rsft

BATCH, LENGTH, VOCAB = 3, 7, 11


def reference_logprobs_and_entropy(logits, tokens, temperature):
  """One (row, position) at a time, in float64."""
  logprobs, entropy = np.zeros(tokens.shape), np.zeros(tokens.shape)
  for b, t in np.ndindex(*tokens.shape):
    if t == 0:
      continue
    scaled = logits[b, t - 1].astype(np.float64) / temperature
    log_distribution = scaled - np.log(np.sum(np.exp(scaled - scaled.max()))) - scaled.max()
    logprobs[b, t] = log_distribution[tokens[b, t]]
    entropy[b, t] = -np.sum(np.exp(log_distribution) * log_distribution)
  return logprobs, entropy


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_from_logits_matches_numpy_loop(temperature):
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(BATCH, LENGTH, VOCAB)).astype(np.float32) * 3
  tokens = rng.integers(0, VOCAB, size=(BATCH, LENGTH)).astype(np.int32)
  logprobs, entropy = logprobs_lib.from_logits(logits, tokens, temperature, with_entropy=True)
  expected_logprobs, expected_entropy = reference_logprobs_and_entropy(logits, tokens,
                                                                       temperature)
  np.testing.assert_allclose(logprobs, expected_logprobs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(entropy, expected_entropy, rtol=1e-5, atol=1e-5)


def test_nll_is_a_token_mean_over_the_loss_mask():
  rng = np.random.default_rng(1)
  logprobs = -rng.uniform(0.1, 3.0, size=(BATCH, LENGTH)).astype(np.float32)
  loss_mask = np.zeros((BATCH, LENGTH), np.float32)
  loss_mask[0, 2:4] = loss_mask[1, 1:7] = loss_mask[2, 6] = 1  # 2 + 6 + 1 tokens
  loss_sum, normalizer, metrics = rsft.loss_from_logprobs(logprobs, loss_mask)
  expected = -(logprobs[0, 2:4].sum() + logprobs[1, 1:7].sum() + logprobs[2, 6]) / 9
  assert float(normalizer) == 9.0 and float(metrics["num_target_tokens"]) == 9.0
  np.testing.assert_allclose(loss_sum / normalizer, expected, rtol=1e-6)


def test_temperature_must_be_positive():
  with pytest.raises(ValueError, match="temperature=0"):
    logprobs_lib.from_logits(np.zeros((1, 2, 3), np.float32), np.zeros((1, 2), np.int32), 0)


def _torch_masked_nll_grads(model, tokens, attention_mask, loss_mask):
  model.zero_grad()
  positions = np.maximum(np.cumsum(attention_mask, axis=1) - 1, 0)
  logits = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(attention_mask),
                 position_ids=torch.tensor(positions)).logits
  logprobs = torch.log_softmax(logits[:, :-1].double(), dim=-1)
  target = torch.gather(logprobs, 2, torch.tensor(tokens[:, 1:, None])).squeeze(-1)
  mask = torch.tensor(loss_mask[:, 1:], dtype=torch.float64)
  loss = -(target * mask).sum() / mask.sum()
  loss.backward()
  return loss.detach().item(), {name: p.grad.numpy() for name, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["qwen3_tied",
                                  pytest.param("llama3_scaled", marks=pytest.mark.slow)])
def test_nll_gradient_matches_transformers(name, tmp_path):
  model = hf_fixtures.build(name, tmp_path)
  model.train()  # dropout is 0 in these configs; train mode only enables autograd paths
  config, params = hf.load_hf(tmp_path)
  rng = np.random.default_rng(2)
  lengths, total_length = [9, 6, 4], 9
  tokens, attention_mask = hf_fixtures.padded_batch(rng, lengths, total_length, left=False)
  loss_mask = np.zeros_like(attention_mask, dtype=np.float32)
  loss_mask[0, 3:9] = loss_mask[1, 2:6] = loss_mask[2, 1:3] = 1  # prompts of 3, 2, 1 tokens
  torch_loss, torch_grads = _torch_masked_nll_grads(model, tokens, attention_mask, loss_mask)

  batch = {"tokens": tokens.astype(np.int32),
           "positions": np.maximum(np.cumsum(attention_mask, axis=1) - 1, 0).astype(np.int32),
           "segment_ids": attention_mask.astype(np.int32), "loss_mask": loss_mask}

  def mean_loss(params):
    loss_sum, normalizer, _ = rsft.loss(params, config, batch)
    return loss_sum / normalizer

  loss, grads = jax.jit(jax.value_and_grad(mean_loss))(params)
  np.testing.assert_allclose(float(loss), torch_loss, rtol=1e-5)
  checked = 0
  for path, (hf_name, _, to_hf) in hf.hf_layout(config).items():
    grad = grads
    for key in path:
      grad = grad[key]
    grad = np.asarray(grad)
    for layer in range(config.num_layers if path[0] == "layers" else 1):
      ours = to_hf(grad[layer] if path[0] == "layers" else grad)
      theirs = torch_grads[hf_name.format(i=layer)]
      error = np.linalg.norm(ours - theirs) / np.linalg.norm(theirs)
      assert error <= 1e-4, f"{hf_name.format(i=layer)}: relative error {error:.2e}"
      checked += 1
  assert checked == len(torch_grads)
