"""GRPO: the clipped policy-gradient loss against the sampling policy, with a reference KL.

Shape letters: B rows, T row length, P prompts, G samples per prompt (the group), S segments.

Per loss token t (loss_mask 1) with advantage A, log-ratio
l_t = clamp(logp_t - old_t, -log_ratio_clamp, log_ratio_clamp) and r_t = exp(l_t):
  objective_t = min(r_t A, clip(r_t, 1 - clip_epsilon, 1 + clip_epsilon_high) A)
  dual clip (dual_clip_ratio = c, only where A < 0): objective_t = max(objective_t, c A)
  policy_t    = -w_t * objective_t
  loss_t      = policy_t + kl_weight * k(reference_t, logp_t)
old_t is batch["old_logprobs"], the log-probabilities of the weights that sampled the batch
(grpo_update.py recomputes them, or takes the sampler's, before the first update of a batch);
without it the current weights are taken to be those weights (r_t = 1, gradient A): right only
for a single update per batch.

KL to the frozen reference, x_t = clamp(reference_t - logp_t, -log_ratio_clamp, ...):
  "k1"  -x_t          "k2"  x_t^2 / 2          "k3"  exp(x_t) - x_t - 1   (default, as GRPO)
It is reported as kl_to_reference whenever batch["reference_logprobs"] is given.

w_t corrects for the sampler not being the trainer (different kernels, dtypes): with
rho_t = exp(old_t - sampler_t),
  "none"            w_t = 1
  "token_truncate"  w_t = min(rho_t, importance_sampling_cap)       (truncated IS, per token)
  "sequence_mask"   w_t = 1 if the sequence's geometric-mean rho lies in
                    [1 / importance_sampling_cap, importance_sampling_cap], else 0
w is a constant (no gradient flows through it).

Clip metrics (fractions of loss tokens): clip_fraction_high (A > 0, r > 1 + clip_epsilon_high),
clip_fraction_low (A < 0, r < 1 - clip_epsilon), clip_fraction = their sum, and
clip_fraction_dual (A < 0, r > c). Each is a token where the gradient is cut.

Aggregation (a sequence is one packed segment with at least one loss token):
  "token_mean"                sum_t loss_t / number of loss tokens in the global batch
  "sequence_mean_token_mean"  mean over sequences of (mean of loss_t over the sequence)
  "constant"                  sum_t loss_t / (number of sequences * constant_normalizer)
                              (Dr. GRPO; constant_normalizer = the generation token budget)
Every normalizer is a sum over rows, so micro-batching gives the same loss (see rsft.py for
the loss contract shared with the train step).

Departures from the papers: advantages (advantages.py) use the sample standard deviation
(ddof = 1) as verl and TRL do; "sequence_mask" uses the geometric mean of the token ratios
rather than their product, so its threshold does not depend on sequence length.
"""
import math

import jax
import jax.numpy as jnp

from whale_jax.train import advantages as advantages_lib
from whale_jax.train import logprobs as logprobs_lib
from whale_jax.train import options

AGGREGATIONS = options.AGGREGATIONS
IMPORTANCE_SAMPLING_MODES = options.IMPORTANCE_SAMPLING_MODES
KL_ESTIMATORS = options.KL_ESTIMATORS
OLD_LOGPROBS_SOURCES = options.OLD_LOGPROBS_SOURCES
GRPOConfig = options.GRPOConfig
_KEY = "config.training.grpo."
_NORMALIZATIONS = options.NORMALIZATION_NAMES


def group_advantages(rewards, normalization="mean_std", epsilon=1e-6):
  """Float64 advantages [P, G] (advantages.group_advantages) under the loop's older names.

  normalization: "mean_std" (= "grpo"), "mean" (= "drgrpo"), or an advantages.ESTIMATORS name.
  """
  estimator = _NORMALIZATIONS.get(normalization, normalization)
  if estimator not in advantages_lib.ESTIMATORS:
    raise ValueError(f"normalization={normalization!r} is not one of "
                     f"{tuple(_NORMALIZATIONS) + advantages_lib.ESTIMATORS}.")
  return advantages_lib.group_advantages(rewards, estimator, epsilon)


def kl_estimate(reference_logprobs, logprobs, estimator="k3", log_ratio_clamp=20.0):
  """Per-token estimate of KL(policy || reference) from samples of the policy: [B, T]."""
  log_ratio = jnp.clip(reference_logprobs - logprobs, -log_ratio_clamp, log_ratio_clamp)
  if estimator == "k1":
    return -log_ratio
  if estimator == "k2":
    return 0.5 * jnp.square(log_ratio)
  if estimator == "k3":
    return jnp.exp(log_ratio) - log_ratio - 1
  raise ValueError(f"{_KEY}kl_estimator={estimator!r} is not one of {KL_ESTIMATORS}.")


def _segment_sums(values, segment_ids):
  """[B, T] values summed per segment of each row: [B, T + 1] (segment ids are <= T)."""
  num_segments = values.shape[1] + 1
  return jax.vmap(lambda v, s: jax.ops.segment_sum(v, s, num_segments))(values, segment_ids)


def _per_token(segment_values, segment_ids):
  """segment_values [B, S] read back at each token's segment: [B, T]."""
  return jnp.take_along_axis(segment_values, segment_ids, axis=1)


def loss_from_logprobs(logprobs, batch, grpo_config, entropy=None):
  """GRPO terms (loss_sum, normalizer, metrics) from the trainer's logprobs [B, T].

  Args:
    logprobs: [B, T] log-probabilities of batch["tokens"] under the weights being trained.
    batch: see train/batch.py; needs "loss_mask", "segment_ids", "advantages",
      "sampler_logprobs", "old_logprobs" when a batch feeds several updates, and
      "reference_logprobs" when kl_weight > 0.
    entropy: optional [B, T] entropies, reported as a metric.
  """
  missing = [key for key in ("advantages", "sampler_logprobs") if key not in batch]
  if missing:
    raise ValueError(f"The GRPO loss needs batch keys {missing}; pack samples with "
                     "advantage and sampler_logprobs set (see train/packing.py).")
  if grpo_config.kl_weight > 0 and "reference_logprobs" not in batch:
    raise ValueError(f"{_KEY}kl_weight={grpo_config.kl_weight} needs "
                     "batch['reference_logprobs']; add them with grpo_update.update (it keeps "
                     "a reference.Reference) or set kl_weight=0.")
  loss_mask = batch["loss_mask"].astype(jnp.float32)
  segment_ids = batch["segment_ids"]
  advantages = batch["advantages"].astype(jnp.float32)
  old = batch.get("old_logprobs")
  old = jax.lax.stop_gradient(logprobs) if old is None else old
  clamp = grpo_config.log_ratio_clamp
  log_ratio = jnp.clip(logprobs - old, -clamp, clamp)
  ratio = jnp.exp(log_ratio)
  low, high = 1 - grpo_config.clip_epsilon, 1 + grpo_config.upper_clip_epsilon
  objective = jnp.minimum(ratio * advantages, jnp.clip(ratio, low, high) * advantages)
  negative = advantages < 0
  clipped_low = negative & (ratio < low)
  clipped_high = (advantages > 0) & (ratio > high)
  if grpo_config.dual_clip_ratio is not None:
    dual = grpo_config.dual_clip_ratio
    objective = jnp.where(negative, jnp.maximum(objective, dual * advantages), objective)
    clipped_dual = negative & (ratio > dual)
  else:
    clipped_dual = jnp.zeros_like(clipped_low)

  sampler_log_ratio = jax.lax.stop_gradient(old - batch["sampler_logprobs"]) * loss_mask
  mode, cap = grpo_config.importance_sampling, grpo_config.importance_sampling_cap
  if mode == "token_truncate":
    weight = jnp.minimum(jnp.exp(jnp.minimum(sampler_log_ratio, clamp)), cap)
  elif mode == "sequence_mask":
    tokens_per_segment = _segment_sums(loss_mask, segment_ids)
    mean_log_ratio = _segment_sums(sampler_log_ratio, segment_ids) / jnp.maximum(
        tokens_per_segment, 1.0)
    keep = jnp.abs(mean_log_ratio) <= math.log(cap)  # [B, S]
    weight = _per_token(keep, segment_ids).astype(jnp.float32)
  else:
    weight = jnp.ones_like(loss_mask)
  per_token = -weight * objective

  metrics = {}
  if "reference_logprobs" in batch:
    kl = kl_estimate(batch["reference_logprobs"], logprobs, grpo_config.kl_estimator, clamp)
    metrics["kl_to_reference"] = kl
    if grpo_config.kl_weight > 0:
      per_token = per_token + grpo_config.kl_weight * kl

  tokens_per_segment = _segment_sums(loss_mask, segment_ids)  # [B, S]
  num_sequences = jnp.sum((tokens_per_segment > 0).astype(jnp.float32))
  num_target_tokens = jnp.sum(loss_mask)
  if grpo_config.aggregation == "sequence_mean_token_mean":
    token_weight = loss_mask / jnp.maximum(_per_token(tokens_per_segment, segment_ids), 1.0)
    loss_sum, normalizer = jnp.sum(per_token * token_weight), num_sequences
  elif grpo_config.aggregation == "constant":
    loss_sum = jnp.sum(per_token * loss_mask)
    normalizer = num_sequences * grpo_config.constant_normalizer
  else:
    loss_sum, normalizer = jnp.sum(per_token * loss_mask), num_target_tokens

  metrics.update(
      clip_fraction=(clipped_low | clipped_high).astype(jnp.float32),
      clip_fraction_low=clipped_low.astype(jnp.float32),
      clip_fraction_high=clipped_high.astype(jnp.float32),
      clip_fraction_dual=clipped_dual.astype(jnp.float32),
      approx_kl=ratio - 1 - log_ratio,
      sampler_trainer_logprob_gap=jnp.abs(sampler_log_ratio),
      importance_weight=weight)
  if entropy is not None:
    metrics["entropy"] = entropy
  token_means = {name: (jnp.sum(jax.lax.stop_gradient(value) * loss_mask), num_target_tokens)
                 for name, value in metrics.items()}
  return loss_sum, normalizer, {**token_means, "num_target_tokens": num_target_tokens,
                                "num_sequences": num_sequences}


def loss(params, model_config, batch, grpo_config=GRPOConfig()):
  """GRPO terms for one (micro-)batch: (loss_sum, normalizer, metrics); see rsft.py.

  Use functools.partial(grpo.loss, grpo_config=...) as the train step's loss_fn.
  """
  outputs = logprobs_lib.token_logprobs(params, model_config, batch, grpo_config.temperature,
                                        with_entropy=grpo_config.compute_entropy)
  logprobs, entropy = outputs if grpo_config.compute_entropy else (outputs, None)
  return loss_from_logprobs(logprobs, batch, grpo_config, entropy)
