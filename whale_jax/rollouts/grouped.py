"""Training rollouts: G episodes per instance with the current weights, grouped for training.

  batch = grouped.collect(runtime, domain, harness, instances, sampling, num_samples=8,
                          seed_key=("weight", step), run_seed=0)
  batch.trajectories[i][g], batch.scores[i][g]     # instance i, sample g
  batch.evaluation                                 # the flat rollouts.collector.Evaluation

The episodes are run, retried and scored by the one collector,
whale_jax.rollouts.collector.collect (see there: infra errors are retried once, then score 0,
are counted apart and are never trained on); a RolloutBatch is that Evaluation seen as
[instance][sample] groups. Episode g of instance i has the seed
seeds.derive_seed(run_seed, "episode", seed_key, instance id, g): two harnesses evaluated
with the same seed_key on the same instances see the same random streams (common random
numbers), and a resumed run replays the same seeds.
"""
import dataclasses

from absl import logging

from whale_jax import seeds as seeds_lib
from whale_jax.rollouts import collector
from whale_jax.rollouts import sharding


def episode_seed(run_seed, seed_key, instance_id, sample_index):
  """The seed of episode sample_index of instance_id (module docstring)."""
  return seeds_lib.derive_seed(run_seed, "episode", tuple(seed_key), str(instance_id),
                               int(sample_index))


@dataclasses.dataclass(frozen=True)
class RolloutBatch:
  """num_samples scored episodes per instance, in instance order (module docstring)."""
  instances: tuple
  evaluation: collector.Evaluation
  num_samples: int

  def _groups(self, values):
    return [list(values[i * self.num_samples:(i + 1) * self.num_samples])
            for i in range(len(self.instances))]

  @property
  def trajectories(self):
    """[instance][sample] -> harness.Trajectory (on a multi-host run, a
    rollouts.sharding.EpisodeRecord for each episode another host ran)."""
    return self._groups(self.evaluation.trajectories)

  @property
  def scores(self):
    """[instance][sample] -> float."""
    return self._groups(self.evaluation.scores)

  @property
  def num_rollouts(self):
    """Episodes run, retries included."""
    return self.evaluation.rollouts

  @property
  def num_generated_tokens(self):
    return self.evaluation.generated_tokens

  def flat(self):
    """[(instance, trajectory, score)] over all episodes."""
    return [(self.instances[i // self.num_samples], trajectory, score)
            for i, (trajectory, score) in enumerate(zip(self.evaluation.trajectories,
                                                        self.evaluation.scores))]

  def mean_score(self):
    return self.evaluation.success_rate

  def per_instance_mean(self):
    """{instance id: mean score over its samples}."""
    return {instance.id: sum(scores) / len(scores)
            for instance, scores in zip(self.instances, self.scores)}

  def per_sample_means(self):
    """[mean over instances of sample g's score for g < num_samples]: sample g of every
    instance taken as one evaluation of the split (so k evaluations of mean@k)."""
    scores = self.scores
    if not scores:
      return []
    return [sum(group[g] for group in scores) / len(scores) for g in range(self.num_samples)]

  def outcome_counts(self):
    counts = {}
    for trajectory in self.evaluation.trajectories:
      counts[trajectory.outcome] = counts.get(trajectory.outcome, 0) + 1
    return counts


def collect(runtime, domain, harness, instances, sampling, num_samples=1, seed_key=(),
            run_seed=0):
  """Runs num_samples episodes per instance (all in flight together) and scores them."""
  instances = tuple(instances)
  repeated = [instance for instance in instances for _ in range(num_samples)]
  seeds = [episode_seed(run_seed, seed_key, instance.id, index)
           for instance in instances for index in range(num_samples)]
  names = [f"{instance.id}#{index}" for instance in instances for index in range(num_samples)]
  evaluation = collector.collect(runtime, domain, harness, repeated, seeds, sampling,
                                 episode_ids=names)
  if evaluation.num_infra_errors * 2 > len(repeated):
    failed = [t for t in sharding.local(evaluation.trajectories) if t.outcome == "infra_error"]
    logging.warning("%d of %d episodes failed outside the harness (infra_error) after a "
                    "retry, e.g.: %s", evaluation.num_infra_errors, len(repeated),
                    failed[0].error[:500] if failed else "(on another host)")
  return RolloutBatch(instances, evaluation, num_samples)
