"""Packing layout against hand-written rows, and packed == unpacked losses and gradients."""
import functools

import jax
import numpy as np
import pytest

from tests.train import random_params
from whale_jax.models import config as config_lib
from whale_jax.train import grpo
from whale_jax.train import packing
from whale_jax.train import rsft

MODEL = config_lib.ModelConfig(vocab_size=40, num_layers=2, embed_dim=24, mlp_dim=40,
                               num_heads=4, num_kv_heads=2, head_dim=6)


def test_pack_places_samples_first_fit_decreasing():
  samples = [packing.Sample([5, 6, 7], [0, 1, 1], advantage=0.5),
             packing.Sample([8, 9, 10, 11, 12], [0, 0, 1, 0, 1], advantage=-1.0),
             packing.Sample([13, 14], [0, 1], advantage=2.0)]
  batch, placements = packing.pack(samples, row_length=6, num_rows=3)
  # Longest first: the 5-token sample opens row 0, the 3-token one does not fit there and
  # opens row 1, the 2-token one fits after it.
  assert placements == [(1, 0), (0, 0), (1, 3)]
  np.testing.assert_array_equal(batch["tokens"], [[8, 9, 10, 11, 12, 0],
                                                  [5, 6, 7, 13, 14, 0], [0] * 6])
  np.testing.assert_array_equal(batch["segment_ids"], [[1, 1, 1, 1, 1, 0],
                                                       [1, 1, 1, 2, 2, 0], [0] * 6])
  np.testing.assert_array_equal(batch["positions"], [[0, 1, 2, 3, 4, 0],
                                                     [0, 1, 2, 0, 1, 0], [0] * 6])
  np.testing.assert_array_equal(batch["loss_mask"], [[0, 0, 1, 0, 1, 0],
                                                     [0, 1, 1, 0, 1, 0], [0] * 6])
  np.testing.assert_array_equal(batch["advantages"], [[-1, -1, -1, -1, -1, 0],
                                                      [0.5, 0.5, 0.5, 2, 2, 0], [0] * 6])
  assert "sampler_logprobs" not in batch
  assert batch["tokens"].dtype == np.int32 and batch["loss_mask"].dtype == np.float32


def test_one_per_row_keeps_order_and_zeroes_sampler_logprobs_off_the_mask():
  samples = [packing.Sample([1, 2, 3], [0, 1, 0], sampler_logprobs=[-9, -0.5, -9]),
             packing.Sample([4, 5], [0, 1], sampler_logprobs=[-9, -0.25])]
  batch, placements = packing.pack(samples, row_length=4, one_per_row=True)
  assert placements == [(0, 0), (1, 0)]
  np.testing.assert_array_equal(batch["sampler_logprobs"], [[0, -0.5, 0, 0], [0, -0.25, 0, 0]])


@pytest.mark.parametrize("make, words", [
    (lambda: packing.pack([packing.Sample([1, 2, 3], [0, 1, 1])], row_length=2),
     "has 3 tokens, more than row_length=2"),
    (lambda: packing.Sample([1, 2], [1, 1]), "loss_mask\\[0\\] is 1"),
    (lambda: packing.Sample([1, 2], [0, 1, 1]), "give one mask value per token"),
    (lambda: packing.pack([packing.Sample([1, 2], [0, 1])] * 3, row_length=2, num_rows=2),
     "need 3 rows .* num_rows=2"),
    (lambda: packing.pack([packing.Sample([1, 2], [0, 1], [0, -1]),
                           packing.Sample([1, 2], [0, 1])], row_length=4),
     "lack sampler_logprobs"),
])
def test_pack_errors_say_what_to_change(make, words):
  with pytest.raises(ValueError, match=words):
    make()


def random_samples(rng, lengths):
  samples = []
  for length in lengths:
    loss_mask = (rng.uniform(size=length) < 0.6).astype(np.float32)
    loss_mask[0] = 0
    samples.append(packing.Sample(rng.integers(1, MODEL.vocab_size, size=length), loss_mask,
                                  sampler_logprobs=-rng.uniform(0.5, 4, size=length),
                                  advantage=float(rng.normal())))
  return samples


@pytest.mark.parametrize("loss_fn", [
    pytest.param(rsft.loss, marks=pytest.mark.slow),
    functools.partial(grpo.loss, grpo_config=grpo.GRPOConfig(
        aggregation="sequence_mean_token_mean", importance_sampling="token_truncate")),
], ids=["rsft", "grpo"])
def test_packed_and_unpacked_batches_give_the_same_loss_and_gradient(loss_fn):
  rng = np.random.default_rng(0)
  samples = random_samples(rng, [7, 3, 5, 4, 2, 6])
  packed, placements = packing.pack(samples, row_length=10, num_rows=len(samples))
  unpacked, _ = packing.pack(samples, row_length=10, one_per_row=True)
  assert max(row for row, _ in placements) == 2  # three rows hold all six samples
  params = random_params.numpy_params(MODEL)

  @jax.jit
  def mean_loss_and_grad(params, batch):
    def mean_loss(params):
      loss_sum, normalizer, _ = loss_fn(params, MODEL, batch)
      return loss_sum / normalizer
    return jax.value_and_grad(mean_loss)(params)

  packed_loss, packed_grads = mean_loss_and_grad(params, packed)
  unpacked_loss, unpacked_grads = mean_loss_and_grad(params, unpacked)
  np.testing.assert_allclose(packed_loss, unpacked_loss, rtol=1e-5)
  for packed_grad, unpacked_grad in zip(jax.tree.leaves(packed_grads),
                                        jax.tree.leaves(unpacked_grads)):
    np.testing.assert_allclose(packed_grad, unpacked_grad, rtol=1e-4,
                               atol=1e-5 * np.abs(unpacked_grad).max())
