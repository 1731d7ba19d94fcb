"""Scoring a harness on task instances: the one episode collector, and the evaluate function
that search and the gate call.

  evaluation = collect(runtime, domain, harness, instances, seeds, sampling)   # one per seed
  evaluate = make_evaluate(runtime, domain, sampling, weights_id="step_1200")
  keys = sample_keys(instances, seed=0)                   # one sample key per task
  evaluation = evaluate(harness, instances, keys)
  evaluation.scores, evaluation.trajectories, evaluation.success_rate, evaluation.mean_turns

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
"""
import dataclasses
from typing import Sequence

from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.search import seeds as seeds_lib
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
  instances, seeds = list(instances), [int(seed) for seed in seeds]
  if len(instances) != len(seeds):
    raise ValueError(f"collect got {len(instances)} instances but {len(seeds)} seeds; give "
                     "one seed per instance.")
  episode_ids = list(episode_ids or [""] * len(instances))

  def episodes(indices):
    return [domain_lib.make_episode(domain, instances[i], sampling.replace(seed=seeds[i]),
                                    episode_id=episode_ids[i]) for i in indices]

  trajectories = list(runtime.run_episodes(harness, episodes(range(len(instances))))
                      if instances else [])
  rollouts = len(instances)
  generated_tokens = sum(t.num_completion_tokens for t in trajectories)
  for _ in range(infra_retries):
    failed = [i for i, t in enumerate(trajectories) if t.outcome == "infra_error"]
    if not failed:
      break
    retried = runtime.run_episodes(harness, episodes(failed))
    rollouts += len(failed)
    generated_tokens += sum(t.num_completion_tokens for t in retried)
    for index, trajectory in zip(failed, retried):
      trajectories[index] = trajectory
  scores = [0.0] * len(trajectories)  # an episode that did not end "ok" scores 0
  ok = [index for index, trajectory in enumerate(trajectories) if trajectory.ok]
  verified = domain_lib.verify_episodes(domain, [instances[i] for i in ok],
                                        [trajectories[i].answer for i in ok],
                                        [trajectories[i] for i in ok])
  for index, score in zip(ok, verified):
    scores[index] = score
  return Evaluation(tuple(i.id for i in instances), tuple(seeds), tuple(scores),
                    tuple(trajectories), rollouts=rollouts, generated_tokens=generated_tokens)


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


def make_evaluate(runtime, domain, sampling, weights_id=None, infra_retries=INFRA_RETRIES):
  """The Evaluator of (runtime, domain, sampling) at weights_id (see Evaluator)."""
  return Evaluator(runtime, domain, sampling, weights_id, infra_retries)
