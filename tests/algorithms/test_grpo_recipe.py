"""GRPO as the recipes run it: clipping against the weights that sampled, the reference KL,
DAPO dynamic sampling with refill, the per-episode token budget, adaptive WHALE's phase length.
"""
import collections
import dataclasses
import hashlib
import json
import math
import os
import types

import pytest

from tests.algorithms import tiny
from whale_jax import typed_config
from whale_jax.algorithms import builders
from whale_jax.algorithms import experiment
from whale_jax.algorithms import loop
from whale_jax.algorithms import samples as samples_lib
from whale_jax.algorithms import whale
from whale_jax.harness import Episode
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.harness import runtime as runtime_lib
from whale_jax.sampling import SamplingParams
from whale_jax.tasks import registry
from whale_jax.tokenization import load_tokenizer


def _constant_instance(task_id):
  """Half the instances (by a hash of the id) get a constant reward."""
  return hashlib.sha256(task_id.encode()).digest()[0] % 2 == 0


def _scripted_score(task_id, episode_id):
  """0.3 for every sample of a constant instance; else sample g scores g % 2."""
  if _constant_instance(task_id):
    return 0.3
  return float(int(episode_id.rsplit("#", 1)[1]) % 2)


def _scripted_domain(monkeypatch):
  original = builders.build_domain

  def build(section):
    domain = original(section)
    return dataclasses.replace(
        domain, verify=lambda instance, answer, trajectory=None: _scripted_score(
            instance.id, trajectory.episode_id))

  monkeypatch.setattr(builders, "build_domain", build)


def _rows(workdir):
  return [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]


@pytest.fixture
def observed(monkeypatch):
  """What the test sees from outside the recipe: weight-split episodes the runtime ran (by
  task id), and the trajectories each GRPO step handed to the sample builder."""
  seen = {"episodes": collections.Counter(), "trained": [], "trajectories": []}
  run_many = runtime_lib.HarnessRuntime.run_many   # run_episodes and batched evaluations

  def counting(self, batches):
    batches = [(harness, list(episodes)) for harness, episodes in batches]
    results = run_many(self, batches)
    for (_, episodes), trajectories in zip(batches, results):
      for episode in episodes:
        seen["episodes"][episode.task_id] += 1
      seen["trajectories"] += trajectories
    return results

  from_trajectories = samples_lib.from_trajectories

  def recording(trajectories, advantages=None, with_groups=False):
    if advantages is not None:  # GRPO
      seen["trained"].append(list(trajectories))
    return from_trajectories(trajectories, advantages, with_groups)

  monkeypatch.setattr(runtime_lib.HarnessRuntime, "run_many", counting)
  monkeypatch.setattr(samples_lib, "from_trajectories", recording)
  return seen


def test_vace_grpo_clips_against_the_sampling_weights_refills_and_keeps_the_budget(
    tmp_path, monkeypatch, observed):
  _scripted_domain(monkeypatch)
  config = tiny.tiny_config("vace")
  config.vace = dict(num_cycles=1, block_steps=2)
  config.loop.update(max_refill_rounds=6)
  config.training.optimizer = dict(learning_rate=1e-2, warmup_steps=0)
  config.training.samples_per_step = 2
  # Rows of 1,024 tokens, not the tiny config's 2,048: a row's attention costs a quarter as
  # much, and every episode of this domain still fits (dropped_samples is 0 below).
  config.training.row_length = 1024
  config.training.grpo = dict(ppo_epochs=2, num_minibatches=2, clip_epsilon=0.02,
                              kl_weight=0.1)
  config.runtime.update(max_episode_tokens=16)
  workdir = str(tmp_path / "vace")
  summary = experiment.run(config, workdir, show_progress=False)
  rows = [row for row in _rows(workdir) if row["phase"] == "weight"]
  assert len(rows) == 2

  # Clipping: the first optimizer step of every batch is on-policy (ratio 1: nothing
  # clipped); the steps after it are off-policy and clipped.
  for row in rows:
    assert row["dropped_samples"] == 0
    assert row["optimizer_steps"] == 2 * 2  # ppo_epochs x num_minibatches
    assert row["first_step_clip_fraction"] == 0.0
    assert row["clip_fraction"] > 0.0
  # KL to the frozen initial weights: 0 before the first update, then positive.
  assert abs(rows[0]["first_step_kl_to_reference"]) < 1e-6
  assert rows[-1]["first_step_kl_to_reference"] > 1e-5

  # Dynamic sampling: every trained batch holds prompt_batch informative groups.
  prompt_batch, group_size = config.loop.prompt_batch, config.loop.num_samples
  assert len(observed["trained"]) == 2
  for row, trajectories in zip(rows, observed["trained"]):
    assert len(trajectories) == prompt_batch * group_size  # groups, in order
    for start in range(0, len(trajectories), group_size):
      group = trajectories[start:start + group_size]
      assert len({t.task_id for t in group}) == 1
      assert len({_scripted_score(t.task_id, t.episode_id) for t in group}) > 1
    assert row["kept_groups"] == prompt_batch
  # ... and every refill round's rollouts are counted: the runtime ran exactly the episodes
  # the counts say, and more than one round per step when a round was short.
  weight_ids = {instance.id for instance in
                builders.build_domain(typed_config.read(
                    registry.DomainSection, config.domain.to_dict())).splits()["weight"]}
  weight_episodes = sum(count for task_id, count in observed["episodes"].items()
                        if task_id in weight_ids)
  assert summary["counts"]["weight"] == weight_episodes
  assert weight_episodes == sum(row["groups_sampled"] for row in rows) * group_size
  assert sum(row["refill_rounds"] for row in rows) >= 1
  assert weight_episodes > 2 * prompt_batch * group_size
  for row in rows:
    assert row["rollouts_discarded"] == (row["groups_sampled"] - prompt_batch) * group_size

  # The per-episode token budget holds over all calls of every recorded episode.
  assert observed["trajectories"]
  for trajectory in observed["trajectories"]:
    assert sum(len(c.token_ids) for call in trajectory.calls for c in call.completions) <= 16


TOKENIZER = load_tokenizer("byte")


def test_episode_token_budget_clips_then_refuses_calls_and_thinking_switch_reaches_chat():
  backend = ScriptedBackend(TOKENIZER, replies=lambda prompt: "abcdefghijklmnopqrstuvwxyz")
  source = ("def run(task, llm, tools):\n"
            "  out = []\n"
            "  for _ in range(4):\n"
            "    try:\n"
            "      out.append(llm.chat([{'role': 'user', 'content': 'go'}], max_tokens=10))\n"
            "    except Exception as error:\n"
            "      out.append(type(error).__name__ + ':' + str(error))\n"
            "  return '|'.join(out)\n")
  with HarnessRuntime(backend, TOKENIZER, num_workers=1, timeout_seconds=10.0,
                      max_episode_tokens=25, enable_thinking=False) as runtime:
    episode = Episode(task_id="t", task={}, tools={},
                      sampling=SamplingParams(max_tokens=12, seed=1))
    [trajectory] = runtime.run_episodes(Harness(source), [episode])
  assert trajectory.outcome == "ok", trajectory.error
  lengths = [len(c.token_ids) for call in trajectory.calls for c in call.completions]
  assert lengths == [10, 10, 5]  # 25 tokens: the third call gets what is left
  parts = trajectory.answer.split("|")
  assert parts[:3] == ["abcdefghij", "abcdefghij", "abcde"]
  assert parts[3].startswith("ValueError:llm.chat(): this episode has generated 25 of its 25")
  assert len(trajectory.calls) == 3  # the refused call reached no model
  prompt = TOKENIZER.decode(trajectory.calls[0].prompt_token_ids)
  assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_runtime_refuses_a_bad_budget_or_thinking_setting_by_key():
  backend = ScriptedBackend(TOKENIZER, replies="x")
  with pytest.raises(ValueError, match="config.runtime.max_episode_tokens"):
    HarnessRuntime(backend, TOKENIZER, num_workers=1, max_episode_tokens=-1)
  with pytest.raises(ValueError, match="config.runtime.enable_thinking"):
    HarnessRuntime(backend, TOKENIZER, num_workers=1, enable_thinking="no")


def test_adaptive_weight_phase_can_end_after_0_2_epoch():
  # SearchQA's numbers (SPEC 1.3): 74 steps per epoch, so 0.2 epoch = 15 steps.
  run = types.SimpleNamespace(splits={"weight": list(range(74 * 256))},
                              loop=types.SimpleNamespace(prompt_batch=256),
                              state=types.SimpleNamespace(phase_rewards=[]))
  window = loop.steps_for_epochs(run, 0.2)
  assert window == math.ceil(0.2 * 74) == 15
  run.state.phase_rewards = [0.5] * 14
  assert not whale.adaptive_stop(run, window, window)
  run.state.phase_rewards = [0.5] * 15  # a flat reward: no new best after the first step
  assert whale.adaptive_stop(run, window, window)
  run.state.phase_rewards = [0.5] * 14 + [0.9]  # a new best at step 15: continue
  assert not whale.adaptive_stop(run, window, window)


@pytest.mark.parametrize("section, values, message", [
    ("loop", dict(max_refill_rounds=-1), "config.loop.max_refill_rounds=-1 must be >= 0"),
    ("loop", dict(max_refill_rounds=2, filter_zero_advantage=False),
     "config.loop.max_refill_rounds=2 refills"),
    ("loop", dict(overlong_filter="yes"), "config.loop.overlong_filter='yes' is str"),
    ("loop", dict(advantage_normalization="loo"), "config.loop.advantage_normalization='loo'"),
    ("runtime", dict(max_episode_tokens=1.5), "config.runtime.max_episode_tokens=1.5"),
    ("runtime", dict(enable_thinking="off"), "config.runtime.enable_thinking='off'"),
])
def test_new_keys_are_refused_at_the_config_boundary_by_key_path(section, values, message,
                                                                 tmp_path):
  from whale_jax.algorithms import config_check  # pylint: disable=g-import-not-at-top
  from whale_jax.algorithms import experiment_config  # pylint: disable=g-import-not-at-top
  config = tiny.tiny_config("vace").to_dict()
  config[section] = {**config.get(section, {}), **values}
  with pytest.raises(config_check.ConfigError) as error:
    experiment_config.parse(config, str(tmp_path / "run"))
  assert str(error.value).startswith(message), str(error.value)


def test_new_keys_pass_the_config_boundary(tmp_path):
  from whale_jax.algorithms import experiment_config  # pylint: disable=g-import-not-at-top
  config = tiny.tiny_config("vace").to_dict()
  config["loop"].update(max_refill_rounds=3, overlong_filter=True, overlong_cache_tokens=4,
                        advantage_normalization="rloo")
  config["runtime"].update(max_episode_tokens=8192, enable_thinking=False)
  config["training"]["grpo"] = dict(ppo_epochs=2, num_minibatches=4, kl_weight=0.01)
  experiment_config.parse(config, str(tmp_path / "run"))


def test_reference_is_the_initial_weights_after_a_restore():
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from configs import presets  # pylint: disable=g-import-not-at-top
  from whale_jax.algorithms import options  # pylint: disable=g-import-not-at-top
  from whale_jax.algorithms import sections  # pylint: disable=g-import-not-at-top
  from whale_jax.algorithms import policy as policy_lib  # pylint: disable=g-import-not-at-top
  mesh = builders.build_mesh(sections.MeshSection(data=1, num_devices=1))
  model_config, params, _ = builders.load_model(
      typed_config.read(sections.ModelSection, presets.tiny_model()), mesh)
  initial = jax.device_get(params)
  policy = policy_lib.Policy(model_config, params, TOKENIZER, mesh, options.PolicyConfig(
      grpo=dict(keep_reference=True), sampler=dict(max_slots=2, max_cache_length=256)))
  try:
    restored = dict(policy.state)
    restored["params"] = jax.tree.map(lambda x: x + 1.0, policy.state["params"])
    policy.set_state(restored)  # what loop.restore does on resume
    reference = jax.device_get(policy.reference.params)
    for ref, first in zip(jax.tree.leaves(reference), jax.tree.leaves(initial)):
      np.testing.assert_array_equal(np.asarray(ref), np.asarray(first).astype(ref.dtype))
  finally:
    policy.close()
