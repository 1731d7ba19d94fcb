"""The evaluate function that search and the gate call, and the sample keys it is called with.

  evaluate = make_evaluate(runtime, domain, sampling, weights_id="step_1200")
  keys = sample_keys(instances, seed=0)                   # one sample key per task
  evaluation = evaluate(harness, instances, keys)         # a rollouts.collector.Evaluation
  evaluation.scores, evaluation.trajectories, evaluation.success_rate, evaluation.mean_turns
  evaluations = evaluate_many(evaluate, [(h, instances, keys) for h in candidates])  # at once

Any callable `evaluate(harness, instances, sample_keys) -> Evaluation` will do (tests pass
fakes). The sample key of a task is the seed of its episode: the runtime seeds llm call k of
the episode from (sample key, k), so two harnesses evaluated with the same keys draw the same
random streams (common random numbers), and an evaluation is identified by (harness hash,
weights id, task id, sample key) — the key of the evaluation cache
(whale_jax.search.evaluation_cache).

An Evaluator runs its episodes through the one episode collector,
whale_jax.rollouts.collector (collect; collect_many for several harnesses at once), as
training rollouts and test evaluations do: scoring and infrastructure retries are described
there. evaluate_many(evaluate, jobs) puts every job's episodes in flight together for an
evaluate function that has evaluate_many (Evaluator, the evaluation cache's
CachedEvaluator) and calls any other one job after another.
"""
import dataclasses
from typing import Sequence

from whale_jax import seeds as seeds_lib
from whale_jax.rollouts import collector
from whale_jax.tasks import domain as domain_lib


def sample_key(seed, task_id):
  """The sample key of task_id under seed (seeds.derive_seed(seed, "sample_key", task_id))."""
  return seeds_lib.derive_seed(seed, "sample_key", str(task_id))


def sample_keys(instances, seed):
  """One sample key per instance (see sample_key)."""
  return [sample_key(seed, instance.id) for instance in instances]


def as_evaluation(result, instances, keys):
  """An Evaluation from what an evaluate function returned (an Evaluation, or a pair
  (scores, trajectories), whose rollouts are taken to be one per instance
  and whose generated tokens are counted from the trajectories)."""
  if isinstance(result, collector.Evaluation):
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
  return collector.Evaluation(tuple(i.id for i in instances), tuple(keys),
                              tuple(float(s) for s in scores), tuple(trajectories),
                              rollouts=len(instances),
                              generated_tokens=sum(t.num_completion_tokens for t in trajectories))


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
  infra_retries: int = collector.INFRA_RETRIES

  def __call__(self, harness, instances: Sequence[domain_lib.Instance], keys):
    instances, keys = list(instances), [int(key) for key in keys]
    if len(instances) != len(keys):
      raise ValueError(f"evaluate got {len(instances)} instances but {len(keys)} sample keys; "
                       "give one sample key per instance.")
    return collector.collect(self.runtime, self.domain, harness, instances, keys,
                             self.sampling, self.infra_retries)

  def evaluate_many(self, jobs):
    """[Evaluation] of jobs [(harness, instances, sample_keys)], all in flight together."""
    for _, instances, keys in jobs:
      if len(list(instances)) != len(list(keys)):
        raise ValueError(f"evaluate got {len(list(instances))} instances but {len(list(keys))} "
                         "sample keys; give one sample key per instance.")
    return collector.collect_many(self.runtime, self.domain, jobs, self.sampling,
                                  self.infra_retries)


def make_evaluate(runtime, domain, sampling, weights_id=None,
                  infra_retries=collector.INFRA_RETRIES):
  """The Evaluator of (runtime, domain, sampling) at weights_id (see Evaluator)."""
  return Evaluator(runtime, domain, sampling, weights_id, infra_retries)
