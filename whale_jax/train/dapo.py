"""DAPO's batch-shaping pieces (Yu et al. 2025) as pure numpy functions over rewards and lengths.

Shape letters: P prompts (groups), G samples per prompt, N samples.

Dynamic sampling: a group whose rewards are all equal has advantages of exactly 0 and adds
nothing to the policy gradient, so DAPO keeps sampling prompts until the batch holds the wanted
number of groups with at least two different rewards. `informative_groups` and
`select_informative` are the filter; the sampling rounds that refill the batch live in the
recipe, which owns the rollouts and counts them.

Overlong filtering: samples cut off at the generation limit get loss mask 0 (they are neither
rewarded nor punished for an answer they never finished): `overlong_filter_mask`.

Soft overlong punishment (DAPO eq. 13), added to the task reward, with L_max the generation
limit and L_cache the length of the punishment interval:
  R_length(y) = 0                                   |y| <= L_max - L_cache
                ((L_max - L_cache) - |y|) / L_cache  L_max - L_cache < |y| <= L_max
                -1                                  L_max < |y|
DAPO's run used L_max = 20,480 and L_cache = 4,096 (a 16,384-token expected maximum).
"""
import numpy as np


def informative_groups(group_rewards):
  """[P] bool: True for a group with at least two different rewards (exact comparison).

  Args:
    group_rewards: one sequence of rewards per group; groups may differ in size (e.g. after
      infrastructure failures were dropped). A group of fewer than 2 rewards is uninformative.
  """
  informative = []
  for rewards in group_rewards:
    rewards = np.asarray(rewards, np.float64).reshape(-1)
    informative.append(bool(rewards.size >= 2 and np.any(rewards != rewards[0])))
  return np.asarray(informative, bool)


def select_informative(group_rewards, num_groups=None):
  """Indices of the informative groups, in order, at most num_groups of them (None = all)."""
  if num_groups is not None and (not isinstance(num_groups, int) or num_groups < 0):
    raise ValueError(f"num_groups={num_groups!r} must be a non-negative int or None.")
  indices = np.flatnonzero(informative_groups(group_rewards))
  return indices if num_groups is None else indices[:num_groups]


def _lengths(lengths):
  lengths = np.asarray(lengths)
  if not np.issubdtype(lengths.dtype, np.integer) or np.any(lengths < 0):
    raise ValueError(f"response lengths must be non-negative integers (tokens), got "
                     f"{lengths.dtype} values {lengths.reshape(-1)[:8].tolist()}.")
  return lengths


def overlong_filter_mask(lengths, max_length, truncated=None):
  """[N] float64 loss-mask factor: 0 for a sample cut off at the limit, 1 otherwise.

  Args:
    lengths: [N] generated tokens per sample.
    max_length: the generation limit L_max (tokens).
    truncated: optional [N] bool, the sampler's own word that a sample hit the limit (e.g. a
      finish reason of "length"); when None, a sample is truncated when lengths >= max_length.
  """
  if not isinstance(max_length, int) or max_length < 1:
    raise ValueError(f"max_length={max_length!r} must be a positive int (tokens).")
  lengths = _lengths(lengths)
  cut = lengths >= max_length if truncated is None else np.asarray(truncated, bool)
  if cut.shape != lengths.shape:
    raise ValueError(f"truncated has shape {cut.shape} but lengths has {lengths.shape}.")
  return np.where(cut, 0.0, 1.0)


def soft_overlong_penalty(lengths, max_length, cache_length):
  """[N] float64 R_length of DAPO eq. 13 (module docstring); add it to the task reward."""
  if not isinstance(max_length, int) or not isinstance(cache_length, int) or not (
      0 < cache_length <= max_length):
    raise ValueError(f"soft overlong penalty needs ints 0 < cache_length <= max_length; got "
                     f"cache_length={cache_length!r}, max_length={max_length!r} (DAPO: "
                     "4096 and 20480).")
  lengths = _lengths(lengths).astype(np.float64)
  start = max_length - cache_length
  ramp = (start - lengths) / cache_length
  return np.where(lengths <= start, 0.0, np.where(lengths <= max_length, ramp, -1.0))
