"""The alternation loop's shared machinery: one Run, its phases, evaluation and checkpoints.

A recipe (whale.py, vace.py, baselines.py, harness_learning.py) is a short function over a
Run. The Run holds everything an experiment touches:

  run.policy      the solver being trained (algorithms/policy.py) and its sampler
  run.runtime     sandboxed harness episodes, served by run.policy.sampler
  run.domain, run.splits, run.proposer, run.log (metrics), run.counts (rollouts per phase)
  run.state       the loop's own state (LoopState, a dataclass checkpointed as JSON): cycle,
                  phase, step counters, data cursor, incumbent harness, evaluation history

Phases:
  rsft_step(run, harness)       one online RSFT step (SPEC 1.5): a prompt batch from the
                                weight split, G rollouts each with the current weights,
                                keep score > threshold, token-mean NLL on the kept calls.
  grpo_step(run, harness)       one GRPO step: G rollouts per prompt, group-relative
                                float64 advantages, all-equal groups dropped and the batch
                                refilled (DAPO dynamic sampling), every call of a
                                trajectory trained with its advantage; ppo_epochs x
                                minibatches steps clipping against the log-probs of the
                                weights that sampled the batch (policy.py).
  harness_search(run, incoming, label, ...)   Meta-Harness search on the harness split
                                (a coding-agent proposer bound to it, its `run` episodes
                                counted as harness rollouts).
  evaluate_test(run, harness)   test mean@k (never used for any decision).

Resuming: checkpoint(run) saves the train state (orbax) with run.state, the rollout counts and
the number of metrics rows. A killed run restarted with the same workdir restores the latest
checkpoint, cuts metrics.jsonl back to that row count and continues; every random choice is
seeded by counters kept in run.state (episode seeds, data order, minibatch order), so the
replayed steps make the same choices, and a harness search resumes from its archive.
"""
import dataclasses
import json
import math
import os
import time

from absl import logging
import numpy as np
import tqdm

from whale_jax import atomic_files
from whale_jax import seeds as seeds_lib
from whale_jax import typed_config
from whale_jax.algorithms import hosts
from whale_jax.algorithms import options
from whale_jax.algorithms import policy as policy_lib
from whale_jax.algorithms import run_log
from whale_jax.algorithms import samples as samples_lib
from whale_jax.harness import Harness
from whale_jax.harness import static_checks
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.parallel import accounting
from whale_jax.rollouts import collector
from whale_jax.rollouts import grouped
from whale_jax.rollouts import sharding
from whale_jax.sampling import SamplingParams
from whale_jax.search import agentic_proposer
from whale_jax.search import evaluation as search_evaluation
from whale_jax.search import meta_harness
from whale_jax.search import validation_gate
from whale_jax.tasks import domain as domain_lib
from whale_jax.train import checkpoint as checkpoint_lib
from whale_jax.train import dapo


# --- the loop state: dataclasses all the way down, checkpointed as JSON ------------------

@dataclasses.dataclass
class GateRecord:
  """One validation gate's outcome (loop.gate): the gate's decision, the candidate's
  validation mean minus the incumbent's, the candidate's hash, and whether the run adopted
  the candidate (an ungated run adopts what its gate would have rejected)."""
  label: str
  accepted: bool
  mean_difference: float
  candidate_hash: str = ""
  adopted: bool = False


@dataclasses.dataclass
class VacePair:
  """One (weights, harness) pair VACE scored on validation (vace.py): after a cycle (label
  vace_cycle_NNN) or an RL block (rl_block_NNN)."""
  cycle: int
  label: str
  weights_id: str
  weight_steps: int
  harness_hash: str
  validation_mean: float

  def to_json(self):
    return dataclasses.asdict(self)


@dataclasses.dataclass
class VaceSelection:
  """The best-validation pair so far: its index in VaceNotes.pairs, its harness's source and
  the weights id saved under workdir/vace_selected (None: none saved)."""
  index: int
  harness: str
  saved_weights_id: str | None = None


@dataclasses.dataclass
class VaceNotes:
  """VACE's own state (vace.py): every pair, the selected one, the RL blocks done."""
  pairs: list[VacePair] = dataclasses.field(default_factory=list)
  selected: VaceSelection | None = None
  rl_blocks: int = 0


@dataclasses.dataclass
class AdaptationRound:
  """One round of Harness Learning's test-time adaptation: the kept candidate's id (None: the
  current harness stayed), every candidate's scoring mean and the current harness's after."""
  round: int
  kept: str | None
  scores: list[float]
  current_score: float | None


@dataclasses.dataclass
class AdaptationState:
  """Test-time adaptation under one (stage, selection rule) label (harness_learning.adapt).

  Attributes:
    current: the adapted harness's source; current_score: its scoring mean (None: not yet
      measured).
    round: rounds done; history: one AdaptationRound each.
    report: (archive directory relative to the workdir, candidate id) of the execution report
      the next round's context reuses; None before the first round.
    test_mean, harness_hash: the adapted harness's test mean and hash, once evaluated (the
      single_step protocol: the candidates' mean test score, and no harness: "").
    test_candidates: oracle and single_step: [(candidate id, source)] of the runnable
      candidates; candidate_test_means: {candidate id: test mean} of those evaluated so far.
  """
  current: str
  current_score: float | None = None
  round: int = 0
  history: list[AdaptationRound] = dataclasses.field(default_factory=list)
  report: tuple[str, str] | None = None
  test_mean: float | None = None
  harness_hash: str | None = None
  test_candidates: list[tuple[str, str]] = dataclasses.field(default_factory=list)
  candidate_test_means: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class HarnessLearningNotes:
  """Harness Learning's own state (harness_learning.py).

  Attributes:
    demonstrations: demonstration rows collected.
    carried: {domain name: harness source} carried between the proposer's GRPO steps
      (multi_step: the best candidate above the baseline).
    adaptation: {label: AdaptationState}, label "<stage>_<rule>".
    proposer_prompt_tokens, proposer_completion_tokens: the proposer's tokens so far.
  """
  demonstrations: int = 0
  carried: dict[str, str] = dataclasses.field(default_factory=dict)
  adaptation: dict[str, AdaptationState] = dataclasses.field(default_factory=dict)
  proposer_prompt_tokens: int = 0
  proposer_completion_tokens: int = 0


@dataclasses.dataclass
class LoopState:
  """The loop's own state: everything a resumed run needs besides the train state (it is
  checkpointed as JSON with it, see checkpoint(); from_json rebuilds every dataclass below it
  and refuses a key its class lacks).

  Attributes:
    incumbent: the current harness's source.
    cycle: alternation cycles finished.
    phase: the recipe's current phase ("start", "weight", "harness", ..., "done").
    weight_steps: weight steps taken in the run; phase_steps: in the current phase.
    cursor: weight-split instances handed out so far (next_prompts).
    next_eval_rollouts: training rollouts at which the next test evaluation is due.
    evaluations: one record per test evaluation, the dict evaluate_test returns (rollouts,
      test_mean, weights_id, harness_hash, cycle, label, per_task, per_subset, per_domain,
      per_evaluation).
    phase_rewards: mean training reward of each weight step of the current phase.
    gate_decisions: one GateRecord per validation gate.
    metrics_rows: rows of metrics.jsonl when the checkpoint was taken.
    saves: checkpoints taken (the orbax step of the next one is saves + 1).
    done: the recipe finished.
    vace: VACE's state (VaceNotes; the other recipes leave it empty).
    harness_learning: Harness Learning's state (None in the other recipes).
  """
  incumbent: str
  cycle: int = 0
  phase: str = "start"
  weight_steps: int = 0
  phase_steps: int = 0
  cursor: int = 0
  next_eval_rollouts: int = 0
  evaluations: list[dict] = dataclasses.field(default_factory=list)
  phase_rewards: list[float] = dataclasses.field(default_factory=list)
  gate_decisions: list[GateRecord] = dataclasses.field(default_factory=list)
  metrics_rows: int = 0
  saves: int = 0
  done: bool = False
  vace: VaceNotes = dataclasses.field(default_factory=VaceNotes)
  harness_learning: HarnessLearningNotes | None = None

  def to_json(self):
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, value):
    """The state a checkpoint holds, as dataclasses; a key a class lacks is refused."""
    return typed_config.read(cls, value, "loop", source="checkpoint")


@dataclasses.dataclass
class Run:
  """Everything one experiment touches (see the module docstring).

  Attributes:
    workdir: the run directory; loop: options.LoopConfig.
    policy: the solver (algorithms/policy.Policy); runtime: a HarnessRuntime (or, on a
      multi-host run, hosts.ShardedRuntime) served by its sampler.
    domain: the tasks.Domain; proposer: anything with propose(context, n) and a name.
    sampling, eval_sampling: SamplingParams of training rollouts and search evaluations,
      and of test evaluations.
    log, counts: the metrics log and rollout counters; state: the LoopState.
    manager: the orbax CheckpointManager (None: no checkpoints).
    tokenizer: the solver's tokenizer.
    last_batch: the RolloutBatch of the latest GRPO step (VACE records its trajectories).
    search_context_tokens: the proposer context's budget (config.search.context_tokens).
    search_max_lines: the most lines a Meta-Harness candidate may have
      (config.search.max_lines).
  """
  workdir: str
  loop: options.LoopConfig
  policy: policy_lib.Policy
  runtime: object
  domain: domain_lib.Domain
  sampling: SamplingParams
  eval_sampling: SamplingParams
  proposer: object
  log: run_log.RunLog
  counts: run_log.RolloutCounts
  state: LoopState
  manager: object = None
  tokenizer: object = None
  show_progress: bool = True
  last_batch: grouped.RolloutBatch | None = None
  search_context_tokens: int = meta_harness.DEFAULT_CONTEXT_TOKENS
  search_max_lines: int = static_checks.DEFAULT_MAX_LINES

  @property
  def splits(self):
    return self.domain.splits()



def hosts_of(run):
  """The HostGroup run's runtime shares episodes with (rollouts/sharding.py; one host when
  the runtime is not shared, or a test's run has none)."""
  return sharding.hosts_of(getattr(run, "runtime", None))


def incumbent(run):
  return Harness(run.state.incumbent, origin="incumbent")


def set_incumbent(run, harness):
  """Makes harness the incumbent; on a multi-host run, host 0's choice on every host."""
  run.state.incumbent = hosts.agree_on_harness(harness.source)


# --- checkpoints -------------------------------------------------------------------------

def checkpoint(run):
  """Saves the train state with the loop state; waits for nothing (see train/checkpoint)."""
  if run.manager is None:
    return
  run.state.metrics_rows = len(run_log.read_metrics(run.workdir))
  run.state.saves += 1  # orbax steps must increase; the saved state holds its own step
  extra = {"loop": run.state.to_json(), "counts": run.counts.to_json()}
  checkpoint_lib.save(run.manager, run.state.saves, run.policy.state, extra=extra)


def restore(run, abstract_state):
  """Restores the latest checkpoint into run (policy, state, counts); False if none."""
  if run.manager is None or checkpoint_lib.latest_step(run.manager) is None:
    return False
  state, extra = checkpoint_lib.restore(run.manager, abstract_state)
  run.policy.set_state(state)
  run.state = LoopState.from_json(extra["loop"])
  run.counts = run_log.RolloutCounts.from_json(extra["counts"])
  if run.log.enabled:  # host 0 writes the metrics
    _truncate_metrics(run.workdir, run.state.metrics_rows)
  logging.info("Resumed %s at cycle %d, phase %s, weight step %d, %d training rollouts.",
               run.workdir, run.state.cycle, run.state.phase, run.state.weight_steps,
               run.counts.training)
  return True


def _truncate_metrics(workdir, num_rows):
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return
  with open(path) as f:
    lines = [line for line in f if line.endswith("\n")][:num_rows]
  atomic_files.write_text(path, "".join(lines))


# --- data --------------------------------------------------------------------------------

def next_prompts(run, count):
  """The next `count` weight-split instances; the cursor persists across cycles and epochs.

  Each epoch visits the weight split in a fresh order seeded by
  seeds.derive_seed(seed, "data_order", epoch).
  """
  pool = run.splits["weight"]
  if not pool:
    raise ValueError("The weight split is empty; give config.domain.split_sizes a 'weight' "
                     "size (-1 = all remaining instances).")
  chosen = []
  for _ in range(count):
    epoch, index = divmod(run.state.cursor, len(pool))
    order = np.random.default_rng(
        seeds_lib.derive_seed(run.loop.seed, "data_order", epoch)).permutation(len(pool))
    chosen.append(pool[order[index]])
    run.state.cursor += 1
  return chosen


def epochs_done(run):
  return run.state.cursor / max(len(run.splits["weight"]), 1)


def steps_for_epochs(run, epochs):
  """Weight steps that consume `epochs` passes over the weight split (at least one)."""
  return max(1, math.ceil(epochs * len(run.splits["weight"]) / run.loop.prompt_batch))


# --- weight steps ------------------------------------------------------------------------

def _collect_weight_batch(run, harness, seed_key=None):
  prompts = next_prompts(run, run.loop.prompt_batch)
  seed_key = ("weight", run.state.weight_steps) if seed_key is None else seed_key
  batch = grouped.collect(run.runtime, run.domain, harness, prompts, run.sampling,
                          run.loop.num_samples, seed_key, run.loop.seed)
  run.counts.add("weight", batch.num_rollouts, batch.num_generated_tokens)
  return batch


# Per-step GRPO metrics (train/grpo.py) reported as their mean over a weight step's
# optimizer steps; the first step's clip fraction and KL are reported too (the first step of
# a batch is on-policy: its clip fraction is 0).
GRPO_MEAN_METRICS = ("clip_fraction", "clip_fraction_low", "clip_fraction_high",
                     "clip_fraction_dual", "kl_to_reference", "approx_kl", "importance_weight",
                     "sampler_trainer_logprob_gap", "entropy")


def _finish_weight_step(run, kind, batch, history, extra):
  run.state.weight_steps += 1
  run.state.phase_steps += 1
  reward = batch.mean_score()
  run.state.phase_rewards.append(reward)
  metrics = {"reward": reward, "epoch": epochs_done(run), "weight_step": run.state.weight_steps,
             "optimizer_steps": len(history), "generated_tokens": batch.num_generated_tokens,
             **extra}
  if history:
    metrics["loss"] = float(np.mean([h["loss"] for h in history]))
    metrics["grad_norm"] = float(np.mean([h["grad_norm"] for h in history]))
    for name in GRPO_MEAN_METRICS:
      if name in history[0]:
        metrics[name] = float(np.mean([h[name] for h in history]))
    for name in ("clip_fraction", "kl_to_reference"):
      if name in history[0]:
        metrics[f"first_step_{name}"] = history[0][name]
  outcomes = batch.outcome_counts()
  metrics.update({f"outcome_{name}": count for name, count in outcomes.items()})
  run.log.log("weight", run.counts.training, kind=kind, **metrics)
  return metrics


def rsft_step(run, harness):
  """One online RSFT step; returns its metrics. On a multi-host run each host trains on the
  kept episodes it ran (the others' are EpisodeRecords here), placed by their index among
  every host's kept episodes (Policy.train)."""
  batch = _collect_weight_batch(run, harness)
  started = time.perf_counter()  # "train" seconds: the samples and the optimizer steps
  kept = [trajectory for _, trajectory, score in batch.flat()
          if score > run.loop.score_threshold and trajectory.ok]
  samples, groups = _local_samples(kept)
  result = run.policy.train(samples, "rsft", epochs=run.loop.sft_epochs, groups=groups)
  accounting.COUNTERS.add_seconds("train", time.perf_counter() - started)
  return _finish_weight_step(run, "rsft", batch, result.history, {
      "accepted": len(kept), "accept_rate": len(kept) / max(batch.num_rollouts, 1),
      "samples": result.num_samples, "dropped_samples": result.num_dropped})


def _local_samples(trajectories, advantages=None):
  """(samples, groups) of the trajectories this host ran: each sample's group is its
  trajectory's index in trajectories (which may hold other hosts' EpisodeRecords)."""
  mine = [i for i, trajectory in enumerate(trajectories) if not sharding.is_remote(trajectory)]
  samples, groups = samples_lib.from_trajectories(
      [trajectories[i] for i in mine],
      None if advantages is None else [advantages[i] for i in mine], with_groups=True)
  return samples, [mine[group] for group in groups]


def merge_batches(batches):
  """One RolloutBatch of several (instances and episodes in order, rollouts summed)."""
  if len(batches) == 1:
    return batches[0]
  evaluations = [batch.evaluation for batch in batches]
  evaluation = collector.Evaluation(
      task_ids=sum((tuple(e.task_ids) for e in evaluations), ()),
      sample_keys=sum((tuple(e.sample_keys) for e in evaluations), ()),
      scores=sum((tuple(e.scores) for e in evaluations), ()),
      trajectories=sum((tuple(e.trajectories) for e in evaluations), ()),
      rollouts=sum(e.rollouts for e in evaluations),
      generated_tokens=sum(e.generated_tokens for e in evaluations))
  return grouped.RolloutBatch(sum((tuple(b.instances) for b in batches), ()), evaluation,
                              batches[0].num_samples)


def generated_tokens(trajectory):
  """The tokens the model generated in the episode (a Trajectory or an EpisodeRecord)."""
  return trajectory.num_completion_tokens


cut_off = sharding.cut_off  # whether a completion stopped at a generation limit


def generation_limit(run):
  """DAPO's L_max: the per-episode token budget if the runtime has one, else max_tokens."""
  return getattr(run.runtime, "max_episode_tokens", None) or run.sampling.max_tokens


def _training_scores(run, batch):
  """[P, G] float64 scores the advantages are computed from: the task scores, plus DAPO's
  soft overlong penalty when config.loop.overlong_cache_tokens is set."""
  scores = np.asarray(batch.scores, np.float64)
  if run.loop.overlong_cache_tokens:
    lengths = np.asarray([[generated_tokens(t) for t in group] for group in batch.trajectories],
                         np.int64)
    scores = scores + dapo.soft_overlong_penalty(lengths, int(generation_limit(run)),
                                                 run.loop.overlong_cache_tokens)
  return scores


def grpo_step(run, harness, budget_rollouts=0):
  """One GRPO step; returns its metrics (and keeps the batch in run.last_batch).

  Dynamic sampling (DAPO; config.loop.filter_zero_advantage and max_refill_rounds): groups
  whose training scores are all equal are dropped; while fewer than prompt_batch informative
  groups were collected, up to max_refill_rounds more rounds of prompt_batch prompts are
  collected (the data cursor advances; round r > 0 seeds its episodes with seed key
  ("weight", step, "refill", r)). Every round's rollouts count in run.counts; an extra round
  starts only when its rollouts fit in budget_rollouts (0 = no budget). The first
  prompt_batch informative groups are trained on; if the bound is hit, those collected.
  """
  target, group_size = run.loop.prompt_batch, run.loop.num_samples
  batches = [_collect_weight_batch(run, harness)]
  scores = [_training_scores(run, batches[0])]
  while (run.loop.max_refill_rounds and len(batches) <= run.loop.max_refill_rounds and
         dapo.informative_groups(np.concatenate(scores)).sum() < target and
         (not budget_rollouts or
          run.counts.training + target * group_size <= budget_rollouts)):
    batches.append(_collect_weight_batch(
        run, harness, ("weight", run.state.weight_steps, "refill", len(batches))))
    scores.append(_training_scores(run, batches[-1]))
  batch, scores = merge_batches(batches), np.concatenate(scores)  # [P, G]
  informative = dapo.informative_groups(scores)
  if run.loop.filter_zero_advantage:
    kept_groups = dapo.select_informative(scores, target)
  else:
    kept_groups = np.arange(len(scores))
  advantages, _ = samples_lib.group_advantages(scores, run.loop.advantage_normalization, False)
  started = time.perf_counter()  # "train" seconds: the samples and the optimizer steps
  trajectories, trajectory_advantages, overlong = [], [], 0
  groups = batch.trajectories
  for index in kept_groups:
    for trajectory, advantage in zip(groups[index], advantages[index]):
      if trajectory.outcome == "infra_error":
        continue
      if run.loop.overlong_filter and cut_off(trajectory):
        overlong += 1
        continue
      trajectories.append(trajectory)
      trajectory_advantages.append(float(advantage))
  samples, sample_groups = _local_samples(trajectories, trajectory_advantages)
  result = run.policy.train(samples, "grpo", groups=sample_groups)
  run.last_batch = batch
  accounting.COUNTERS.add_seconds("train", time.perf_counter() - started)
  return _finish_weight_step(run, "grpo", batch, result.history, {
      "kept_groups": len(kept_groups), "groups_sampled": len(scores),
      "informative_groups": int(informative.sum()), "refill_rounds": len(batches) - 1,
      "rollouts_discarded": (len(scores) - len(kept_groups)) * group_size,
      "overlong_filtered": overlong, "samples": result.num_samples,
      "dropped_samples": result.num_dropped})


def weight_steps(run, harness, num_steps, step_fn=rsft_step, label="weight", stop=None):
  """Runs weight steps until run.state.phase_steps reaches num_steps (or stop(run) says
  so), checkpointing as configured; resumes mid-phase from run.state."""
  progress = tqdm.tqdm(total=num_steps, initial=run.state.phase_steps, desc=label,
                       disable=not run.show_progress, leave=False)
  while run.state.phase_steps < num_steps:
    step_fn(run, harness)
    progress.update(1)
    maybe_evaluate(run)
    if run.state.weight_steps % run.loop.checkpoint_every_steps == 0:
      checkpoint(run)
    if stop is not None and stop(run):
      break
  progress.close()


def start_phase(run, phase):
  run.state.phase = phase
  run.state.phase_steps = 0
  run.state.phase_rewards = []


# --- harness steps -----------------------------------------------------------------------

def make_evaluate(run):
  return search_evaluation.make_evaluate(run.runtime, run.domain, run.sampling,
                                         weights_id=run.policy.weights_id)


def bind_proposer(run, archive_dir, evaluate):
  """run.proposer bound to one search (its archive, `run` over evaluate on the harness split)
  when it binds (the coding agents' for_search), else run.proposer itself.

  On a multi-host run the agent runs on host 0 only, and so do the episodes of its `run`
  calls: `run` evaluates with host 0's own runtime (hosts.local_runtime), not the one the
  hosts share, while the other hosts wait for its proposals. They count the `run` episodes
  from the saved sessions (count_agent_sessions), as host 0 does."""
  for_search = getattr(run.proposer, "for_search", None)
  if for_search is None:
    return run.proposer
  if hosts_of(run).count > 1:
    evaluate = search_evaluation.make_evaluate(
        hosts.local_runtime(run.runtime), run.domain, run.sampling,
        weights_id=run.policy.weights_id)
  return for_search(archive_dir, evaluate, run.splits["harness"], run.loop.seed)


def count_agent_sessions(run, archive_dir):
  """Adds the rollouts and generated tokens of the coding agent's `run` calls saved under
  archive_dir (search/agentic_proposer.session_costs) to run.counts' harness counts; read
  from the saved sessions once the search is over, so a resumed search counts each once."""
  costs = agentic_proposer.session_costs(archive_dir)
  run.counts.add("harness", costs["rollouts"], costs["generated_tokens"])
  return costs


def harness_search(run, incoming, label, prompt_only=False, **budget):
  """Meta-Harness search on the harness split at the current weights; returns its result.

  budget: iterations=I, or min_iterations/patience/max_iterations. Default: loop config.
  A coding-agent proposer is bound to this search (bind_proposer) and the episodes of its
  `run` calls are counted as harness rollouts (count_agent_sessions).
  """
  if not budget:
    budget = {"iterations": run.loop.search_iterations}
  archive_dir = os.path.join(run.workdir, "archive", label)
  evaluate = make_evaluate(run)
  started = time.perf_counter()
  result = meta_harness.search(
      incoming, evaluate, bind_proposer(run, archive_dir, evaluate), archive_dir,
      domain=run.domain, instances=run.splits["harness"], weights_id=run.policy.weights_id,
      candidates_per_iteration=run.loop.candidates_per_iteration, prompt_only=prompt_only,
      seed=run.loop.seed, context_budget_tokens=run.search_context_tokens, tokenizer=None,
      max_lines=run.search_max_lines,
      session=label, hosts=hosts_of(run), **budget)
  run.counts.add("harness", result.rollouts, result.generated_tokens)
  accounting.COUNTERS.add_seconds("search", time.perf_counter() - started)
  agent = count_agent_sessions(run, archive_dir)
  run.log.log("harness", run.counts.training, label=label, iterations=result.iterations,
              search_rollouts=result.rollouts,
              generated_tokens=result.generated_tokens + agent["generated_tokens"],
              improved=result.improved,
              accepted=result.accepted_id, stop_reason=result.stop_reason,
              proposer_prompt_tokens=result.proposer_prompt_tokens,
              proposer_completion_tokens=result.proposer_completion_tokens,
              failed_proposer_calls=result.failed_proposer_calls,
              missing_proposals=result.missing_proposals,
              agent_sessions=agent["sessions"], agent_rollouts=agent["rollouts"])
  return result


def gate(run, current, candidate, label, adopted=None):
  """Validation gate at the current weights; returns the GateResult (logged). adopted: whether
  the run adopts the candidate whatever the gate decides (None: when the gate accepts)."""
  started = time.perf_counter()
  result = validation_gate.gate_candidate(
      current, candidate, make_evaluate(run), run.splits["validation"],
      weights_id=run.policy.weights_id, seed=run.loop.seed, rule=run.loop.gate_rule,
      log_path=os.path.join(run.workdir, "gate_decisions.jsonl") if hosts_of(run).index == 0
      else None)
  run.counts.add("harness", result.rollouts, result.generated_tokens)
  accounting.COUNTERS.add_seconds("gate", time.perf_counter() - started)
  decision = result.decision
  adopted = decision.accepted if adopted is None else adopted
  run.state.gate_decisions.append(GateRecord(label, decision.accepted,
                                             decision.mean_difference, candidate.hash,
                                             adopted))
  run.log.log("harness", run.counts.training, label=label, gate_rollouts=result.rollouts,
              generated_tokens=result.generated_tokens, gate_accepted=decision.accepted,
              gate_adopted=adopted,
              gate_n=decision.n, gate_mean_difference=decision.mean_difference,
              gate_p_value=decision.p_value if decision.p_value is not None else -1.0,
              incumbent_validation=decision.incumbent_mean,
              candidate_validation=decision.candidate_mean)
  return result


# --- evaluation --------------------------------------------------------------------------

def test_instances(run):
  instances = run.splits["test"]
  if run.loop.eval_max_instances:
    instances = instances[:run.loop.eval_max_instances]
  return instances


def evaluate_test(run, harness=None, label=""):
  """Test mean@k of (current weights, harness); logged and kept in run.state."""
  harness = harness or incumbent(run)
  start = time.time()
  batch = grouped.collect(run.runtime, run.domain, harness, test_instances(run),
                          run.eval_sampling, run.loop.eval_num_samples, ("test",),
                          run.loop.seed)
  run.counts.add("evaluation", batch.num_rollouts, batch.num_generated_tokens)
  per_task = batch.per_instance_mean()
  record = {"rollouts": run.counts.training, "test_mean": batch.mean_score(),
            "weights_id": run.policy.weights_id, "harness_hash": harness.hash,
            "cycle": run.state.cycle, "weight_steps": run.state.weight_steps, "label": label,
            "per_task": per_task,
            "per_subset": per_subset_means(per_task),
            "per_domain": per_domain_means(batch.instances, per_task),
            "per_evaluation": batch.per_sample_means()}
  # Every test episode, so behaviour metrics can be recomputed: each host writes the episodes
  # it ran to its shard; the behaviour metrics (host 0's log) are computed over all of them.
  path = os.path.join(run.workdir, "test_trajectories",
                      f"evaluation_{len(run.state.evaluations):03d}.jsonl.gz")
  rows = [{"instance_id": instance.id, "score": score, "rollouts": record["rollouts"],
           "harness_hash": harness.hash, "weights_id": record["weights_id"], "episode": index,
           "trajectory": trajectory}
          for index, (instance, trajectory, score) in enumerate(batch.flat())]
  episodes = write_episode_shards(run, path, rows)
  behaviour = {}
  if episodes is not None:
    by_id = {instance.id: instance for instance in batch.instances}
    behaviour = run.domain.metrics([by_id[row["instance_id"]] for row in episodes],
                                   [row["trajectory"] for row in episodes],
                                   [row["score"] for row in episodes])
  run.state.evaluations.append(record)
  accounting.COUNTERS.add_seconds("evaluation", time.time() - start)
  scalars = {f"behaviour_{name}": value for name, value in behaviour.items()
             if isinstance(value, (int, float))}
  best = best_test(run)  # the best evaluation so far (this one included), per subset too
  run.log.log("evaluation", run.counts.training, test_mean=record["test_mean"],
              eval_seconds=time.time() - start, label=label, per_subset=record["per_subset"],
              best_test_mean=best["test_mean"], best_per_subset=best["per_subset"],
              evaluation_rollouts=batch.num_rollouts,
              generated_tokens=batch.num_generated_tokens, **scalars, **domain_counters(run))
  return record


def write_episode_shards(run, path, rows):
  """Writes the rows (trace records, one per episode, in episode order) whose trajectory this
  host ran to its shard of path (harness/trajectory.shard_path); returns every host's rows in
  episode order on host 0 (read back from the shards once all hosts wrote theirs), None on
  the other hosts. On a single host: writes path, returns rows."""
  group = hosts_of(run)
  mine = [row for row in rows if not sharding.is_remote(row["trajectory"])]
  trajectory_lib.write_records(trajectory_lib.shard_path(path, group.index, group.count), mine)
  if group.count == 1:
    return rows
  sharding.barrier(group)  # every shard is whole on disk before host 0 reads them
  if group.index != 0:
    return None
  return sorted(trajectory_lib.read_shards(path), key=lambda row: row["episode"])


def per_subset_means(per_task):
  """{subset: mean} of per-task means, a task's subset being its id before the first ":"
  (the question file's stem for SearchQA: nq, hotpotqa, ...); {} when ids carry none."""
  groups = {}
  for task_id, mean in per_task.items():
    subset, separator, _ = str(task_id).partition(":")
    if separator:
      groups.setdefault(subset, []).append(mean)
  return {subset: float(np.mean(means)) for subset, means in sorted(groups.items())}


def per_domain_means(instances, per_task):
  """{domain: mean of its tasks' means} for instances whose public fields name a "domain"
  (AutomationBench's hr, marketing, finance, whose task ids do not); {} when none do."""
  groups = {}
  for instance in instances:
    domain = (getattr(instance, "public", None) or {}).get("domain")
    if isinstance(domain, str) and instance.id in per_task:
      groups.setdefault(domain, []).append(per_task[instance.id])
  return {domain: float(np.mean(means)) for domain, means in sorted(groups.items())}


def evaluation_std(per_evaluation):
  """Sample standard deviation (ddof 1) of the k evaluation means; None for k < 2."""
  if not per_evaluation or len(per_evaluation) < 2:
    return None
  return float(np.std(np.asarray(per_evaluation, np.float64), ddof=1))


def eval_interval_steps(run):
  """Weight steps between test evaluations of config.loop.eval_interval_epochs (0 = off):
  round(epochs x steps per epoch), at least 1 (WHALE: 0.1 x 74 -> every 7 steps)."""
  epochs = run.loop.eval_interval_epochs
  if not epochs:
    return 0
  steps_per_epoch = len(run.splits["weight"]) / run.loop.prompt_batch
  return max(1, round(epochs * steps_per_epoch))


def maybe_evaluate(run, force=False):
  """Evaluates when training rollouts passed the next interval mark, or the weight steps a
  multiple of eval_interval_steps not yet evaluated at (or when forced)."""
  interval = run.loop.eval_interval_rollouts
  due = interval > 0 and run.counts.training >= run.state.next_eval_rollouts
  step_interval = eval_interval_steps(run)
  if step_interval and run.state.weight_steps:
    last = max((r.get("weight_steps", 0) for r in run.state.evaluations), default=-1)
    due = due or (run.state.weight_steps % step_interval == 0 and
                  run.state.weight_steps != last)
  if force or due:
    evaluate_test(run)
    if interval > 0:
      run.state.next_eval_rollouts = (run.counts.training // interval + 1) * interval


def best_test(run):
  """The evaluation record with the highest test mean (ties to fewer rollouts)."""
  evaluations = run.state.evaluations
  if not evaluations:
    return None
  return max(evaluations, key=lambda r: (r["test_mean"], -r["rollouts"]))


def domain_counters(run):
  """run.domain.counters() (tasks.Domain), {} for a domain without them. On a multi-host run
  (every host calls this at the same point) the hosts' numbers are summed, since each host
  verifies and judges only its own episodes; other values are host 0's."""
  counters = dict(getattr(run.domain, "counters", dict)())
  hosts_group = hosts_of(run)
  if hosts_group.count == 1:
    return counters
  shares = [json.loads(text) for text in hosts_group.allgather(json.dumps(counters,
                                                                          default=str))]
  summed = dict(shares[0])
  for name, value in shares[0].items():
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      summed[name] = sum(share.get(name, 0) for share in shares)
  return summed


def summary(run, recipe):
  best = best_test(run)
  final = run.state.evaluations[-1] if run.state.evaluations else None
  return {"recipe": recipe, "counts": run.counts.to_json(),
          "training_rollouts": run.counts.training,
          "weight_steps": run.state.weight_steps, "cycles": run.state.cycle,
          "final_test_mean": final["test_mean"] if final else None,
          "best_test_mean": best["test_mean"] if best else None,
          "best_at_rollouts": best["rollouts"] if best else None,
          "incumbent_hash": incumbent(run).hash,
          "curve": [(r["rollouts"], r["test_mean"]) for r in run.state.evaluations],
          "final_per_task": final["per_task"] if final else {},
          "final_per_subset": final.get("per_subset", {}) if final else {},
          "final_per_domain": final.get("per_domain", {}) if final else {},
          "best_per_subset": best.get("per_subset", {}) if best else {},
          # test mean@k as k evaluations (evaluation i: sample i of every test task), spread
          "final_per_evaluation": final.get("per_evaluation") if final else None,
          "final_evaluation_std": evaluation_std(final.get("per_evaluation")) if final
                                  else None,
          # e.g. the SearchQA judge's calls, parsed verdicts and fallbacks (this process)
          "domain_counters": domain_counters(run),
          "gate_decisions": [dataclasses.asdict(r) for r in run.state.gate_decisions]}
