"""Rollouts: run a harness on task instances with the current weights and score them.

  batch = rollouts.collect(runtime, domain, harness, instances, sampling, num_samples=8,
                           seed_key=("weight", step))
  batch.trajectories[i][g], batch.scores[i][g]     # instance i, sample g

Every episode's seed is a hash of (run seed, seed_key, instance id, sample index): two
harnesses evaluated with the same seed_key on the same instances see the same random streams
(common random numbers), and a resumed run replays the same seeds.

Scores: domain.verify on episodes that ended "ok"; 0 for harness errors and timeouts (they
are the harness's failures); infra errors score 0 too but are counted apart, since they are
not evidence against the harness, and are never trained on.
"""
import dataclasses
import hashlib

from absl import logging

from whale_jax import tasks


def episode_seed(run_seed, seed_key, instance_id, sample_index):
  """A 31-bit seed that depends only on its arguments."""
  text = repr((int(run_seed), tuple(seed_key), str(instance_id), int(sample_index)))
  return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") % 2**31


@dataclasses.dataclass
class RolloutBatch:
  """num_samples trajectories and scores per instance, in instance order."""
  instances: list
  trajectories: list  # [instance][sample] -> harness.Trajectory
  scores: list        # [instance][sample] -> float

  @property
  def num_rollouts(self):
    return sum(len(group) for group in self.trajectories)

  @property
  def num_generated_tokens(self):
    return sum(t.num_completion_tokens for group in self.trajectories for t in group)

  def flat(self):
    """[(instance, trajectory, score)] over all rollouts."""
    return [(instance, trajectory, score)
            for instance, group, scores in zip(self.instances, self.trajectories, self.scores)
            for trajectory, score in zip(group, scores)]

  def mean_score(self):
    flat = [score for scores in self.scores for score in scores]
    return sum(flat) / len(flat) if flat else 0.0

  def per_instance_mean(self):
    """{instance id: mean score over its samples}."""
    return {instance.id: sum(scores) / len(scores)
            for instance, scores in zip(self.instances, self.scores)}

  def outcome_counts(self):
    counts = {}
    for group in self.trajectories:
      for trajectory in group:
        counts[trajectory.outcome] = counts.get(trajectory.outcome, 0) + 1
    return counts


def score(domain, instance, trajectory):
  if not trajectory.ok:
    return 0.0
  return float(domain.verify(instance, trajectory.answer, trajectory))


def collect(runtime, domain, harness, instances, sampling, num_samples=1, seed_key=(),
            run_seed=0):
  """Runs num_samples episodes per instance (all in flight together) and scores them."""
  episodes = []
  for instance in instances:
    for sample_index in range(num_samples):
      seed = episode_seed(run_seed, seed_key, instance.id, sample_index)
      episodes.append(tasks.make_episode(domain, instance, sampling.replace(seed=seed),
                                         episode_id=f"{instance.id}#{sample_index}"))
  flat = runtime.run_episodes(harness, episodes) if episodes else []
  failed = [t for t in flat if t.outcome == "infra_error"]
  if len(failed) * 2 > len(flat):
    logging.warning("%d of %d episodes failed outside the harness (infra_error), e.g.: %s",
                    len(failed), len(flat), failed[0].error[:500])
  trajectories, scores = [], []
  for i, instance in enumerate(instances):
    group = flat[i * num_samples:(i + 1) * num_samples]
    trajectories.append(group)
    scores.append([score(domain, instance, trajectory) for trajectory in group])
  return RolloutBatch(list(instances), trajectories, scores)
