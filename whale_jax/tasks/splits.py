"""Seeded, disjoint, reproducible splits of a pool of instances.

The four splits of the seed papers: "weight" (model updates), "harness" (harness search),
"validation" (the gate), "test" (reported, seen by neither step).

  splits = split_instances(pool, {"weight": 512, "harness": 64, "validation": 64,
                                  "test": 128}, seed=0)

Instances are first made unique: two instances with the same public fields (the same
question asked twice, e.g. across NQ and HotpotQA, or a generator repeating itself) count as
one, so no problem a harness has seen during search can reappear in the test split. A split
may come from its own files (`fixed`, e.g. the seven SearchQA test sets); then it is drawn
from them, and everything in it is removed from the pool the other splits share. A size of
-1 takes everything left over (at most one split may ask for it).
"""
import numpy as np

from whale_jax import typed_config

from whale_jax.tasks.domain import public_fingerprint

SPLIT_NAMES = ("weight", "harness", "validation", "test")


def unique_instances(instances):
  """instances without repeats (same public fields), first occurrence kept.

  Raises ValueError when two different instances share an id.
  """
  fingerprint_of_id, seen_fingerprints, unique = {}, set(), []
  for instance in instances:
    fingerprint = public_fingerprint(instance)
    if instance.id in fingerprint_of_id and fingerprint_of_id[instance.id] != fingerprint:
      raise ValueError(f"Two different instances share the id {instance.id!r}; ids must be "
                       "unique (give each source file its own name or prefix).")
    if fingerprint in seen_fingerprints:
      continue
    fingerprint_of_id[instance.id] = fingerprint
    seen_fingerprints.add(fingerprint)
    unique.append(instance)
  return unique


def check_sizes(sizes):
  """Raises ValueError, naming split_sizes, unless sizes are known splits' sizes."""
  for name in sizes:
    if name not in SPLIT_NAMES:
      raise ValueError(f"split_sizes[{name!r}] is not a split"
                       f"{typed_config.did_you_mean(name, SPLIT_NAMES)}; the splits are "
                       f"{', '.join(SPLIT_NAMES)}.")
  for name, size in sizes.items():
    if not isinstance(size, int) or size < -1:
      raise ValueError(f"split_sizes[{name!r}]={size!r} must be an int >= 0, or -1 for "
                       "everything left over.")
  if sum(size == -1 for size in sizes.values()) > 1:
    raise ValueError(f"split_sizes={dict(sizes)} asks for the rest (-1) in more than one "
                     "split; give all but one of them a size.")


def _draw(instances, size, random_state, label):
  if size == -1:
    size = len(instances)
  if size > len(instances):
    raise ValueError(f"{label} needs {size} instances but only {len(instances)} distinct ones "
                     "are available; lower split_sizes or bring more data (or generate a "
                     "larger pool).")
  order = random_state.permutation(len(instances))
  return [instances[i] for i in order[:size]], [instances[i] for i in order[size:]]


def split_instances(pool, sizes, seed, fixed=None):
  """{split name: [Instance]} for every split in SPLIT_NAMES (absent sizes give empty lists).

  Args:
    pool: instances the splits without their own source share.
    sizes: {split name: number of instances, or -1 for the rest of the pool}.
    seed: the same seed, pool and sizes give the same splits.
    fixed: {split name: [Instance]} for splits drawn from their own source.
  """
  sizes = dict(sizes)
  fixed = dict(fixed or {})
  check_sizes(sizes)
  check_sizes({name: 0 for name in fixed})
  random_state = np.random.default_rng(seed)
  splits, taken = {}, set()
  for name in SPLIT_NAMES:
    if name in fixed:
      source = [i for i in unique_instances(fixed[name]) if public_fingerprint(i) not in taken]
      splits[name], _ = _draw(source, sizes.get(name, -1), random_state,
                              f"split {name!r} (own files)")
      taken.update(public_fingerprint(i) for i in splits[name])
  remaining = [i for i in unique_instances(pool) if public_fingerprint(i) not in taken]
  rest_name = next((n for n in SPLIT_NAMES if n not in fixed and sizes.get(n) == -1), None)
  for name in SPLIT_NAMES:
    if name in fixed or name == rest_name:
      continue
    splits[name], remaining = _draw(remaining, sizes.get(name, 0), random_state, f"split {name!r}")
  if rest_name is not None:
    splits[rest_name] = remaining
  unique_instances([i for name in SPLIT_NAMES for i in splits[name]])  # ids unique overall
  return {name: splits[name] for name in SPLIT_NAMES}
