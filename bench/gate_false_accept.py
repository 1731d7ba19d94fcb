r"""False-accept rate of each validation-gate rule when the candidate equals the incumbent.

Two identical harnesses are scored on n validation tasks. Each task has its own success
probability (Beta(a, b) across tasks, as real task sets have easy and hard items); each
evaluation draws Bernoulli outcomes. With common random numbers (same seeds for both) the two
score vectors are identical; without them (independent seeds) they differ by sampling noise
only. A false accept is accepting the candidate.

  python bench/gate_false_accept.py --trials=2000 --num_tasks=64
"""
from absl import app
from absl import flags
import numpy as np

from whale_jax.search import gate

_TRIALS = flags.DEFINE_integer("trials", 2000, "Simulated gate decisions per rule.")
_NUM_TASKS = flags.DEFINE_integer("num_tasks", 64, "Validation tasks per decision.")
_ALPHA = flags.DEFINE_float("alpha", 0.05, "Significance level of the paired rules.")


def false_accept_rates(trials, num_tasks, alpha, common_random_numbers, seed=0):
  rng = np.random.default_rng(seed)
  accepts = {rule: 0 for rule in gate.RULES}
  for trial in range(trials):
    probabilities = rng.beta(0.7, 0.7, size=num_tasks)
    incumbent = (rng.random(num_tasks) < probabilities).astype(float)
    if common_random_numbers:
      candidate = incumbent.copy()
    else:
      candidate = (rng.random(num_tasks) < probabilities).astype(float)
    for rule in gate.RULES:
      decision = gate.decide(incumbent, candidate, rule=rule, alpha=alpha,
                             num_bootstrap=2000, seed=trial)
      accepts[rule] += decision.accepted
  return {rule: count / trials for rule, count in accepts.items()}


def main(argv):
  del argv
  for crn in (True, False):
    rates = false_accept_rates(_TRIALS.value, _NUM_TASKS.value, _ALPHA.value, crn)
    label = "same seeds (CRN)" if crn else "independent seeds"
    print(f"{label:18s} " + "  ".join(f"{rule}={rate:.3f}" for rule, rate in rates.items()))


if __name__ == "__main__":
  app.run(main)
