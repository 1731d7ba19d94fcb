"""The training options, as frozen dataclasses that import no jax (the config boundary builds
them before jax starts; optimizer.py, grpo.py and logprobs.py use them).

  OptimizerConfig   config.training.optimizer  (optimizer.py: AdamW, schedule, clipping)
  GRPOConfig        config.training.grpo       (grpo.py: clipping, KL, aggregation, IS)
  check_temperature the logprob temperature's rule (logprobs.py)
  ADVANTAGE_NORMALIZATIONS  the names config.loop.advantage_normalization takes

Each class checks its own values in __post_init__ and names the config key to change.
"""
import dataclasses

from whale_jax.train import advantages

# The loop's older names of advantages.ESTIMATORS (grpo.group_advantages reads them).
NORMALIZATION_NAMES = {"mean_std": "grpo", "mean": "drgrpo"}
ADVANTAGE_NORMALIZATIONS = advantages.ESTIMATORS + tuple(NORMALIZATION_NAMES)


def check_temperature(temperature):
  if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or (
      temperature <= 0):
    raise ValueError(f"temperature={temperature!r} must be a positive number (1.0 = the "
                     "model's own distribution).")


SCHEDULES = ("constant", "cosine")
_OPTIMIZER_KEY = "config.training.optimizer."


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """Optimizer options (= config.training.optimizer keys)."""
  learning_rate: float = 1e-6
  warmup_steps: int = 0
  schedule: str = "constant"
  total_steps: int | None = None
  final_learning_rate_fraction: float = 0.0
  beta1: float = 0.9
  beta2: float = 0.999
  epsilon: float = 1e-8
  weight_decay: float = 0.0
  max_grad_norm: float | None = 1.0
  state_dtype: str = "float32"
  master_weights: bool = True

  def __post_init__(self):
    if self.state_dtype not in ("float32", "bfloat16"):
      raise ValueError(f"{_OPTIMIZER_KEY}state_dtype={self.state_dtype!r} must be 'float32' or "
                       "'bfloat16'.")
    if not self.learning_rate >= 0:
      raise ValueError(f"{_OPTIMIZER_KEY}learning_rate={self.learning_rate} must be >= 0.")
    if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
      raise ValueError(f"{_OPTIMIZER_KEY}warmup_steps={self.warmup_steps!r} must be an "
                       "integer >= 0.")
    if self.schedule not in SCHEDULES:
      raise ValueError(f"{_OPTIMIZER_KEY}schedule={self.schedule!r} is not one of "
                       f"{SCHEDULES}.")
    if self.schedule == "cosine" and not (
        isinstance(self.total_steps, int) and self.total_steps > self.warmup_steps):
      raise ValueError(f"{_OPTIMIZER_KEY}schedule='cosine' needs total_steps > warmup_steps="
                       f"{self.warmup_steps}; got total_steps={self.total_steps!r}.")
    if self.max_grad_norm is not None and not self.max_grad_norm > 0:
      raise ValueError(f"{_OPTIMIZER_KEY}max_grad_norm={self.max_grad_norm} must be > 0, or "
                       "None to disable clipping.")
    if self.weight_decay < 0:
      raise ValueError(f"{_OPTIMIZER_KEY}weight_decay={self.weight_decay} must be >= 0.")


AGGREGATIONS = ("token_mean", "sequence_mean_token_mean", "constant")
IMPORTANCE_SAMPLING_MODES = ("none", "token_truncate", "sequence_mask")
KL_ESTIMATORS = ("k1", "k2", "k3")
OLD_LOGPROBS_SOURCES = ("recompute", "sampler")
_GRPO_KEY = "config.training.grpo."


def _positive_int(value):
  return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
  """GRPO options (= config.training.grpo keys).

  Attributes:
    clip_epsilon: lower clip range, r >= 1 - clip_epsilon.
    clip_epsilon_high: upper clip range, r <= 1 + clip_epsilon_high; None = clip_epsilon
      (DAPO's clip-higher uses 0.28 with clip_epsilon 0.2).
    dual_clip_ratio: c of dual-clip PPO (verl's clip_ratio_c, e.g. 3.0): where A < 0 the
      objective is at least c A; None disables it. Must exceed 1 + clip_epsilon_high.
    log_ratio_clamp: |logp - old| and |reference - logp| are clamped to this before exp.
    kl_weight: beta of the KL to the reference model; 0 = no KL term.
    kl_estimator: one of KL_ESTIMATORS.
    keep_reference: keep the reference copy (and report the KL) even when kl_weight is 0.
    offload_reference: keep the reference copy in pinned host memory (reference.py).
    old_logprobs_source: "recompute" (one trainer forward pass at the sampling weights per
      batch) or "sampler" (the sampler's logprobs; right only when sampler and trainer agree).
    ppo_epochs: passes over each batch of rollouts (Tunix's num_iterations).
    num_minibatches: optimizer steps per pass; None = one per config.training.samples_per_step
      samples.
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
  dual_clip_ratio: float | None = None
  log_ratio_clamp: float = 20.0
  kl_weight: float = 0.0
  kl_estimator: str = "k3"
  keep_reference: bool = False
  offload_reference: bool = False
  old_logprobs_source: str = "recompute"
  ppo_epochs: int = 1
  num_minibatches: int | None = None
  aggregation: str = "token_mean"
  constant_normalizer: float | None = None
  importance_sampling: str = "none"
  importance_sampling_cap: float = 2.0
  temperature: float = 1.0
  compute_entropy: bool = True

  def __post_init__(self):
    if not 0 < self.clip_epsilon < 1:
      raise ValueError(f"{_GRPO_KEY}clip_epsilon={self.clip_epsilon} must lie in (0, 1), e.g. 0.2.")
    if self.clip_epsilon_high is not None and self.clip_epsilon_high <= 0:
      raise ValueError(f"{_GRPO_KEY}clip_epsilon_high={self.clip_epsilon_high} must be positive "
                       "(e.g. 0.28) or None to use clip_epsilon.")
    if self.dual_clip_ratio is not None and not (
        self.dual_clip_ratio > 1 + self.upper_clip_epsilon):
      raise ValueError(f"{_GRPO_KEY}dual_clip_ratio={self.dual_clip_ratio} must exceed "
                       f"1 + clip_epsilon_high = {1 + self.upper_clip_epsilon} (verl uses 3.0), "
                       "or be None to disable the dual clip.")
    if not self.log_ratio_clamp > 0:
      raise ValueError(f"{_GRPO_KEY}log_ratio_clamp={self.log_ratio_clamp} must be > 0, e.g. 20.0.")
    if self.kl_weight < 0:
      raise ValueError(f"{_GRPO_KEY}kl_weight={self.kl_weight} must be >= 0 (0 = no KL).")
    if self.kl_estimator not in KL_ESTIMATORS:
      raise ValueError(f"{_GRPO_KEY}kl_estimator={self.kl_estimator!r} is not one of "
                       f"{KL_ESTIMATORS}.")
    if self.old_logprobs_source not in OLD_LOGPROBS_SOURCES:
      raise ValueError(f"{_GRPO_KEY}old_logprobs_source={self.old_logprobs_source!r} is not one of "
                       f"{OLD_LOGPROBS_SOURCES}.")
    if not _positive_int(self.ppo_epochs):
      raise ValueError(f"{_GRPO_KEY}ppo_epochs={self.ppo_epochs!r} must be a positive int, e.g. 1.")
    if self.num_minibatches is not None and not _positive_int(self.num_minibatches):
      raise ValueError(f"{_GRPO_KEY}num_minibatches={self.num_minibatches!r} must be a positive "
                       "int, or None for one minibatch per config.training.samples_per_step "
                       "samples.")
    if self.aggregation not in AGGREGATIONS:
      raise ValueError(f"{_GRPO_KEY}aggregation={self.aggregation!r} is not one of "
                       f"{AGGREGATIONS}.")
    if self.aggregation == "constant" and not (self.constant_normalizer or 0) > 0:
      raise ValueError(f"{_GRPO_KEY}aggregation='constant' needs {_GRPO_KEY}constant_normalizer "
                       "> 0 "
                       f"(got {self.constant_normalizer!r}); set it to the generation token "
                       "budget, as Dr. GRPO does.")
    if self.importance_sampling not in IMPORTANCE_SAMPLING_MODES:
      raise ValueError(f"{_GRPO_KEY}importance_sampling={self.importance_sampling!r} is not one of "
                       f"{IMPORTANCE_SAMPLING_MODES}.")
    if not self.importance_sampling_cap > 1:
      raise ValueError(f"{_GRPO_KEY}importance_sampling_cap={self.importance_sampling_cap} must be "
                       "> 1, e.g. 2.0.")
    check_temperature(self.temperature)

  @property
  def upper_clip_epsilon(self):
    return self.clip_epsilon if self.clip_epsilon_high is None else self.clip_epsilon_high

  @property
  def uses_reference(self):
    """Whether a frozen reference copy is kept (and reference logprobs computed per batch)."""
    return self.kl_weight > 0 or self.keep_reference
