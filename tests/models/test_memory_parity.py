"""Parity with transformers holds with the memory features on: blockwise attention over
several blocks, chunked log-probabilities over several chunks, full rematerialization."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.models import hf_fixtures
from whale_jax.models import decoder
from whale_jax.models import hf
from whale_jax.train import logprobs as logprobs_lib
from whale_jax.train import rsft

MEMORY_FEATURES = dict(attention="blockwise", attention_block_size=8, remat="full")


def test_qwen3_nll_and_gradient_match_transformers(tmp_path, monkeypatch):
  """test_rsft's gradient check with 12-token rows: 2 attention blocks, 3 log-prob chunks."""
  monkeypatch.setattr(logprobs_lib, "CHUNK_SIZE", 5)
  model = hf_fixtures.build("qwen3_tied", tmp_path)
  model.train()
  config, params = hf.load_hf(tmp_path, **MEMORY_FEATURES)
  tokens, attention_mask = hf_fixtures.padded_batch(np.random.default_rng(2), [12, 9, 4], 12,
                                                    left=False)
  loss_mask = np.zeros_like(attention_mask, dtype=np.float32)
  loss_mask[0, 3:12] = loss_mask[1, 2:9] = loss_mask[2, 1:4] = 1
  positions = np.maximum(np.cumsum(attention_mask, axis=1) - 1, 0)
  model.zero_grad()
  logits = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(attention_mask),
                 position_ids=torch.tensor(positions)).logits
  target = torch.gather(torch.log_softmax(logits[:, :-1].double(), dim=-1), 2,
                        torch.tensor(tokens[:, 1:, None])).squeeze(-1)
  mask = torch.tensor(loss_mask[:, 1:], dtype=torch.float64)
  torch_loss = -(target * mask).sum() / mask.sum()
  torch_loss.backward()
  torch_grads = {name: p.grad.numpy() for name, p in model.named_parameters()}

  batch = {"tokens": tokens.astype(np.int32), "positions": positions.astype(np.int32),
           "segment_ids": attention_mask.astype(np.int32), "loss_mask": loss_mask}

  def mean_loss(params):
    loss_sum, normalizer, _ = rsft.loss(params, config, batch)
    return loss_sum / normalizer

  loss, grads = jax.jit(jax.value_and_grad(mean_loss))(params)
  np.testing.assert_allclose(float(loss), torch_loss.item(), rtol=1e-5)
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


@pytest.mark.slow  # ~15 s of CPU: Qwen3.5's linear layers compile slowly
def test_qwen3_5_logits_and_logprobs_match_transformers(tmp_path, monkeypatch):
  """Qwen3.5's gated attention layers through blockwise attention: logits of a left-padded
  batch, and chunked log-probabilities of an unpadded one."""
  monkeypatch.setattr(logprobs_lib, "CHUNK_SIZE", 5)
  model = hf_fixtures.build("qwen3_5_untied", tmp_path)
  config, params = hf.load_hf(str(tmp_path), dtype="float32", **MEMORY_FEATURES)
  tokens, mask = hf_fixtures.padded_batch(np.random.default_rng(1), [19, 11, 20], 20, left=True)
  expected = hf_fixtures.torch_logits(model, tokens, mask)
  actual = np.asarray(decoder.forward(params, config, jnp.asarray(tokens, jnp.int32),
                                      attention_mask=jnp.asarray(mask)))
  real = mask.astype(bool)
  np.testing.assert_allclose(actual[real], expected[real], atol=1e-4, rtol=0)

  full = np.ones_like(mask)
  logits = hf_fixtures.torch_logits(model, tokens, full).astype(np.float64)
  log_distribution = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
      -1, keepdims=True)) - logits.max(-1, keepdims=True)
  expected_logprobs = np.take_along_axis(log_distribution[:, :-1], tokens[:, 1:, None],
                                         axis=-1)[..., 0]
  batch = {"tokens": jnp.asarray(tokens, jnp.int32),
           "positions": jnp.broadcast_to(jnp.arange(20, dtype=jnp.int32), tokens.shape),
           "segment_ids": jnp.ones(tokens.shape, jnp.int32)}
  actual_logprobs = np.asarray(logprobs_lib.token_logprobs(params, config, batch))
  np.testing.assert_allclose(actual_logprobs[:, 1:], expected_logprobs, atol=1e-4, rtol=0)
