"""GRPO: group-relative advantages and the clipped policy-gradient loss.

Shape letters: B rows, T row length, P prompts, G samples per prompt (the group), S segments.

Per loss token t (loss_mask 1) with r_t = exp(logp_t - old_t) and advantage A:
  policy_t = -w_t * min(r_t * A, clip(r_t, 1 - clip_epsilon, 1 + clip_epsilon_high) * A)
  loss_t   = policy_t + kl_weight * (exp(ref_t - logp_t) - (ref_t - logp_t) - 1)    # k3 KL
old_t is batch["old_logprobs"] when given, else the current logprobs with the gradient
stopped: one update per batch, taken at the weights that sampled it (r_t = 1, gradient A).

w_t corrects for the sampler not being the trainer (different kernels, dtypes): with
rho_t = exp(old_t - sampler_t),
  "none"            w_t = 1
  "token_truncate"  w_t = min(rho_t, importance_sampling_cap)       (truncated IS, per token)
  "sequence_mask"   w_t = 1 if the sequence's geometric-mean rho lies in
                    [1 / importance_sampling_cap, importance_sampling_cap], else 0
w is a constant (no gradient flows through it).

Aggregation (a sequence is one packed segment with at least one loss token):
  "token_mean"                sum_t loss_t / number of loss tokens in the global batch
  "sequence_mean_token_mean"  mean over sequences of (mean of loss_t over the sequence)
  "constant"                  sum_t loss_t / (number of sequences * constant_normalizer)
                              (Dr. GRPO; constant_normalizer = the generation token budget)
Every normalizer is a sum over rows, so micro-batching gives the same loss (see rsft.py for
the loss contract shared with the train step).

Departures from the papers: advantages use the sample standard deviation (ddof = 1) as in
the reference GRPO implementations; "sequence_mask" uses the geometric mean of the token
ratios rather than their product, so its threshold does not depend on sequence length.
"""
import dataclasses
import math

import jax
import jax.numpy as jnp

from whale_jax.train import logprobs as logprobs_lib

ADVANTAGE_NORMALIZATIONS = ("mean_std", "mean")
AGGREGATIONS = ("token_mean", "sequence_mean_token_mean", "constant")
IMPORTANCE_SAMPLING_MODES = ("none", "token_truncate", "sequence_mask")


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
  """GRPO loss options (= config.grpo keys).

  Attributes:
    clip_epsilon: lower clip range, r >= 1 - clip_epsilon.
    clip_epsilon_high: upper clip range, r <= 1 + clip_epsilon_high; None = clip_epsilon
      (DAPO's clip-higher uses 0.28 with clip_epsilon 0.2).
    kl_weight: beta of the k3 KL to the reference model; 0 disables it.
    aggregation: one of AGGREGATIONS.
    constant_normalizer: tokens per sequence in the "constant" aggregation.
    importance_sampling: one of IMPORTANCE_SAMPLING_MODES.
    importance_sampling_cap: truncation level / mask threshold for importance sampling.
    temperature: logprobs are log_softmax(logits / temperature); the sampler's logprobs must
      be at the same temperature.
    compute_entropy: report the mean entropy (costs one more pass over the logits).
  """
  clip_epsilon: float = 0.2
  clip_epsilon_high: float | None = None
  kl_weight: float = 0.0
  aggregation: str = "token_mean"
  constant_normalizer: float | None = None
  importance_sampling: str = "none"
  importance_sampling_cap: float = 2.0
  temperature: float = 1.0
  compute_entropy: bool = True

  def __post_init__(self):
    if not 0 < self.clip_epsilon < 1:
      raise ValueError(f"config.grpo.clip_epsilon={self.clip_epsilon} must lie in (0, 1), "
                       "e.g. 0.2.")
    if self.clip_epsilon_high is not None and self.clip_epsilon_high <= 0:
      raise ValueError(f"config.grpo.clip_epsilon_high={self.clip_epsilon_high} must be "
                       "positive (e.g. 0.28) or None to use clip_epsilon.")
    if self.kl_weight < 0:
      raise ValueError(f"config.grpo.kl_weight={self.kl_weight} must be >= 0 (0 = no KL).")
    if self.aggregation not in AGGREGATIONS:
      raise ValueError(f"config.grpo.aggregation={self.aggregation!r} is not one of "
                       f"{AGGREGATIONS}.")
    if self.aggregation == "constant" and not (self.constant_normalizer or 0) > 0:
      raise ValueError("config.grpo.aggregation='constant' needs config.grpo."
                       f"constant_normalizer > 0 (got {self.constant_normalizer!r}); set it "
                       "to the generation token budget, as Dr. GRPO does.")
    if self.importance_sampling not in IMPORTANCE_SAMPLING_MODES:
      raise ValueError(f"config.grpo.importance_sampling={self.importance_sampling!r} is not "
                       f"one of {IMPORTANCE_SAMPLING_MODES}.")
    if not self.importance_sampling_cap > 1:
      raise ValueError(f"config.grpo.importance_sampling_cap={self.importance_sampling_cap} "
                       "must be > 1, e.g. 2.0.")
    logprobs_lib.check_temperature(self.temperature)

  @property
  def upper_clip_epsilon(self):
    return self.clip_epsilon if self.clip_epsilon_high is None else self.clip_epsilon_high


def group_advantages(rewards, normalization="mean_std", epsilon=1e-6):
  """Group-relative advantages: rewards [P, G] -> [P, G].

  "mean_std": (r - mean) / (std + epsilon), std with ddof = 1 (GRPO).
  "mean":     r - mean (Dr. GRPO).
  """
  if normalization not in ADVANTAGE_NORMALIZATIONS:
    raise ValueError(f"normalization={normalization!r} is not one of "
                     f"{ADVANTAGE_NORMALIZATIONS}.")
  rewards = jnp.asarray(rewards, jnp.float32)
  if rewards.ndim != 2:
    raise ValueError(f"rewards has shape {rewards.shape}; pass [P, G]: one row per prompt, "
                     "one column per sample of its group.")
  centered = rewards - jnp.mean(rewards, axis=1, keepdims=True)
  if normalization == "mean":
    return centered
  if rewards.shape[1] < 2:
    raise ValueError(f"normalization='mean_std' needs at least 2 samples per group; got "
                     f"G={rewards.shape[1]}. Sample more per prompt or use 'mean'.")
  return centered / (jnp.std(rewards, axis=1, keepdims=True, ddof=1) + epsilon)


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
      "sampler_logprobs", and "reference_logprobs" when kl_weight > 0.
    entropy: optional [B, T] entropies, reported as a metric.
  """
  missing = [key for key in ("advantages", "sampler_logprobs") if key not in batch]
  if missing:
    raise ValueError(f"The GRPO loss needs batch keys {missing}; pack samples with "
                     "advantage and sampler_logprobs set (see train/packing.py).")
  if grpo_config.kl_weight > 0 and "reference_logprobs" not in batch:
    raise ValueError(f"config.grpo.kl_weight={grpo_config.kl_weight} needs "
                     "batch['reference_logprobs']; compute them with the reference model or "
                     "set kl_weight=0.")
  loss_mask = batch["loss_mask"].astype(jnp.float32)
  segment_ids = batch["segment_ids"]
  advantages = batch["advantages"].astype(jnp.float32)
  old = batch.get("old_logprobs")
  old = jax.lax.stop_gradient(logprobs) if old is None else old
  log_ratio = logprobs - old
  ratio = jnp.exp(log_ratio)
  clipped_ratio = jnp.clip(ratio, 1 - grpo_config.clip_epsilon,
                           1 + grpo_config.upper_clip_epsilon)
  unclipped_objective = ratio * advantages
  clipped_objective = clipped_ratio * advantages
  objective = jnp.minimum(unclipped_objective, clipped_objective)
  is_clipped = (clipped_objective < unclipped_objective).astype(jnp.float32)

  sampler_log_ratio = jax.lax.stop_gradient(old - batch["sampler_logprobs"]) * loss_mask
  mode, cap = grpo_config.importance_sampling, grpo_config.importance_sampling_cap
  if mode == "token_truncate":
    weight = jnp.minimum(jnp.exp(sampler_log_ratio), cap)
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
  if grpo_config.kl_weight > 0 or "reference_logprobs" in batch:
    reference_log_ratio = batch["reference_logprobs"] - logprobs
    kl = jnp.exp(reference_log_ratio) - reference_log_ratio - 1
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
      clip_fraction=is_clipped,
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
