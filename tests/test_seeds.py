"""derive_seed against a reimplementation of its documented scheme, and the property that two
call sites never collide: over every purpose, the same run seed and parts give distinct seeds."""
import hashlib
import itertools
import json

import numpy as np
import pytest

from whale_jax import seeds
from whale_jax.search import gate


def reference_seed(run_seed, purpose, *parts):
  """The module docstring's scheme, written out: JSON array, SHA-256, 8 bytes LE, top bit 0."""
  text = json.dumps(["whale_jax.seed/1", run_seed, purpose, *parts], separators=(",", ":"))
  value = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
  return value % 2**63


def test_matches_the_documented_scheme():
  assert seeds.derive_seed(0, "episode", ("weight", 3), "q17", 2) == reference_seed(
      0, "episode", ["weight", 3], "q17", 2)
  assert seeds.derive_seed(7, "sample_key", "q1") == reference_seed(7, "sample_key", "q1")
  assert 0 <= seeds.derive_seed(2**40, "data_order", 5) < 2**63


def test_two_call_sites_never_collide_for_the_same_inputs():
  inputs = [(run_seed, parts) for run_seed in (0, 1, 12345)
            for parts in ((), (0,), (1,), ("q1",), ("grpo", 3, 0), (("weight", 3), "q1", 2))]
  for run_seed, parts in inputs:
    values = [seeds.derive_seed(run_seed, purpose, *parts) for purpose in seeds.PURPOSES]
    assert len(set(values)) == len(seeds.PURPOSES), (run_seed, parts)


def test_parts_are_not_confused_by_their_spelling():
  distinct = [("ab",), ("a", "b"), (("a", "b"),), (1,), ("1",), (1, 2), (12,), ((1,), 2)]
  values = [seeds.derive_seed(0, "episode", *parts) for parts in distinct]
  assert len(set(values)) == len(distinct)
  pairs = [(a, b) for a, b in itertools.combinations(range(8), 2)]
  assert len({seeds.derive_seed(a, "data_order", b) for a, b in pairs}) == len(pairs)


def test_unknown_purposes_and_parts_are_refused():
  with pytest.raises(ValueError, match="PURPOSES"):
    seeds.derive_seed(0, "episodes", 1)
  with pytest.raises(TypeError, match="parts"):
    seeds.derive_seed(0, "episode", 1.5)


def test_the_gate_bootstrap_resamples_from_its_own_purpose():
  """The bootstrap interval, recomputed here from reference_seed(run seed, "gate_bootstrap")."""
  rng = np.random.default_rng(0)
  incumbent = rng.integers(0, 2, 60).astype(float)
  candidate = np.where(rng.random(60) < 0.3, 1.0, incumbent)
  decision = gate.decide(incumbent, candidate, rule="bootstrap", alpha=0.1, num_bootstrap=500,
                         seed=5)
  difference = candidate - incumbent
  resamples = np.random.default_rng(reference_seed(5, "gate_bootstrap")).integers(
      0, 60, size=(500, 60))
  low, high = np.quantile(difference[resamples].mean(axis=1), [0.1, 0.9])
  assert decision.interval == (float(low), float(high))
