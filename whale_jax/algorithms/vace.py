"""VACE: GRPO blocks alternating with one trajectory-driven harness candidate, gated on
validation at the updated weights (SPEC 2.2), and the paper's gated baselines.

Schedules (config.vace.schedule):
  alternate     VACE. Each cycle: a block of GRPO steps under the incumbent harness; one
                candidate proposed from that block's own trajectories (the proposer sees them
                instead of archived episodes); the candidate replaces the incumbent only if it
                beats it on the validation split at the updated checkpoint (same task ids,
                same seeds; strict improvement of the mean by default, ties keep the
                incumbent). With gated=False this is the ungated alternation ("WHALE-style"
                in VACE's paper): every runnable candidate is adopted; the gate still runs
                and is logged (adopted=True), so the log says what each adoption the gate
                would have refused cost on validation.
  harness_only  the same gated revisions at the initial weights, with no GRPO step at all:
                each cycle runs one diagnostic batch (prompt_batch weight-split tasks x
                num_samples, counted as harness rollouts) under the incumbent, proposes one
                candidate from it and gates it.
  harness_first SIA-style: the harness_only phase (num_cycles gated revisions at W0), then
                num_cycles blocks of block_steps GRPO steps under the harness it kept, which
                no longer changes; after each block the pair is scored on validation.
  rl_only       RL alone (recipe "rl_only"): num_cycles blocks of block_steps GRPO steps under
                the initial harness, the pair scored on validation after each block.

Final pair: the initial (weights, harness) pair, scored on validation before anything runs,
and every cycle (and every RL block of harness_first and rl_only) record their pair with its
validation mean (the gate's mean of the kept harness; one validation evaluation after an RL
block). The reported pair is the one with the best validation
mean seen (ties: the earliest); its test mean@k (config.loop.eval_num_samples evaluations of
every test task) is the run's final_test_mean. Weights that later steps would overwrite are
saved when their pair becomes the best (orbax, workdir/vace_selected, newest only; not when
the pair is the last one or the schedule never updates weights), and restored before that
final evaluation; the final checkpoint then holds the selected pair (with the last optimizer
state). Test evaluations in between only follow config.loop.eval_interval_rollouts.

Departures from the paper: the optimizer proposes with whale_jax's proposers rather than
HarnessEvolve's agent; harness_only's diagnostic batch size is a guess (one GRPO batch).
"""
import functools
import os

import jax

from whale_jax.algorithms import baselines
from whale_jax.algorithms import loop
from whale_jax.algorithms import whale
from whale_jax.harness import Harness
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import grouped
from whale_jax.search import evaluation as search_evaluation
from whale_jax.search import single_proposal
from whale_jax.train import checkpoint as checkpoint_lib

SELECTED_DIR = "vace_selected"


def _block_directory(run, cycle):
  return os.path.join(run.workdir, "vace", f"cycle_{cycle:03d}")


def _episode_rows(batch):
  return [{"score": score, "episode": index, "trajectory": trajectory}
          for index, (_, trajectory, score) in enumerate(batch.flat())]


def _grpo_step_recording(run, harness, budget_rollouts=0):
  """grpo_step that also saves the step's scored trajectories, so that the proposal after
  the block sees them even when the run was resumed in between (on a multi-host run each
  host saves those it ran, to its shard of the step's file). Refill rounds of dynamic
  sampling start only within budget_rollouts (0 = no budget)."""
  metrics = loop.grpo_step(run, harness, budget_rollouts)
  directory = _block_directory(run, run.state.cycle)
  loop.write_episode_shards(
      run, os.path.join(directory, f"step_{run.state.phase_steps:04d}.jsonl.gz"),
      _episode_rows(run.last_batch))
  return metrics


def _block_episodes(run, cycle):
  """[(Trajectory, score)] of the cycle's GRPO block, read back from disk (every host's
  shards, in episode order); [] on the hosts other than 0, whose proposer does not read."""
  directory = _block_directory(run, cycle)
  episodes = []
  if loop.hosts_of(run).index == 0 and os.path.isdir(directory):
    names = sorted(os.listdir(directory))
    steps = sorted({name.split(".")[0] for name in names if name.startswith("step_")})
    for step in steps:
      if step + ".jsonl.gz" not in names and step + ".jsonl" in names:  # written before
        rows = trajectory_lib.read_records(os.path.join(directory, step + ".jsonl"))
      else:
        rows = sorted(trajectory_lib.read_shards(os.path.join(directory, step + ".jsonl.gz")),
                      key=lambda row: row.get("episode", 0))
      episodes += [(row["trajectory"], row["score"]) for row in rows]
  return episodes


def _diagnostic_episodes(run, harness):
  """[(Trajectory, score)] of one diagnostic batch under harness at the current weights
  (harness rollouts; seeded by the cycle, so a replayed cycle runs the same episodes). On a
  multi-host run the hosts write their episodes to shards of vace/diagnostic_NNN.jsonl.gz
  and host 0 reads them all back; the other hosts get []."""
  batch = grouped.collect(run.runtime, run.domain, harness,
                          loop.next_prompts(run, run.loop.prompt_batch), run.sampling,
                          run.loop.num_samples, ("diagnostic", run.state.cycle),
                          run.loop.seed)
  run.counts.add("harness", batch.num_rollouts, batch.num_generated_tokens)
  if loop.hosts_of(run).count == 1:
    return [(trajectory, score) for _, trajectory, score in batch.flat()]
  rows = loop.write_episode_shards(
      run, os.path.join(run.workdir, "vace", f"diagnostic_{run.state.cycle:03d}.jsonl.gz"),
      _episode_rows(batch))
  return [(row["trajectory"], row["score"]) for row in rows or ()]


def _validation_mean(run, harness):
  evaluate = loop.make_evaluate(run)
  instances = run.splits["validation"]
  evaluation = evaluate(harness, instances, search_evaluation.sample_keys(instances,
                                                                          run.loop.seed))
  run.counts.add("harness", evaluation.rollouts, evaluation.generated_tokens)
  return evaluation.success_rate


# --- the selected pair -------------------------------------------------------------------

def selected_pair(pairs):
  """The pair with the best validation mean (ties: the earliest), or None."""
  if not pairs:
    return None
  return max(pairs, key=lambda pair: pair.validation_mean)   # max keeps the first


def _selected_manager(run):
  return checkpoint_lib.make_manager(os.path.join(run.workdir, SELECTED_DIR), max_to_keep=1)


def _weights(run):
  return {"params": run.policy.state["params"], "step": run.policy.state["step"]}


def _record_pair(run, validation, label, weights_change_later):
  """Appends the current (weights, harness) pair to run.state.vace.pairs; when it is the new
  best, selects it and, if later steps will change the weights, saves them."""
  notes = run.state.vace
  pairs = notes.pairs
  best = selected_pair(pairs)
  pair = loop.VacePair(cycle=run.state.cycle, label=label, weights_id=run.policy.weights_id,
                       weight_steps=run.state.weight_steps,
                       harness_hash=loop.incumbent(run).hash, validation_mean=validation)
  pairs.append(pair)
  if best is not None and validation <= best.validation_mean:
    return
  selected = loop.VaceSelection(
      index=len(pairs) - 1, harness=run.state.incumbent,
      saved_weights_id=notes.selected.saved_weights_id if notes.selected else None)
  if weights_change_later and selected.saved_weights_id != pair.weights_id:
    manager = _selected_manager(run)
    try:
      step = len(pairs)   # a replayed cycle finds its own save (same weights) in place
      if step not in checkpoint_lib.all_steps(manager):
        checkpoint_lib.save(manager, step, _weights(run), extra={"pair": pair.to_json()})
      checkpoint_lib.wait_until_finished(manager)
    finally:
      checkpoint_lib.close(manager)
    selected.saved_weights_id = pair.weights_id
  notes.selected = selected


def _restore_selected(run):
  """Makes the selected pair current (its weights restored if later steps changed them);
  returns the pair, or None when no pair was recorded."""
  notes = run.state.vace
  if not notes.pairs:
    return None
  chosen = notes.pairs[notes.selected.index]
  if chosen.weights_id != run.policy.weights_id:
    if notes.selected.saved_weights_id != chosen.weights_id:
      raise RuntimeError(f"The selected pair's weights {chosen.weights_id} were not saved "
                         f"(saved: {notes.selected.saved_weights_id}); the run "
                         f"directory {run.workdir} is inconsistent.")
    manager = _selected_manager(run)
    try:
      abstract = jax.tree.map(
          lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), _weights(run))
      weights, extra = checkpoint_lib.restore(manager, abstract)
    finally:
      checkpoint_lib.close(manager)
    if extra["pair"]["weights_id"] != chosen.weights_id:
      raise RuntimeError(f"{run.workdir}/{SELECTED_DIR} holds {extra['pair']['weights_id']}, "
                         f"not the selected pair's weights {chosen.weights_id}.")
    run.policy.set_state({**run.policy.state, **weights})
  loop.set_incumbent(run, Harness(notes.selected.harness, origin="selected"))
  return chosen


def _finish(run, recipe):
  chosen = _restore_selected(run)
  result = whale.finish(run, recipe)   # test mean@k of the selected pair
  if chosen is not None:
    result["selected_by_validation"] = chosen.to_json()
    result["pairs"] = [pair.to_json() for pair in run.state.vace.pairs]
  return baselines.add_behaviour(run, result)


# --- the schedules -----------------------------------------------------------------------

def _gated_revision(run, vace_config, episodes, weights_change_later):
  """One candidate from episodes, gated (or adopted when ungated) at the current weights;
  records the pair; ends the cycle."""
  state = run.state
  current = loop.incumbent(run)
  label = f"vace_cycle_{state.cycle:03d}"
  archive_dir = os.path.join(run.workdir, "archive", label)
  candidate, _ = single_proposal.propose_one(
      current, loop.bind_proposer(run, archive_dir, loop.make_evaluate(run)), run.domain,
      archive_dir, episodes=episodes, iteration=state.cycle + 2,
      context_budget_tokens=run.search_context_tokens, edit_scope=vace_config.edit_scope,
      hosts=loop.hosts_of(run))
  loop.count_agent_sessions(run, archive_dir)
  validation = None
  if candidate is not None:   # ungated: the gate decides nothing, its log says what it cost
    result = loop.gate(run, current, candidate, label,
                       adopted=None if vace_config.gated else True)
    if result.decision.accepted or not vace_config.gated:
      loop.set_incumbent(run, candidate)
      validation = result.decision.candidate_mean
    else:
      validation = result.decision.incumbent_mean
  if validation is None:
    validation = _validation_mean(run, loop.incumbent(run))
  state.cycle += 1
  _record_pair(run, validation, label, weights_change_later)


def _over_budget(run, vace_config):
  return whale.remaining_rollouts(run, vace_config.budget_rollouts) <= 0


def _alternate(run, vace_config):
  state = run.state
  while state.cycle < vace_config.num_cycles and not _over_budget(run, vace_config):
    if state.phase == "weight":
      stop = None
      if vace_config.budget_rollouts:
        stop = lambda run: _over_budget(run, vace_config)
      loop.weight_steps(run, loop.incumbent(run), vace_config.block_steps,
                        functools.partial(_grpo_step_recording,
                                          budget_rollouts=vace_config.budget_rollouts),
                        label=f"cycle {state.cycle} GRPO", stop=stop)
      loop.start_phase(run, "harness")
      loop.checkpoint(run)
    if state.phase == "harness":
      last = state.cycle + 1 == vace_config.num_cycles
      _gated_revision(run, vace_config, _block_episodes(run, state.cycle),
                      weights_change_later=not last)
      loop.start_phase(run, "weight")
      loop.checkpoint(run)


def _harness_phase(run, vace_config, weights_change_later):
  """num_cycles gated revisions at the current weights, each from a diagnostic batch."""
  state = run.state
  while (state.phase == "harness" and state.cycle < vace_config.num_cycles and
         not _over_budget(run, vace_config)):
    _gated_revision(run, vace_config, _diagnostic_episodes(run, loop.incumbent(run)),
                    weights_change_later)
    loop.checkpoint(run)


def _rl_phase(run, vace_config):
  """num_cycles blocks of block_steps GRPO steps under the fixed incumbent, a validation
  pair after each block (run.state.vace.rl_blocks counts the blocks done)."""
  state = run.state
  notes = state.vace
  fixed = loop.incumbent(run)
  stop = None
  if vace_config.budget_rollouts:
    stop = lambda run: _over_budget(run, vace_config)
  while notes.rl_blocks < vace_config.num_cycles and not _over_budget(run, vace_config):
    block = notes.rl_blocks
    loop.weight_steps(run, fixed, (block + 1) * vace_config.block_steps,
                      functools.partial(loop.grpo_step,
                                        budget_rollouts=vace_config.budget_rollouts),
                      label=f"RL block {block}", stop=stop)
    notes.rl_blocks = block + 1
    _record_pair(run, _validation_mean(run, fixed), f"rl_block_{block:03d}",
                 weights_change_later=block + 1 < vace_config.num_cycles)
    loop.checkpoint(run)


def run_vace(run, vace_config):
  """Runs (or resumes) the schedule of vace_config; returns the run summary."""
  state = run.state
  schedule = vace_config.schedule
  if state.phase == "start":
    loop.maybe_evaluate(run, force=True)
    # The initial pair is a candidate for selection too (it wins when nothing beats it).
    _record_pair(run, _validation_mean(run, loop.incumbent(run)), "initial",
                 weights_change_later=schedule != "harness_only")
    loop.start_phase(run, "harness" if schedule in ("harness_only", "harness_first")
                     else "weight")
    loop.checkpoint(run)
  if schedule == "alternate":
    _alternate(run, vace_config)
    recipe = "vace" if vace_config.gated else "ungated"
  elif schedule == "rl_only":
    _rl_phase(run, vace_config)
    recipe = "rl_only"
  else:
    _harness_phase(run, vace_config,
                   weights_change_later=vace_config.schedule == "harness_first")
    if vace_config.schedule == "harness_first":
      if state.phase == "harness":
        loop.start_phase(run, "weight")
        loop.checkpoint(run)
      _rl_phase(run, vace_config)
    recipe = f"vace_{vace_config.schedule}"
  return _finish(run, recipe)


# --- the methods table -------------------------------------------------------------------

BEHAVIOUR_COLUMNS = ("mean_turns", "tool_calls_per_episode", "tool_call_validity_rate",
                     "documents_opened_per_episode", "tables_opened_per_episode",
                     "source_document_opened_rate", "all_assertions_passed_rate")


def _per_evaluation(summary):
  means = summary.get("final_per_evaluation")
  if not means:
    return "–"
  std = summary.get("final_evaluation_std")
  return " / ".join(f"{mean:.3f}" for mean in means) + (f" ({std:.3f})" if std is not None
                                                        else "")


def method_table(summaries):
  """A markdown table of {method: run summary} (configs/vace.py's methods): final test mean
  (the selected pair's), its k evaluations' means and their standard deviation (ddof 1), the
  test mean per task domain (AutomationBench's hr, marketing, finance), the selected pair's
  label, gates accepted / decided, GRPO steps,
  rollouts weight / harness / evaluation, and the final test evaluation's behaviour metrics
  (those of BEHAVIOUR_COLUMNS and every assertion_pass_rate_<kind> any summary has)."""
  behaviour = [summary.get("final_behaviour") or {} for summary in summaries.values()]
  names = [name for name in BEHAVIOUR_COLUMNS if any(name in b for b in behaviour)]
  names += sorted({name for b in behaviour for name in b
                   if name.startswith("assertion_pass_rate_")})
  domains = sorted({d for s in summaries.values() for d in s.get("final_per_domain") or {}})
  header = (["method", "final test mean", "per evaluation (std)"] +
            [f"test {domain}" for domain in domains] +
            ["selected", "gates accepted / total", "GRPO steps", "rollouts w / h / e"] + names)
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for method, summary in summaries.items():
    counts = summary["counts"]
    decisions = summary.get("gate_decisions") or []
    gates = (f"{sum(d['accepted'] for d in decisions)}/{len(decisions)}" if decisions
             else "–")
    chosen = summary.get("selected_by_validation")
    selected = f"{chosen['label']}" if chosen else "last"
    final = summary["final_test_mean"]
    per_domain = summary.get("final_per_domain") or {}
    row = [method, "–" if final is None else f"{final:.3f}", _per_evaluation(summary)]
    row += [f"{per_domain[d]:.3f}" if d in per_domain else "–" for d in domains]
    row += [selected, gates, str(summary["weight_steps"]),
            f"{counts['weight']} / {counts['harness']} / {counts['evaluation']}"]
    values = summary.get("final_behaviour") or {}
    row += [f"{values[name]:.3f}" if name in values else "–" for name in names]
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines)


def _gate_counts(decisions):
  """(accepted, rejected, ties) of gate records: a tie is an equal validation mean."""
  accepted = sum(d["accepted"] for d in decisions)
  ties = sum(not d["accepted"] and d["mean_difference"] == 0 for d in decisions)
  return accepted, len(decisions) - accepted - ties, ties


def gate_log_summary(summaries, gated="vace", ungated="ungated"):
  """Markdown lines summarising the gate logs of {method: run summary}: per method with
  gates, how many candidates the gate accepted, rejected and tied (and how many it adopted);
  then each of the gated method's rejections (the validation points the candidate would
  have cost there) and each adoption by the ungated method of a candidate its own gate
  refused (what that adoption cost it on validation, the same comparison at its weights),
  marking the candidates both runs proposed."""
  lines = ["| method | gates | accepted | rejected | ties | adopted |", "|---|---|---|---|---|---|"]
  for method, summary in summaries.items():
    decisions = summary.get("gate_decisions") or []
    if decisions:
      accepted, rejected, ties = _gate_counts(decisions)
      adopted = sum(d.get("adopted", d["accepted"]) for d in decisions)
      lines.append(f"| {method} | {len(decisions)} | {accepted} | {rejected} | {ties} | "
                   f"{adopted} |")
  gated_decisions = (summaries.get(gated) or {}).get("gate_decisions") or []
  ungated_decisions = (summaries.get(ungated) or {}).get("gate_decisions") or []
  ungated_by_hash = {d.get("candidate_hash"): d for d in ungated_decisions}
  gated_hashes = {d.get("candidate_hash") for d in gated_decisions}
  for d in gated_decisions:
    if d["accepted"] or d["mean_difference"] == 0:
      continue
    twin = ungated_by_hash.get(d.get("candidate_hash"))
    note = (f"; {ungated} adopted the same candidate at {twin['label']} "
            f"({100 * twin['mean_difference']:+.1f} points there)" if twin else
            f"; {ungated} never proposed it")
    lines.append(f"\n{gated} rejected {d['label']}: {100 * d['mean_difference']:+.1f} "
                 f"validation points had it been adopted{note}")
  for d in ungated_decisions:
    if d.get("adopted") and not d["accepted"]:
      shared = " (also proposed to the gated run)" if d.get("candidate_hash") in gated_hashes \
          else ""
      why = "a tie" if d["mean_difference"] == 0 else "a loss"
      lines.append(f"\n{ungated} adopted {d['label']}{shared}, which its gate refused "
                   f"({why}): {100 * d['mean_difference']:+.1f} validation points")
  return "\n".join(lines)
