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
Clipped: A1 and C2 above (A > 0, r > 1.2), B4 below (A < 0, r < 0.8).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from whale_jax.train import advantages as advantages_lib
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
  assert metrics["clip_fraction_high"] == pytest.approx(2 / 6)
  assert metrics["clip_fraction_low"] == pytest.approx(1 / 6)
  assert metrics["clip_fraction_dual"] == 0.0
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
    ("importance_sampling_cap", 0.5, "importance_sampling_cap=0.5 must be > 1"),
    ("kl_weight", -1.0, "kl_weight=-1.0 must be >= 0"),
])
def test_config_errors_name_the_key(field, value, words):
  with pytest.raises(ValueError, match="config.training.grpo." + words):
    grpo.GRPOConfig(**{field: value})
  with pytest.raises(ValueError, match="constant_normalizer"):
    grpo.GRPOConfig(aggregation="constant")


def test_dual_clip_bounds_a_negative_advantage_from_below():
  # B4 at r = 4: min(-4, -1.2) = -4; the dual clip with c = 3 lifts it to -3 (no gradient).
  ratios = RATIOS.copy()
  ratios[0, 4] = 4.0
  batch = make_batch(old_logprobs=LOGPROBS - np.log(ratios))
  loss_off, grad_off, metrics_off = loss_and_logprob_grad(batch)
  np.testing.assert_allclose(loss_off, (-1.2 - 0.9 + 4.0 - 0.55 - 0.6 - 0.25) / 6, rtol=1e-6)
  np.testing.assert_allclose(grad_off[0, 4], 4.0 / 6, rtol=1e-5)
  loss, grad, metrics = loss_and_logprob_grad(batch, dual_clip_ratio=3.0)
  np.testing.assert_allclose(loss, (-1.2 - 0.9 + 3.0 - 0.55 - 0.6 - 0.25) / 6, rtol=1e-6)
  assert grad[0, 4] == 0.0
  assert metrics["clip_fraction_dual"] == pytest.approx(1 / 6)
  assert metrics["clip_fraction_low"] == 0.0 and metrics_off["clip_fraction_dual"] == 0.0


def test_the_log_ratio_is_clamped_before_exp():
  # B4 (A = -1) at log r = 2 with clamp 1: r = e, unclipped objective -e, no gradient.
  log_ratios = np.log(RATIOS)
  log_ratios[0, 4] = 2.0
  batch = make_batch(old_logprobs=LOGPROBS - log_ratios)
  loss, grad, metrics = loss_and_logprob_grad(batch, log_ratio_clamp=1.0)
  np.testing.assert_allclose(loss, (-1.2 - 0.9 + math.e - 0.55 - 0.6 - 0.25) / 6, rtol=1e-6)
  assert grad[0, 4] == 0.0
  # approx_kl = r - 1 - log r per target: (0.5 - log 1.5), (-0.1 - log 0.9), (e - 2), ...
  expected_kl = sum(r - 1 - math.log(r) for r in (1.5, 0.9, 1.1, 1.3, 0.5)) + math.e - 2
  assert metrics["approx_kl"] == pytest.approx(expected_kl / 6, rel=1e-5)
  huge = make_batch(old_logprobs=LOGPROBS - 1000.0 * TARGETS)  # exp(1000) would be inf
  loss, grad, _ = loss_and_logprob_grad(huge)
  assert np.isfinite(loss) and np.all(np.isfinite(grad))


# x = reference - logp on four tokens; each estimator written out by hand.
KL_X = np.array([math.log(2), -math.log(2), 0.0, 1.5], np.float32)
KL_EXPECTED = {
    "k1": [-0.6931472, 0.6931472, 0.0, -1.5],
    "k2": [0.2402265, 0.2402265, 0.0, 1.125],                 # x^2 / 2
    "k3": [2 - 0.6931472 - 1, 0.5 + 0.6931472 - 1, 0.0, 4.4816891 - 1.5 - 1],
}


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_on_fixed_arrays(estimator):
  logprobs = np.array([-1.0, -2.0, -0.5, -3.0], np.float32)
  actual = grpo.kl_estimate(jnp.asarray(logprobs + KL_X), jnp.asarray(logprobs), estimator)
  np.testing.assert_allclose(actual, KL_EXPECTED[estimator], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("estimator", ["k1", "k2"])
def test_kl_estimator_choice_reaches_the_loss(estimator):
  # x = log 2 on A1 and -log 2 on C3 (as in the k3 test above).
  reference = LOGPROBS.copy()
  reference[0, 1] += math.log(2)
  reference[1, 3] -= math.log(2)
  batch = make_batch(reference_logprobs=reference)
  expected = {"k1": 0.0, "k2": math.log(2) ** 2}[estimator]  # k1: -log 2 + log 2
  loss, grad, metrics = loss_and_logprob_grad(batch, kl_weight=0.1, kl_estimator=estimator)
  assert metrics["kl_to_reference"] == pytest.approx(expected / 6, abs=1e-7)
  np.testing.assert_allclose(loss, (-2.7 + 0.1 * expected) / 6, rtol=1e-6)
  # d k1 / d logp = 1 everywhere; d k2 / d logp = -x.
  _, grad_off, _ = loss_and_logprob_grad(batch)
  d_kl = {"k1": (1.0, 1.0), "k2": (-math.log(2), math.log(2))}[estimator]
  np.testing.assert_allclose(grad[0, 1] - grad_off[0, 1], 0.1 * d_kl[0] / 6, rtol=1e-5)
  np.testing.assert_allclose(grad[1, 3] - grad_off[1, 3], 0.1 * d_kl[1] / 6, rtol=1e-5)


@pytest.mark.parametrize("value", [0.1, 0.7, 1 / 3, np.float32(0.1), -2.5, 0.0])
@pytest.mark.parametrize("group_size", [2, 3, 8])
@pytest.mark.parametrize("estimator", advantages_lib.ESTIMATORS)
def test_constant_groups_get_exactly_zero_advantage(value, group_size, estimator):
  rewards = np.array([[value] * group_size, [1.0] + [0.0] * (group_size - 1)])
  advantages = advantages_lib.group_advantages(rewards, estimator)
  assert advantages.dtype == np.float64
  assert np.all(advantages[0] == 0.0)
  assert np.all(advantages[1] != 0.0)


def test_constant_groups_need_the_exact_check_even_in_float64():
  # float64 alone is not enough: the mean of three 0.1s is 0.10000000000000002, so
  # (r - mean) / (std + 1e-6) would be ~1e-11, not 0.
  rewards = np.full((1, 3), 0.1)
  assert np.any(rewards - rewards.mean(axis=1, keepdims=True) != 0)
  assert np.all(advantages_lib.group_advantages(rewards) == 0.0)
  assert np.all(advantages_lib.constant_groups([[0.1] * 3, [0.1, 0.1, 0.1 + 1e-15]]) == [True,
                                                                                       False])


def test_advantage_estimators_by_hand():
  rewards = [[1, 0, 0, 1], [1, 1, 1, 0]]
  # rloo: r_i - mean of the other three. Group 1: 1 - 1/3, 0 - 2/3. Group 2: 1 - 2/3, 0 - 1.
  np.testing.assert_allclose(advantages_lib.group_advantages(rewards, "rloo"),
                             [[2 / 3, -2 / 3, -2 / 3, 2 / 3], [1 / 3, 1 / 3, 1 / 3, -1]],
                             rtol=1e-12)
  np.testing.assert_allclose(advantages_lib.group_advantages(rewards, "drgrpo"),
                             [[0.5, -0.5, -0.5, 0.5], [0.25, 0.25, 0.25, -0.75]], rtol=1e-12)
  # grpo: std with ddof 1 -- group 2: sqrt((3 * 0.0625 + 0.5625) / 3) = 0.5.
  np.testing.assert_allclose(advantages_lib.group_advantages(rewards, "grpo", epsilon=0.0),
                             [[0.8660254037844386, -0.8660254037844386, -0.8660254037844386,
                               0.8660254037844386], [0.5, 0.5, 0.5, -1.5]], rtol=1e-12)
  assert np.array_equal(grpo.group_advantages(rewards, "mean"),
                        advantages_lib.group_advantages(rewards, "drgrpo"))


def test_advantage_errors_name_the_problem():
  with pytest.raises(ValueError, match="estimator='gae' is not one of"):
    advantages_lib.group_advantages([[1, 0]], "gae")
  with pytest.raises(ValueError, match=r"groups \[1\] are not finite"):
    advantages_lib.group_advantages([[1, 0], [np.nan, 1]])
  with pytest.raises(ValueError, match="'rloo' needs at least 2 samples"):
    advantages_lib.group_advantages([[1], [0]], "rloo")
  np.testing.assert_array_equal(advantages_lib.group_advantages([[1], [0]], "drgrpo"),
                                [[0], [0]])


@pytest.mark.parametrize("field, value, words", [
    ("dual_clip_ratio", 1.1, "config.training.grpo.dual_clip_ratio=1.1 must exceed"),
    ("kl_estimator", "k4", "config.training.grpo.kl_estimator='k4' is not one of"),
    ("old_logprobs_source", "vllm", "old_logprobs_source='vllm' is not one of"),
    ("ppo_epochs", 0, "config.training.grpo.ppo_epochs=0 must be a positive int"),
    ("num_minibatches", 2.5, "num_minibatches=2.5 must be a positive int"),
    ("log_ratio_clamp", 0.0, "log_ratio_clamp=0.0 must be > 0"),
])
def test_new_config_errors_name_the_key(field, value, words):
  with pytest.raises(ValueError, match=words):
    grpo.GRPOConfig(**{field: value})


def test_kl_weight_is_accepted_and_keeps_a_reference():
  assert grpo.GRPOConfig(kl_weight=0.05).uses_reference
  assert grpo.GRPOConfig(keep_reference=True).uses_reference
  assert not grpo.GRPOConfig().uses_reference
