"""VACE: GRPO blocks alternating with one trajectory-driven harness candidate, gated on
validation at the updated weights (SPEC 2.2).

Each cycle: a block of GRPO steps under the incumbent harness; one candidate proposed from
that block's own trajectories (the proposer sees them instead of archived episodes); the
candidate replaces the incumbent only if it beats it on the validation split at the updated
checkpoint (same task ids, same seeds; strict improvement of the mean by default, ties keep
the incumbent). After the last cycle the (weights, harness) pair with the best validation
mean is reported, with its test mean@k.

With gated=False this is the ungated alternation baseline ("WHALE-style" in VACE's paper):
every runnable candidate is adopted.

Departures from the paper: the optimizer proposes with whale_jax's proposers rather than
HarnessEvolve's agent; validation means of pairs come from the gate evaluations (and one
validation evaluation per cycle when ungated).
"""
import functools
import json
import os

from whale_jax import atomic_files
from whale_jax.algorithms import loop
from whale_jax.algorithms import whale
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.search import evaluation as search_evaluation
from whale_jax.search import single_proposal


def _block_directory(run, cycle):
  return os.path.join(run.host_dir, "vace", f"cycle_{cycle:03d}")


def _grpo_step_recording(run, harness, budget_rollouts=0):
  """grpo_step that also saves the step's scored trajectories, so that the proposal after
  the block sees them even when the run was resumed in between. Refill rounds of dynamic
  sampling start only within budget_rollouts (0 = no budget)."""
  metrics = loop.grpo_step(run, harness, budget_rollouts)
  directory = _block_directory(run, run.state.cycle)
  rows = [json.dumps({"score": score, "trajectory": trajectory.to_json()})
          for _, trajectory, score in run.last_batch.flat()]
  atomic_files.write_text(
      os.path.join(directory, f"step_{run.state.phase_steps:04d}.jsonl"),
      "".join(row + "\n" for row in rows))
  return metrics


def _block_episodes(run, cycle):
  """[(Trajectory, score)] of the cycle's GRPO block, read back from disk."""
  directory = _block_directory(run, cycle)
  episodes = []
  if os.path.isdir(directory):
    for name in sorted(os.listdir(directory)):
      with open(os.path.join(directory, name)) as f:
        for line in f:
          row = json.loads(line)
          episodes.append((trajectory_lib.Trajectory.from_json(row["trajectory"]),
                           row["score"]))
  return episodes


def _validation_mean(run, harness):
  evaluate = loop.make_evaluate(run)
  instances = run.splits["validation"]
  evaluation = evaluate(harness, instances, search_evaluation.sample_keys(instances,
                                                                          run.loop.seed))
  run.counts.add("harness", evaluation.rollouts, evaluation.generated_tokens)
  return evaluation.success_rate


def run_vace(run, vace_config):
  """Runs (or resumes) VACE (or the ungated alternation); returns the run summary."""
  state = run.state
  pairs = state.notes.setdefault("pairs", [])
  if state.phase == "start":
    loop.maybe_evaluate(run, force=True)
    loop.start_phase(run, "weight")
    loop.checkpoint(run)
  while state.cycle < vace_config.num_cycles and not state.done:
    if whale.remaining_rollouts(run, vace_config.budget_rollouts) <= 0:
      break
    if state.phase == "weight":
      stop = None
      if vace_config.budget_rollouts:
        stop = lambda run: whale.remaining_rollouts(run, vace_config.budget_rollouts) <= 0
      loop.weight_steps(run, loop.incumbent(run), vace_config.block_steps,
                        functools.partial(_grpo_step_recording,
                                          budget_rollouts=vace_config.budget_rollouts),
                        label=f"cycle {state.cycle} GRPO", stop=stop)
      loop.start_phase(run, "harness")
      loop.checkpoint(run)
    if state.phase == "harness":
      current = loop.incumbent(run)
      label = f"vace_cycle_{state.cycle:03d}"
      archive_dir = os.path.join(run.host_dir, "archive", label)
      candidate, _ = single_proposal.propose_one(
          current, loop.bind_proposer(run, archive_dir, loop.make_evaluate(run)), run.domain,
          archive_dir, episodes=_block_episodes(run, state.cycle), iteration=state.cycle + 2)
      loop.count_agent_sessions(run, archive_dir)
      validation = None
      if candidate is not None and vace_config.gated:
        result = loop.gate(run, current, candidate, label)
        if result.decision.accepted:
          loop.set_incumbent(run, candidate)
          validation = result.decision.candidate_mean
        else:
          validation = result.decision.incumbent_mean
      elif candidate is not None:
        loop.set_incumbent(run, candidate)
      if validation is None:
        validation = _validation_mean(run, loop.incumbent(run))
      state.cycle += 1
      record = loop.evaluate_test(run, label=label)
      pairs.append({"cycle": state.cycle, "weights_id": run.policy.weights_id,
                    "harness_hash": loop.incumbent(run).hash, "validation_mean": validation,
                    "test_mean": record["test_mean"]})
      loop.start_phase(run, "weight")
      loop.checkpoint(run)
  result = whale.finish(run, "vace" if vace_config.gated else "ungated")
  if pairs:
    chosen = max(pairs, key=lambda pair: (pair["validation_mean"], -pair["cycle"]))
    result["selected_by_validation"] = chosen
    run.log.write_summary(result)
  return result
