"""Scoring a harness on task instances: the one episode collector, and the evaluate function
that search and the gate call.

  evaluation = collect(runtime, domain, harness, instances, seeds, sampling)   # one per seed
  evaluate = make_evaluate(runtime, domain, sampling, weights_id="step_1200")
  keys = sample_keys(instances, seed=0)                   # one sample key per task
  evaluation = evaluate(harness, instances, keys)
  evaluation.scores, evaluation.trajectories, evaluation.success_rate, evaluation.mean_turns
  evaluations = evaluate_many(evaluate, [(h, instances, keys) for h in candidates])  # at once

Any callable `evaluate(harness, instances, sample_keys) -> Evaluation` will do (tests pass
fakes). The sample key of a task is the seed of its episode: the runtime seeds llm call k of
the episode from (sample key, k), so two harnesses evaluated with the same keys draw the same
random streams (common random numbers), and an evaluation is identified by (harness hash,
weights id, task id, sample key) — the key of the evaluation cache
(whale_jax.search.evaluation_cache).

collect is every recipe's way to run episodes: training rollouts (algorithms/rollouts.py),
harness search and gate evaluations (make_evaluate) and test evaluations all go through it,
so all of them score alike and retry infrastructure failures alike:
an episode that ends "ok" is scored by domain.verify; "harness_error" and "timeout"
score 0. An "infra_error" episode (not the harness's fault) is run again up to infra_retries
times and scores 0 if it never succeeds; the count is in evaluation.num_infra_errors, and the
cache never stores it. Retried episodes count as rollouts. Turns are the llm calls of an
episode (WHALE's turn count).

Several harnesses at once (WHALE evaluates an iteration's 3 candidates in parallel):
collect_many takes [(harness, instances, seeds)] and puts every job's episodes in flight as
one batch (runtime.run_many: the runtime's workers and the engine's slots serve them
together; a runtime without run_many runs the jobs one after another), retries the infra
failures of all jobs as one batch and verifies all answers in one domain call. Each episode
keeps its own seed, so the results equal one collect per job, in any order. evaluate_many
(evaluate, jobs) does this for an evaluate function that has evaluate_many (Evaluator, the
evaluation cache's CachedEvaluator) and calls any other one job after another.
"""
import dataclasses
from typing import Sequence

from whale_jax import seeds as seeds_lib
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.tasks import domain as domain_lib

INFRA_RETRIES = 1


def sample_key(seed, task_id):
  """The sample key of task_id under seed (seeds.derive_seed(seed, "sample_key", task_id))."""
  return seeds_lib.derive_seed(seed, "sample_key", str(task_id))


def sample_keys(instances, seed):
  """One sample key per instance (see sample_key)."""
  return [sample_key(seed, instance.id) for instance in instances]


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """Per-instance results of one harness, in the order of the instances.

  Attributes:
    task_ids, sample_keys: what was evaluated.
    scores: one score in [0, 1] per instance.
    trajectories: one Trajectory per instance.
    rollouts: episodes actually run to produce this (cache hits cost none; retries count).
    generated_tokens: tokens the model generated in those episodes.
  """
  task_ids: tuple[str, ...]
  sample_keys: tuple[int, ...]
  scores: tuple[float, ...]
  trajectories: tuple[trajectory_lib.Trajectory, ...]
  rollouts: int = 0
  generated_tokens: int = 0

  def __post_init__(self):
    sizes = {len(self.task_ids), len(self.sample_keys), len(self.scores),
             len(self.trajectories)}
    if len(sizes) != 1:
      raise ValueError(f"Evaluation needs one task id, sample key, score and trajectory per "
                       f"instance; got {len(self.task_ids)}, {len(self.sample_keys)}, "
                       f"{len(self.scores)} and {len(self.trajectories)}.")

  @property
  def success_rate(self):
    return sum(self.scores) / len(self.scores) if self.scores else 0.0

  @property
  def mean_turns(self):
    if not self.trajectories:
      return 0.0
    return sum(t.num_turns for t in self.trajectories) / len(self.trajectories)

  @property
  def num_infra_errors(self):
    return sum(t.outcome == "infra_error" for t in self.trajectories)

  def outcome_counts(self):
    return {outcome: sum(t.outcome == outcome for t in self.trajectories)
            for outcome in trajectory_lib.OUTCOMES}

  def score_by_task(self):
    return dict(zip(self.task_ids, self.scores))


def as_evaluation(result, instances, keys):
  """An Evaluation from what an evaluate function returned (an Evaluation, or a pair
  (scores, trajectories), whose rollouts are taken to be one per instance
  and whose generated tokens are counted from the trajectories)."""
  if isinstance(result, Evaluation):
    if list(result.task_ids) != [i.id for i in instances]:
      raise ValueError("The evaluate function returned results for tasks "
                       f"{list(result.task_ids)[:3]}... but was asked for "
                       f"{[i.id for i in instances][:3]}...; return one result per instance, in "
                       "order.")
    return result
  try:
    scores, trajectories = result
  except (TypeError, ValueError):
    raise TypeError("evaluate(harness, instances, sample_keys) must return an Evaluation or "
                    f"a pair (scores, trajectories); got {type(result).__name__}.") from None
  return Evaluation(tuple(i.id for i in instances), tuple(keys),
                    tuple(float(s) for s in scores), tuple(trajectories),
                    rollouts=len(instances),
                    generated_tokens=sum(t.num_completion_tokens for t in trajectories))


def collect(runtime, domain, harness, instances, seeds, sampling, infra_retries=INFRA_RETRIES,
            episode_ids=None):
  """Runs one episode per (instance, seed) (all in flight together), retries infrastructure
  failures, scores them; returns the Evaluation (task_ids and sample_keys per episode).

  Args:
    instances, seeds: one seed (the episode's sampling seed) per instance; an instance may
      appear several times (G samples of a training prompt).
    sampling: SamplingParams of every episode; its seed is replaced by the episode's.
    infra_retries: extra attempts for an episode that ends "infra_error".
    episode_ids: one name per episode for its trajectory (default "").
  """
  return collect_many(runtime, domain, [(harness, instances, seeds, episode_ids)], sampling,
                      infra_retries)[0]


def run_batches(runtime, batches):
  """[[Trajectory]] of batches [(harness, [Episode])]: all in flight together through
  runtime.run_many, or one batch after another with run_episodes on a runtime without it."""
  batches = [(harness, list(episodes)) for harness, episodes in batches]
  run_many = getattr(runtime, "run_many", None)
  if run_many is not None:
    return [list(trajectories) for trajectories in run_many(batches)]
  return [list(runtime.run_episodes(harness, episodes)) if episodes else []
          for harness, episodes in batches]


def collect_many(runtime, domain, jobs, sampling, infra_retries=INFRA_RETRIES):
  """collect for several jobs at once (module docstring); returns one Evaluation per job.

  Args:
    jobs: [(harness, instances, seeds)] or [(harness, instances, seeds, episode_ids)]: what
      collect takes, per job.
    sampling, infra_retries: as collect's, for every job.
  """
  prepared = []
  for job in jobs:
    harness, instances, seeds, *rest = job
    instances, seeds = list(instances), [int(seed) for seed in seeds]
    if len(instances) != len(seeds):
      raise ValueError(f"collect got {len(instances)} instances but {len(seeds)} seeds; give "
                       "one seed per instance.")
    episode_ids = list((rest[0] if rest else None) or [""] * len(instances))
    prepared.append((harness, instances, seeds, episode_ids))

  def episodes(job, indices):
    _, instances, seeds, episode_ids = job
    return [domain_lib.make_episode(domain, instances[i], sampling.replace(seed=seeds[i]),
                                    episode_id=episode_ids[i]) for i in indices]

  trajectories = run_batches(runtime, [(job[0], episodes(job, range(len(job[1]))))
                                       for job in prepared])
  rollouts = [len(job[1]) for job in prepared]
  generated_tokens = [sum(t.num_completion_tokens for t in batch) for batch in trajectories]
  for _ in range(infra_retries):
    failed = [[i for i, t in enumerate(batch) if t.outcome == "infra_error"]
              for batch in trajectories]
    if not any(failed):
      break
    retried = run_batches(runtime, [(job[0], episodes(job, indices))
                                    for job, indices in zip(prepared, failed)])
    for number, (indices, again) in enumerate(zip(failed, retried)):
      rollouts[number] += len(indices)
      generated_tokens[number] += sum(t.num_completion_tokens for t in again)
      for index, trajectory in zip(indices, again):
        trajectories[number][index] = trajectory
  # One verification call over every job's finished episodes (a judge answers them together).
  ok = [(number, index) for number, batch in enumerate(trajectories)
        for index, trajectory in enumerate(batch) if trajectory.ok]
  verified = domain_lib.verify_episodes(
      domain, [prepared[n][1][i] for n, i in ok], [trajectories[n][i].answer for n, i in ok],
      [trajectories[n][i] for n, i in ok])
  scores = [[0.0] * len(batch) for batch in trajectories]  # not ended "ok": scores 0
  for (number, index), score in zip(ok, verified):
    scores[number][index] = score
  return [Evaluation(tuple(i.id for i in job[1]), tuple(job[2]), tuple(scores[number]),
                     tuple(trajectories[number]), rollouts=rollouts[number],
                     generated_tokens=generated_tokens[number])
          for number, job in enumerate(prepared)]


def evaluate_many(evaluate, jobs):
  """[Evaluation] of jobs [(harness, instances, sample_keys)]: through evaluate.evaluate_many
  (every job's episodes in flight together) when evaluate has it, else one job after
  another. The results are the same either way (module docstring)."""
  jobs = [(harness, list(instances), [int(key) for key in keys])
          for harness, instances, keys in jobs]
  many = getattr(evaluate, "evaluate_many", None)
  results = many(jobs) if many is not None and jobs else [
      evaluate(harness, instances, keys) for harness, instances, keys in jobs]
  return [as_evaluation(result, instances, keys)
          for result, (_, instances, keys) in zip(results, jobs)]


@dataclasses.dataclass(frozen=True)
class Evaluator:
  """evaluate(harness, instances, sample_keys) -> Evaluation, run on a HarnessRuntime.

  Attributes:
    runtime: a HarnessRuntime serving the model at the weights being evaluated.
    domain: the tasks.Domain (tools per instance, verify).
    sampling: SamplingParams of every episode; its seed is replaced by the sample key.
    weights_id: names the weights the runtime serves; search and the gate key their caches
      by it.
    infra_retries: extra attempts for an episode that ends "infra_error".
  """
  runtime: object
  domain: object
  sampling: object
  weights_id: str | None = None
  infra_retries: int = INFRA_RETRIES

  def __call__(self, harness, instances: Sequence[domain_lib.Instance], keys):
    instances, keys = list(instances), [int(key) for key in keys]
    if len(instances) != len(keys):
      raise ValueError(f"evaluate got {len(instances)} instances but {len(keys)} sample keys; "
                       "give one sample key per instance.")
    return collect(self.runtime, self.domain, harness, instances, keys, self.sampling,
                   self.infra_retries)

  def evaluate_many(self, jobs):
    """[Evaluation] of jobs [(harness, instances, sample_keys)], all in flight together."""
    for _, instances, keys in jobs:
      if len(list(instances)) != len(list(keys)):
        raise ValueError(f"evaluate got {len(list(instances))} instances but {len(list(keys))} "
                         "sample keys; give one sample key per instance.")
    return collect_many(self.runtime, self.domain, jobs, self.sampling, self.infra_retries)


def make_evaluate(runtime, domain, sampling, weights_id=None, infra_retries=INFRA_RETRIES):
  """The Evaluator of (runtime, domain, sampling) at weights_id (see Evaluator)."""
  return Evaluator(runtime, domain, sampling, weights_id, infra_retries)
