"""WHALE: alternate online RSFT on the weights with Meta-Harness search on the harness.

Fixed schedule (SPEC 1.2): each cycle trains E epochs of online RSFT under the incumbent
harness, then runs I Meta-Harness iterations (M candidates each, the incoming harness's
evaluation counting as the first) at the updated weights and adopts the accepted harness.
The data cursor persists across cycles; the last cycle ends after its weight phase once the
weight budget is spent.

Adaptive schedule (SPEC 1.3): a weight phase stops when the sliding-window mean of the
training reward has set no new phase best for `patience` steps, after at least a minimum
number of steps (window = minimum length = patience = 0.2 epoch by default, so a phase may
end after 0.2 epoch; see adaptive_stop); a harness phase runs at least 6 iterations (the
incoming harness's evaluation and 5 proposer iterations), stops after 2 without a new best,
and runs at most max_iterations = 15 proposer iterations (16 with the incoming evaluation).

Budgets: the weight budget in epochs (total_weight_epochs) and, optionally, a budget of
training rollouts (weight + harness) shared with the baselines for equal-budget comparisons;
a weight step starts only when its rollouts fit in what is left, and a harness phase is
shortened so that it does not run past the rollout budget.

Proposer: as in the paper, the configs' default is the CLI coding agent (one jailed
`claude -p` session per iteration writing the M candidates; search/cli_agent.py); the
tool-calling agent over an OpenAI-compatible endpoint, a one-shot model proposer and the
offline edit library (smoke runs) are the alternatives. The run reports the best (weights,
harness) pair by test mean@k as the paper does, but also the final pair. Every paper
setting and where a config departs: docs/paper_settings.md.
"""
import math

from whale_jax.algorithms import loop


def remaining_rollouts(run, budget):
  return math.inf if not budget else budget - run.counts.training


def weight_steps_that_fit(run, budget):
  """How many more weight steps' rollouts (prompt batch x G each) fit in the budget."""
  if not budget:
    return math.inf
  return remaining_rollouts(run, budget) // (run.loop.prompt_batch * run.loop.num_samples)


def weight_step_fits(run, budget):
  return weight_steps_that_fit(run, budget) >= 1


def search_budget(run, iterations, budget_rollouts):
  """Iterations of a harness phase that fit in the remaining rollout budget (>= 0)."""
  remaining = remaining_rollouts(run, budget_rollouts)
  per_candidate = len(run.splits["harness"])
  if remaining == math.inf:
    return iterations
  if remaining < per_candidate:
    return 0
  fits = 1 + int((remaining - per_candidate) // (per_candidate * run.loop.candidates_per_iteration))
  return min(iterations, fits)


def adaptive_stop(run, window, patience, minimum=None):
  """True when the weight phase should end (SPEC 1.3).

  Steps s = 1..n of the phase have window means m_s = mean of the rewards of steps
  max(1, s - window + 1) .. s. The phase's best step b is the last step whose mean exceeded
  every earlier mean, or 0 when none exceeded m_1 (m_1 is the level the phase starts from).
  The phase ends once n >= minimum (default: window) and n - b >= patience, so with window =
  minimum = patience = P it can end after P steps, when the reward never rose above its first
  step's.
  """
  rewards = run.state.phase_rewards
  minimum = window if minimum is None else minimum
  if len(rewards) < minimum:
    return False
  best_step, best = 0, None
  for step in range(1, len(rewards) + 1):
    recent = rewards[max(0, step - window):step]
    mean = sum(recent) / len(recent)
    if best is None:
      best = mean
    elif mean > best:
      best_step, best = step, mean
  return len(rewards) - best_step >= patience


def run_whale(run, whale_config):
  """Runs (or resumes) WHALE; returns the run summary."""
  state = run.state
  total_steps = loop.steps_for_epochs(run, whale_config.total_weight_epochs)
  phase_steps = loop.steps_for_epochs(run, whale_config.weight_epochs)
  window = loop.steps_for_epochs(run, whale_config.window_epochs)
  if state.phase == "start":
    loop.maybe_evaluate(run, force=True)
    loop.start_phase(run, "weight")
    loop.checkpoint(run)
  while not state.done:
    budget_left = weight_step_fits(run, whale_config.budget_rollouts)
    if state.phase == "weight":
      steps = min(phase_steps, total_steps - state.weight_steps + state.phase_steps)
      stop = None
      if whale_config.adaptive:
        steps = total_steps - state.weight_steps + state.phase_steps
        stop = lambda run: adaptive_stop(run, window, window)
      if whale_config.budget_rollouts:
        previous = stop
        stop = lambda run: (not weight_step_fits(run, whale_config.budget_rollouts) or
                            (previous is not None and previous(run)))
      if budget_left:
        loop.weight_steps(run, loop.incumbent(run), steps, loop.rsft_step,
                          label=f"cycle {state.cycle} weights", stop=stop)
      out_of_budget = (state.weight_steps >= total_steps or
                       state.cycle + 1 >= whale_config.max_cycles or
                       search_budget(run, 1, whale_config.budget_rollouts) < 1)
      if out_of_budget:
        state.done = True
        break
      loop.start_phase(run, "harness")
      loop.checkpoint(run)
    if state.phase == "harness":
      label = f"cycle_{state.cycle:03d}"
      if whale_config.adaptive:
        # meta_harness counts the incoming evaluation as iteration 1; max_iterations counts
        # proposer iterations.
        budget = dict(min_iterations=whale_config.min_iterations,
                      patience=whale_config.patience_iterations,
                      max_iterations=search_budget(run, whale_config.max_iterations + 1,
                                                   whale_config.budget_rollouts))
        budget["min_iterations"] = min(budget["min_iterations"], budget["max_iterations"])
      else:
        budget = dict(iterations=search_budget(run, run.loop.search_iterations,
                                               whale_config.budget_rollouts))
      if min(v for v in budget.values() if v is not None) >= 1:
        result = loop.harness_search(run, loop.incumbent(run), label,
                                     prompt_only=whale_config.prompt_only, **budget)
        loop.set_incumbent(run, result.accepted)
      state.cycle += 1
      loop.maybe_evaluate(run)
      loop.start_phase(run, "weight")
      loop.checkpoint(run)
  return finish(run, "whale_adaptive" if whale_config.adaptive else "whale")


def finish(run, recipe):
  """Final test evaluation (unless one was just made), summary, checkpoint."""
  evaluations = run.state.evaluations
  last = evaluations[-1] if evaluations else None
  if (last is None or last["rollouts"] != run.counts.training or
      last["weights_id"] != run.policy.weights_id or
      last["harness_hash"] != loop.incumbent(run).hash):
    loop.evaluate_test(run, label="final")
  run.state.done = True
  run.state.phase = "done"
  loop.checkpoint(run)
  result = loop.summary(run, recipe)
  run.log.write_summary(result)
  return result
