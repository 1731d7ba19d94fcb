"""The one way whale_jax derives a seed: episodes, sample keys, data orders, task draws, shuffles.

  derive_seed(run_seed, "episode", ("weight", 3), "q17", 2)    # an int in [0, 2**63)

What is folded in, in this order: a version tag ("whale_jax.seed/1"), the run seed (an int),
the purpose (a string naming the call site, one of PURPOSES), then the call site's own parts
(ints, strings, or tuples/lists of them), all written as one compact JSON array, e.g.
["whale_jax.seed/1",0,"episode",["weight",3],"q17",2]. Its SHA-256 digest's first 8 bytes,
read little-endian, with the top bit cleared, are the seed: a non-negative 64-bit signed
integer (so numpy, JSON and servers take it as it is).

JSON writes each value with its type and its nesting, so two different (run seed, purpose,
parts) never encode to the same text; two different call sites use different purposes, so
they never share an input, and their seeds coincide only if SHA-256 truncated to 63 bits
does (about 1 in 10**19 per pair). A seed depends on nothing else: not the host, the worker,
the batch, or the time, so a resumed run and every host of a multi-host run draw the same.
"""
import hashlib
import json

VERSION = "whale_jax.seed/1"
PURPOSES = (
    "episode",          # rollouts/grouped.py: (seed key, task id, sample index)
    "sample_key",       # search/evaluation.py: (task id,) one per task, all candidates alike
    "data_order",       # algorithms/loop.py: (epoch,) the weight split's order
    "minibatch_order",  # algorithms/policy.py: (updates, epoch) the samples' order
    "training_tasks",   # algorithms/harness_learning.py: (phase, domain, context index)
    "diagnostic_draw",  # algorithms/harness_learning.py: (label, round)
    "proposer_sample",  # algorithms/harness_learning.py: (phase, step or label, index)
    "edit_choice",      # search/edit_library.py: (iteration[, session], incumbent hash)
    "proposer_call",    # search/model_proposer.py: (iteration[, session], call index)
    "gate_bootstrap",   # search/gate.py: () the bootstrap rule's resamples
    "warm_start_batch",  # algorithms/warm_start.py: (step,) the teacher samples of a step
    "llm_call",         # harness/host_calls.py: run seed = the episode seed; (call index,)
    "harness_random",   # harness/runtime.py: run seed = the episode seed; (task id,) the
                        # harness's `random` module
)


def _checked(part):
  if isinstance(part, bool) or not isinstance(part, (int, str, tuple, list)):
    raise TypeError(f"derive_seed parts are ints, strings, or tuples of them; got "
                    f"{type(part).__name__} {part!r}.")
  if isinstance(part, (tuple, list)):
    return [_checked(item) for item in part]
  return part


def derive_seed(run_seed, purpose, *parts):
  """The seed of (run_seed, purpose, *parts); see the module docstring."""
  if purpose not in PURPOSES:
    raise ValueError(f"derive_seed purpose={purpose!r} is not one of {PURPOSES}; a new call site "
                     "adds its purpose to seeds.PURPOSES.")
  text = json.dumps([VERSION, _checked(int(run_seed)), purpose, *map(_checked, parts)],
                    separators=(",", ":"), ensure_ascii=False)
  digest = hashlib.sha256(text.encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "little") & (2**63 - 1)
