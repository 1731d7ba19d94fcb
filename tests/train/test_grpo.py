"""GRPO advantages, clipping, KL, importance sampling and aggregation on hand-computed cases.

The case: two rows of five tokens holding three sequences.
  row 0: sequence A = tokens 0-2 (targets 1, 2, advantage +1),
         sequence B = tokens 3-4 (target 4, advantage -1)
  row 1: sequence C = tokens 0-3 (targets 1, 2, 3, advantage +0.5), token 4 padding
Ratios r = exp(logp - old) at the targets, and the objective min(r A, clip(r) A) with
clip range [0.8, 1.2]:
  A1 r=1.5: min(1.5, 1.2) = 1.2 (clipped)     A2 r=0.9: 0.9
  B4 r=0.7: min(-0.7, -0.8) = -0.8 (clipped)
  C1 r=1.1: 0.55     C2 r=1.3: min(0.65, 0.6) = 0.6 (clipped)    C3 r=0.5: min(0.25, 0.4) = 0.25
Per-token losses (minus the objective): A -1.2, -0.9; B 0.8; C -0.55, -0.6, -0.25; sum -2.7.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from whale_jax.train import grpo

SEGMENT_IDS = np.array([[1, 1, 1, 2, 2], [1, 1, 1, 1, 0]], np.int32)
LOSS_MASK = np.array([[0, 1, 1, 0, 1], [0, 1, 1, 1, 0]], np.float32)
ADVANTAGES = np.array([[1, 1, 1, -1, -1], [0.5, 0.5, 0.5, 0.5, 0]], np.float32)
RATIOS = np.array([[1, 1.5, 0.9, 1, 0.7], [1, 1.1, 1.3, 0.5, 1]], np.float32)
LOGPROBS = np.full((2, 5), -1.0, np.float32)
TARGETS = LOSS_MASK.astype(bool)


def make_batch(**overrides):
  batch = {"tokens": np.zeros((2, 5), np.int32), "positions": np.zeros((2, 5), np.int32),
           "segment_ids": SEGMENT_IDS, "loss_mask": LOSS_MASK, "advantages": ADVANTAGES,
           "old_logprobs": LOGPROBS - np.log(RATIOS), "sampler_logprobs": LOGPROBS - np.log(
               RATIOS)}
  batch.update(overrides)
  return batch


def loss_and_logprob_grad(batch, **config):
  grpo_config = grpo.GRPOConfig(**config)

  def mean_loss(logprobs):
    loss_sum, normalizer, metrics = grpo.loss_from_logprobs(logprobs, batch, grpo_config)
    return loss_sum / normalizer, metrics

  (loss, metrics), grad = jax.value_and_grad(mean_loss, has_aux=True)(jnp.asarray(LOGPROBS))
  metrics = {name: float(v[0] / v[1]) if isinstance(v, tuple) else float(v)
             for name, v in metrics.items()}
  return float(loss), np.asarray(grad), metrics


def test_group_advantages_mean_std_uses_the_sample_std():
  rewards = [[1, 0, 0, 1], [1, 1, 1, 0], [2, 2, 2, 2]]
  # Group 1: mean 0.5, std sqrt(4 * 0.25 / 3) = 0.57735. Group 2: mean 0.75, std 0.5.
  expected = [[0.8660254, -0.8660254, -0.8660254, 0.8660254], [0.5, 0.5, 0.5, -1.5],
              [0, 0, 0, 0]]
  np.testing.assert_allclose(grpo.group_advantages(rewards), expected, rtol=1e-5, atol=1e-6)


def test_group_advantages_mean_only():
  np.testing.assert_allclose(grpo.group_advantages([[1, 0, 0, 1], [3, 1, 1, 3]], "mean"),
                             [[0.5, -0.5, -0.5, 0.5], [1, -1, -1, 1]])


def test_group_advantages_rejects_bad_input():
  with pytest.raises(ValueError, match=r"shape \(4,\); pass \[P, G\]"):
    grpo.group_advantages([1, 0, 0, 1])
  with pytest.raises(ValueError, match="at least 2 samples per group"):
    grpo.group_advantages([[1], [0]])


@pytest.mark.parametrize("aggregation, constant_normalizer, expected", [
    ("token_mean", None, -2.7 / 6),
    ("sequence_mean_token_mean", None, (-2.1 / 2 + 0.8 + -1.4 / 3) / 3),
    ("constant", 4.0, -2.7 / (3 * 4.0)),
])
def test_clipped_loss_for_each_aggregation(aggregation, constant_normalizer, expected):
  loss, grad, metrics = loss_and_logprob_grad(make_batch(), aggregation=aggregation,
                                              constant_normalizer=constant_normalizer)
  np.testing.assert_allclose(loss, expected, rtol=1e-6)
  assert metrics["clip_fraction"] == pytest.approx(3 / 6)
  assert metrics["num_sequences"] == 3 and metrics["num_target_tokens"] == 6
  # d loss / d logp = -A r / (normalizer of the token) where unclipped, 0 where clipped.
  token_weight = {"token_mean": np.full((2, 5), 1 / 6),
                  "sequence_mean_token_mean": np.array([[0, 1 / 6, 1 / 6, 0, 1 / 3],
                                                        [0, 1 / 9, 1 / 9, 1 / 9, 0]]),
                  "constant": np.full((2, 5), 1 / 12)}[aggregation]
  unclipped = np.array([[0, 0, 1, 0, 0], [0, 1, 0, 1, 0]], np.float32)
  np.testing.assert_allclose(grad, -ADVANTAGES * RATIOS * unclipped * token_weight, rtol=1e-5,
                             atol=1e-7)


def test_clip_epsilon_high_widens_only_the_upper_range():
  # Upper bound 1.28: A1 -> 1.28, C2 -> min(0.65, 0.64) = 0.64; B4's lower clip stays 0.8.
  loss, _, metrics = loss_and_logprob_grad(make_batch(), clip_epsilon_high=0.28)
  np.testing.assert_allclose(loss, -(1.28 + 0.9 - 0.8 + 0.55 + 0.64 + 0.25) / 6, rtol=1e-6)
  assert metrics["clip_fraction"] == pytest.approx(3 / 6)


def test_no_clipping_when_ratios_are_inside_the_range():
  ratios = np.where(TARGETS, 1.1, 1.0).astype(np.float32)
  batch = make_batch(old_logprobs=LOGPROBS - np.log(ratios))
  loss, grad, metrics = loss_and_logprob_grad(batch)
  np.testing.assert_allclose(loss, -1.1 * (1 + 1 - 1 + 0.5 * 3) / 6, rtol=1e-6)
  np.testing.assert_allclose(grad, -ADVANTAGES * 1.1 * LOSS_MASK / 6, rtol=1e-5, atol=1e-7)
  assert metrics["clip_fraction"] == 0.0
  # approx_kl is the k3 estimate (r - 1) - log r, averaged over targets.
  assert metrics["approx_kl"] == pytest.approx(0.1 - math.log(1.1), rel=1e-4)


def test_without_old_logprobs_the_ratio_is_one_and_the_gradient_is_the_advantage():
  batch = make_batch()
  del batch["old_logprobs"]
  batch["sampler_logprobs"] = LOGPROBS
  loss, grad, metrics = loss_and_logprob_grad(batch)
  np.testing.assert_allclose(loss, -(1 + 1 - 1 + 0.5 * 3) / 6, rtol=1e-6)
  np.testing.assert_allclose(grad, -ADVANTAGES * LOSS_MASK / 6, rtol=1e-5, atol=1e-7)
  assert metrics["clip_fraction"] == 0.0 and metrics["approx_kl"] == 0.0


def test_k3_kl_to_the_reference_on_and_off():
  # reference - logp = log 2 on A1 and -log 2 on C3: k3 = 2 - log 2 - 1 and 0.5 + log 2 - 1.
  reference = LOGPROBS.copy()
  reference[0, 1] += math.log(2)
  reference[1, 3] -= math.log(2)
  kl_a1, kl_c3 = 1 - math.log(2), math.log(2) - 0.5
  batch = make_batch(reference_logprobs=reference)
  loss_off, _, metrics_off = loss_and_logprob_grad(batch)
  np.testing.assert_allclose(loss_off, -2.7 / 6, rtol=1e-6)
  assert metrics_off["kl_to_reference"] == pytest.approx((kl_a1 + kl_c3) / 6, rel=1e-5)
  loss_on, grad_on, _ = loss_and_logprob_grad(batch, kl_weight=0.1)
  np.testing.assert_allclose(loss_on, (-2.7 + 0.1 * (kl_a1 + kl_c3)) / 6, rtol=1e-6)
  # d k3 / d logp = 1 - exp(reference - logp): -1 on A1, +0.5 on C3.
  _, grad_off, _ = loss_and_logprob_grad(batch)
  np.testing.assert_allclose(grad_on[0, 1] - grad_off[0, 1], 0.1 * -1 / 6, rtol=1e-5)
  np.testing.assert_allclose(grad_on[1, 3] - grad_off[1, 3], 0.1 * 0.5 / 6, rtol=1e-5)


def test_missing_batch_keys_say_what_to_do():
  with pytest.raises(ValueError, match="needs batch\\['reference_logprobs'\\]"):
    loss_and_logprob_grad(make_batch(), kl_weight=0.1)
  batch = make_batch()
  del batch["sampler_logprobs"]
  with pytest.raises(ValueError, match=r"needs batch keys \['sampler_logprobs'\]"):
    loss_and_logprob_grad(batch)


def sampler_batch(log_gaps):
  """old - sampler = log_gaps[(row, t)] at those targets, 0 elsewhere."""
  old = LOGPROBS - np.log(RATIOS)
  sampler = old.copy()
  for (row, t), gap in log_gaps.items():
    sampler[row, t] -= gap
  return make_batch(sampler_logprobs=sampler)


def test_token_truncated_importance_sampling():
  # rho = 3 on A2 (truncated to 2), 1.5 on C1, 1 elsewhere.
  batch = sampler_batch({(0, 2): math.log(3), (1, 1): math.log(1.5)})
  loss, _, metrics = loss_and_logprob_grad(batch, importance_sampling="token_truncate",
                                           importance_sampling_cap=2.0)
  np.testing.assert_allclose(loss, (-1.2 - 2 * 0.9 + 0.8 - 1.5 * 0.55 - 0.6 - 0.25) / 6,
                             rtol=1e-6)
  assert metrics["importance_weight"] == pytest.approx((1 + 2 + 1 + 1.5 + 1 + 1) / 6)
  assert metrics["sampler_trainer_logprob_gap"] == pytest.approx(
      (math.log(3) + math.log(1.5)) / 6, rel=1e-5)
  unweighted, _, _ = loss_and_logprob_grad(batch)
  np.testing.assert_allclose(unweighted, -2.7 / 6, rtol=1e-6)


def test_sequence_masked_importance_sampling():
  # A: log rho (log 3, 0), geometric mean sqrt(3) < 2, kept. B: rho 1/2.5, masked.
  # C: log rho (log 1.5, log 1.5, log 1.5) -> 1.5, kept.
  batch = sampler_batch({(0, 1): math.log(3), (0, 4): -math.log(2.5), (1, 1): math.log(1.5),
                         (1, 2): math.log(1.5), (1, 3): math.log(1.5)})
  loss, _, metrics = loss_and_logprob_grad(batch, importance_sampling="sequence_mask",
                                           importance_sampling_cap=2.0)
  np.testing.assert_allclose(loss, (-1.2 - 0.9 - 0.55 - 0.6 - 0.25) / 6, rtol=1e-6)
  assert metrics["importance_weight"] == pytest.approx(5 / 6)


@pytest.mark.parametrize("field, value, words", [
    ("clip_epsilon", 1.5, "clip_epsilon=1.5 must lie in"),
    ("aggregation", "sum", "aggregation='sum' is not one of"),
    ("importance_sampling", "tis", "importance_sampling='tis' is not one of"),
    ("importance_sampling_cap", 0.5, "must be > 1"),
    ("kl_weight", -1.0, "kl_weight=-1.0 must be >= 0"),
])
def test_config_errors_name_the_key(field, value, words):
  with pytest.raises(ValueError, match=words):
    grpo.GRPOConfig(**{field: value})
  with pytest.raises(ValueError, match="constant_normalizer"):
    grpo.GRPOConfig(aggregation="constant")
