"""Algorithm pieces against hand-computed expectations: samples, data cursor, budgets."""
import types

import pytest

from whale_jax.algorithms import experiment
from whale_jax.algorithms import loop
from whale_jax.algorithms import options
from whale_jax.algorithms import policy as policy_lib
from whale_jax.algorithms import samples
from whale_jax.algorithms import whale
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import grouped


def _trajectory(calls):
  return trajectory_lib.Trajectory(
      episode_id="e", task_id="t", harness_hash="h", outcome="ok", answer="a",
      calls=[trajectory_lib.LLMCall(
          method="chat", messages=None, prompt=None, prompt_token_ids=prompt, sampling={},
          completions=[trajectory_lib.RecordedCompletion(ids, [-0.5] * len(ids), "", "stop")
                       for ids in completions], started_seconds=0.0, duration_seconds=0.0)
             for prompt, completions in calls])


def test_each_call_completion_is_one_sample_trained_on_its_completion_only():
  trajectory = _trajectory([([5, 6, 7], [[8, 9]]), ([5, 6, 7, 8, 9, 3, 4], [[10], [11, 12]])])
  result = samples.from_trajectory(trajectory, advantage=0.5)
  assert [s.token_ids.tolist() for s in result] == [[5, 6, 7, 8, 9], [5, 6, 7, 8, 9, 3, 4, 10],
                                                    [5, 6, 7, 8, 9, 3, 4, 11, 12]]
  assert result[0].loss_mask.tolist() == [0, 0, 0, 1, 1]
  assert result[2].loss_mask.tolist() == [0] * 7 + [1, 1]
  assert result[1].sampler_logprobs.tolist() == [0] * 7 + [-0.5]
  assert all(s.advantage == 0.5 for s in result)


def test_too_long_samples_are_dropped_and_counted():
  """Policy.train is the one place a sample is dropped for its length: the samples of a
  trajectory are all built, and train leaves out those longer than row_length (with their
  groups) and counts them."""
  trajectory = _trajectory([([1, 2], [[3]]), ([1] * 10, [[4, 5]]), ([1, 2, 3], [[6, 7]])])
  built, groups = samples.from_trajectories([trajectory], with_groups=True)
  assert [len(s.token_ids) for s in built] == [3, 12, 5] and groups == [0, 0, 0]
  trained, updated = [], []
  stand_in = types.SimpleNamespace(  # the Policy with a recording step in place of the model
      config=options.PolicyConfig(row_length=5), state={"params": "params"}, mesh=None,
      _step=lambda loss: loss, _sampler_params=lambda params: params,
      _train_epochs=lambda step, chunk, epochs, history, groups: trained.append(
          (step, chunk, epochs, groups)),
      sampler=types.SimpleNamespace(update_params=updated.append))
  result = policy_lib.Policy.train(stand_in, built, "rsft", epochs=2, groups=["a", "b", "c"])
  assert (result.num_samples, result.num_dropped, result.history) == (2, 1, [])
  assert trained == [("rsft", [built[0], built[2]], 2, ["a", "c"])] and updated == ["params"]
  result = policy_lib.Policy.train(stand_in, built[1:2], "grpo")
  assert (result.num_samples, result.num_dropped) == (0, 1) and len(trained) == 1


def test_mean_at_k_splits_into_k_evaluations_and_their_spread():
  """Evaluation g is sample g of every task: scores [[1, 0, 1], [0, 0, 1]] (task x sample)
  make evaluations 0.5, 0.0 and 1.0, whose sample standard deviation is 0.5 by hand."""
  scores = (1.0, 0.0, 1.0, 0.0, 0.0, 1.0)
  evaluation = types.SimpleNamespace(scores=scores, trajectories=(None,) * 6)
  batch = grouped.RolloutBatch(instances=("a", "b"), evaluation=evaluation, num_samples=3)
  assert batch.per_sample_means() == [0.5, 0.0, 1.0]
  assert loop.evaluation_std([0.5, 0.0, 1.0]) == pytest.approx(0.5)
  assert loop.evaluation_std([0.25]) is None


def _fake_run(num_weight, seed=0, prompt_batch=4):
  pool = [types.SimpleNamespace(id=f"w{i}") for i in range(num_weight)]
  domain = types.SimpleNamespace(splits=lambda: {"weight": pool, "harness": [1] * 6})
  return types.SimpleNamespace(
      splits=domain.splits(), state=loop.LoopState(incumbent="src"),
      loop=options.LoopConfig(seed=seed, prompt_batch=prompt_batch, candidates_per_iteration=3),
      counts=types.SimpleNamespace(training=0))


def test_data_cursor_visits_each_instance_once_per_epoch_and_persists():
  run = _fake_run(10)
  first = [i.id for i in loop.next_prompts(run, 6)]
  second = [i.id for i in loop.next_prompts(run, 4)]
  assert sorted(first + second) == [f"w{i}" for i in range(10)]
  assert run.state.cursor == 10 and loop.epochs_done(run) == 1.0
  third = [i.id for i in loop.next_prompts(run, 10)]
  assert sorted(third) == sorted(first + second) and third != first + second  # new order


def test_steps_for_epochs_rounds_up():
  run = _fake_run(10, prompt_batch=4)
  assert loop.steps_for_epochs(run, 0.6) == 2  # 6 prompts / 4 per step
  assert loop.steps_for_epochs(run, 1.0) == 3
  assert loop.steps_for_epochs(run, 0.01) == 1


def test_search_budget_fits_the_remaining_rollouts():
  run = _fake_run(10)  # harness split of 6, 3 candidates per iteration
  run.counts.training = 100
  # Remaining 50: the incoming evaluation (6) + 2 iterations of 18 = 42 <= 50 < 60.
  assert whale.search_budget(run, 10, budget_rollouts=150) == 3
  assert whale.search_budget(run, 2, budget_rollouts=150) == 2
  assert whale.search_budget(run, 10, budget_rollouts=104) == 0
  assert whale.search_budget(run, 7, budget_rollouts=0) == 7


def test_a_weight_step_starts_only_when_its_rollouts_fit():
  run = _fake_run(10, prompt_batch=4)
  per_step = 4 * run.loop.num_samples
  run.counts.training = 100
  assert whale.weight_step_fits(run, budget=100 + per_step)
  assert not whale.weight_step_fits(run, budget=100 + per_step - 1)
  assert whale.weight_step_fits(run, budget=0)  # no budget


@pytest.mark.parametrize("rewards, patience, stop", [
    ([0.1, 0.2, 0.3, 0.4], 2, False),       # window means 0.15, 0.25, 0.35: still improving
    ([0.5, 0.1, 0.1, 0.1, 0.1], 3, True),   # means 0.5, 0.3, 0.1, ...: none above the start
    ([0.5, 0.1, 0.1, 0.1, 0.1], 6, False),  # ... but patience 6 is not yet reached
    ([0.1, 0.5, 0.1, 0.1, 0.2], 3, True),   # means 0.3, 0.3, 0.1, 0.15: a tie is no new best
    ([0.3, 0.3], 3, False),                 # shorter than the patience: too early to stop
])
def test_adaptive_weight_phase_stops_after_patience_without_a_new_window_best(rewards,
                                                                            patience, stop):
  run = _fake_run(10)
  run.state.phase_rewards = rewards
  assert whale.adaptive_stop(run, window=2, patience=patience) == stop


def test_comparison_table_reports_paired_differences():
  def summary(final, per_task):
    return {"counts": {"weight": 4, "harness": 2, "evaluation": 6}, "final_test_mean": final,
            "best_test_mean": final, "training_rollouts": 6, "final_per_task": per_task}

  # Per-question differences whale - other: 0.5, 0.0, 1.0, -0.5 (q5 only in one run).
  whale = summary(0.625, {"q1": 1.0, "q2": 0.5, "q3": 1.0, "q4": 0.0, "q5": 1.0})
  other = summary(0.375, {"q1": 0.5, "q2": 0.5, "q3": 0.0, "q4": 0.5})
  table = experiment.comparison_table({"whale": whale, "harness_only": other})
  assert "| whale | 0.625 | 0.625 | 6 | 4 | 2 | 6 |" in table
  # mean 0.25; sample std of (0.5, 0, 1, -0.5) = 0.6455; / sqrt(4) = 0.3227
  assert "whale - harness_only: +25.0 points (paired standard error 32.3 over 4 test " in table


def test_test_means_per_task_domain_by_hand():
  instances = [types.SimpleNamespace(id=i, public={"domain": d})
               for i, d in (("t1", "hr"), ("t2", "finance"), ("t3", "hr"))]
  per_task = {"t1": 1.0, "t2": 0.25, "t3": 0.5}
  assert loop.per_domain_means(instances, per_task) == {"finance": 0.25, "hr": 0.75}
  assert loop.per_domain_means([types.SimpleNamespace(id="q", public={})], {"q": 1.0}) == {}
