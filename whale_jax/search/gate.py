"""The validation gate: does a candidate harness beat the incumbent on the same tasks?

Both harnesses are evaluated on identical validation task ids, at the same checkpoint, with
the same seeds (common random numbers), so per-task scores are paired. Rules:

  "strict"     accept iff the candidate's mean is strictly higher; ties keep the incumbent
               (VACE's rule).
  "sign_test"  exact one-sided sign test on the discordant tasks (candidate better vs worse):
               accept iff p < alpha and the mean difference is at least min_effect.
  "bootstrap"  paired bootstrap of the mean difference: accept iff its lower (alpha) quantile
               is above min_effect. Its resamples are drawn from
               seeds.derive_seed(seed, "gate_bootstrap"), seed being the run seed.

Every decision is a GateDecision with n, means, difference, interval and p-value, so it can be
logged as one JSON row.
"""
import dataclasses
import math

import numpy as np

from whale_jax import seeds as seeds_lib

RULES = ("strict", "sign_test", "bootstrap")


@dataclasses.dataclass(frozen=True)
class GateDecision:
  rule: str
  accepted: bool
  n: int
  incumbent_mean: float
  candidate_mean: float
  mean_difference: float
  interval: tuple[float, float] | None
  p_value: float | None
  num_better: int
  num_worse: int
  reason: str

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


def _paired(incumbent, candidate):
  """Aligns two {task_id: score} dicts (or equal-length sequences) into float arrays."""
  if isinstance(incumbent, dict) != isinstance(candidate, dict):
    raise TypeError("Pass both score sets as {task_id: score} dicts or both as sequences.")
  if isinstance(incumbent, dict):
    if set(incumbent) != set(candidate):
      missing = sorted(set(incumbent) ^ set(candidate), key=str)[:5]
      raise ValueError(f"The gate compares scores on identical task ids; these ids are in only "
                       f"one of the two sets: {missing}. Evaluate both on the same tasks.")
    ids = sorted(incumbent, key=str)
    incumbent = [incumbent[i] for i in ids]
    candidate = [candidate[i] for i in ids]
  incumbent = np.asarray(incumbent, np.float64)
  candidate = np.asarray(candidate, np.float64)
  if incumbent.shape != candidate.shape or incumbent.ndim != 1 or not len(incumbent):
    raise ValueError(f"Score vectors must be 1-D, non-empty and of equal length; got shapes "
                     f"{incumbent.shape} and {candidate.shape}.")
  return incumbent, candidate


def sign_test_p_value(num_better, num_worse):
  """One-sided exact sign test: P(Binomial(n, 1/2) >= num_better), n = discordant pairs."""
  n = num_better + num_worse
  if n == 0:
    return 1.0
  return sum(math.comb(n, k) for k in range(num_better, n + 1)) / 2**n


def decide(incumbent_scores, candidate_scores, rule="strict", alpha=0.05, min_effect=0.0,
           num_bootstrap=10_000, seed=0) -> GateDecision:
  """Compares paired per-task scores; see the module docstring for the rules."""
  if rule not in RULES:
    raise ValueError(f"gate rule={rule!r} is unknown; use one of {RULES}.")
  if not 0 < alpha < 1:
    raise ValueError(f"gate alpha={alpha} must be in (0, 1).")
  incumbent, candidate = _paired(incumbent_scores, candidate_scores)
  difference = candidate - incumbent
  mean_difference = float(difference.mean())
  num_better, num_worse = int((difference > 0).sum()), int((difference < 0).sum())
  common = dict(rule=rule, n=len(difference), incumbent_mean=float(incumbent.mean()),
                candidate_mean=float(candidate.mean()), mean_difference=mean_difference,
                num_better=num_better, num_worse=num_worse)
  if rule == "strict":
    accepted = mean_difference > 0
    reason = ("candidate mean is higher" if accepted else
              "tie keeps the incumbent" if mean_difference == 0 else "candidate mean is lower")
    return GateDecision(accepted=accepted, interval=None, p_value=None, reason=reason, **common)
  if rule == "sign_test":
    p_value = sign_test_p_value(num_better, num_worse)
    accepted = p_value < alpha and mean_difference >= min_effect and mean_difference > 0
    reason = (f"sign test p={p_value:.4g} on {num_better + num_worse} discordant tasks "
              f"(alpha={alpha}), mean difference {mean_difference:+.4f} "
              f"(min_effect={min_effect})")
    return GateDecision(accepted=accepted, interval=None, p_value=p_value, reason=reason,
                        **common)
  rng = np.random.default_rng(seeds_lib.derive_seed(seed, "gate_bootstrap"))
  samples = rng.integers(0, len(difference), size=(num_bootstrap, len(difference)))
  means = difference[samples].mean(axis=1)
  low, high = np.quantile(means, [alpha, 1 - alpha])
  p_value = float((means <= 0).mean())
  accepted = bool(low > min_effect)
  reason = (f"bootstrap {1 - alpha:.0%} lower bound {low:+.4f} vs min_effect={min_effect}")
  return GateDecision(accepted=accepted, interval=(float(low), float(high)), p_value=p_value,
                      reason=reason, **common)
