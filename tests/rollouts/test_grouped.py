"""Training rollouts (rollouts/grouped.py): episode seeds and the [instance][sample] batch."""
import types

from tests import test_seeds
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import grouped


def test_episode_seeds_depend_only_on_their_arguments():
  a = grouped.episode_seed(0, ("weight", 3), "q1", 2)
  assert a == grouped.episode_seed(0, ("weight", 3), "q1", 2)
  others = {grouped.episode_seed(1, ("weight", 3), "q1", 2),
            grouped.episode_seed(0, ("weight", 4), "q1", 2),
            grouped.episode_seed(0, ("weight", 3), "q2", 2),
            grouped.episode_seed(0, ("weight", 3), "q1", 1)}
  assert a not in others and len(others) == 4
  assert a == test_seeds.reference_seed(0, "episode", ["weight", 3], "q1", 2)


def test_training_rollouts_retry_infra_errors_and_group_by_instance():
  """The one collector under grouped.collect: an episode that fails outside the harness is
  run again with the same seed, counted as a rollout, and the batch is grouped [P][G]."""
  calls = []

  class FlakyRuntime:
    def run_episodes(self, harness, episodes):
      calls.append([(e.task_id, e.sampling.seed) for e in episodes])
      first = len(calls) == 1
      return [trajectory_lib.Trajectory(
          episode_id=e.episode_id, task_id=e.task_id, harness_hash="h",
          outcome="infra_error" if first and i == 1 else "ok", answer=e.task_id, calls=[],
          error="worker died" if first and i == 1 else "") for i, e in enumerate(episodes)]

  domain = types.SimpleNamespace(verify=lambda instance, answer, trajectory: float(
      answer == "p1"), tools=lambda instance: {})
  instances = [types.SimpleNamespace(id=f"p{i}", public={}) for i in range(2)]
  sampling = types.SimpleNamespace(replace=lambda seed: types.SimpleNamespace(seed=seed))
  batch = grouped.collect(FlakyRuntime(), domain, None, instances, sampling, num_samples=2,
                          seed_key=("weight", 0), run_seed=4)
  seeds = [grouped.episode_seed(4, ("weight", 0), f"p{i}", g) for i in range(2)
           for g in range(2)]
  assert calls == [list(zip(["p0", "p0", "p1", "p1"], seeds)), [("p0", seeds[1])]]
  assert batch.num_rollouts == 5
  assert batch.scores == [[0.0, 0.0], [1.0, 1.0]]
  assert [[t.outcome for t in group] for group in batch.trajectories] == [["ok"] * 2] * 2
  assert batch.per_instance_mean() == {"p0": 0.0, "p1": 1.0}
