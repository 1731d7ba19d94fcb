"""Group-relative advantages, computed exactly: float64 numpy on the host.

Shape letters: P prompts (groups), G samples per prompt.

For a group of rewards r_1 .. r_G with mean m = (1/G) sum_j r_j:
  "grpo"    A_i = (r_i - m) / (s + epsilon),  s = sample standard deviation (ddof = 1)
  "drgrpo"  A_i = r_i - m                      (Dr. GRPO: no division by s)
  "rloo"    A_i = r_i - (1/(G-1)) sum_{j != i} r_j = G/(G-1) (r_i - m)   (leave-one-out)
A group whose rewards are all equal gets advantages of exactly 0 under every estimator: it is
detected by exact comparison and set to 0, because even float64 does not return the mean of
three 0.1s as 0.1 (0.1 + 0.1 + 0.1 = 0.30000000000000004).

On the standard deviation: the GRPO paper (Shao et al. 2024) writes std(r) without saying
which; verl's and TRL's GRPO use torch.std, whose default is the sample standard deviation
(ddof = 1), and so does this module. With G = 8 the two differ by sqrt(8/7) = 1.069.
"""
import numpy as np

ESTIMATORS = ("grpo", "drgrpo", "rloo")


def _as_groups(rewards):
  rewards = np.asarray(rewards, np.float64)
  if rewards.ndim != 2:
    raise ValueError(f"rewards has shape {rewards.shape}; pass [P, G]: one row per prompt, "
                     "one column per sample of its group.")
  if not np.all(np.isfinite(rewards)):
    rows = sorted({int(p) for p in np.argwhere(~np.isfinite(rewards))[:, 0]})
    raise ValueError(f"rewards of groups {rows} are not finite ({rewards[rows[0]].tolist()}); "
                     "a verifier must return a finite number.")
  return rewards


def constant_groups(rewards):
  """[P] bool: True where every reward of the group equals its first (exact comparison)."""
  rewards = _as_groups(rewards)
  return np.all(rewards == rewards[:, :1], axis=1)


def group_advantages(rewards, estimator="grpo", epsilon=1e-6):
  """Advantages [P, G] float64 of rewards [P, G] (see the module docstring).

  Args:
    rewards: [P, G] numbers (any float dtype; converted to float64 first).
    estimator: one of ESTIMATORS.
    epsilon: added to the standard deviation ("grpo" only).
  """
  if estimator not in ESTIMATORS:
    raise ValueError(f"advantage estimator={estimator!r} is not one of {ESTIMATORS}.")
  rewards = _as_groups(rewards)
  group_size = rewards.shape[1]
  if estimator in ("grpo", "rloo") and group_size < 2:
    raise ValueError(f"advantage estimator={estimator!r} needs at least 2 samples per group; "
                     f"got G={group_size}. Sample more per prompt or use 'drgrpo'.")
  centered = rewards - np.mean(rewards, axis=1, keepdims=True)
  if estimator == "drgrpo":
    advantages = centered
  elif estimator == "rloo":
    advantages = centered * (group_size / (group_size - 1))
  else:
    advantages = centered / (np.std(rewards, axis=1, ddof=1, keepdims=True) + epsilon)
  advantages[constant_groups(rewards)] = 0.0
  return advantages
