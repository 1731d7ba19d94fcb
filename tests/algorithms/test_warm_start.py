"""Warm start: teacher episodes (an answer the teacher was not shown is left out), teacher
mixes, and a warm start from another solver's weights."""
import os

import numpy as np
import pytest
from safetensors import safe_open

from whale_jax import tasks
from whale_jax.algorithms import experiment
from whale_jax.algorithms import options
from whale_jax.algorithms import warm_start
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import SamplingParams
from whale_jax.tasks.qa import generator as synthetic_qa
from whale_jax.tasks.qa import teacher as synthetic_qa_teacher
from whale_jax.tokenization import load_tokenizer

SIZES = {"weight": 0, "harness": 0, "validation": 0, "test": 80}


def _teacher_trajectories(harness_source, domain, world):
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, replies=synthetic_qa_teacher.teacher_replies(
      world[1], world[0]))
  instances = domain.splits()["test"]
  episodes = [tasks.make_episode(domain, i, SamplingParams(max_tokens=64)) for i in instances]
  with HarnessRuntime(backend, tokenizer, num_workers=2) as runtime:
    return instances, runtime.run_episodes(Harness(harness_source), episodes)


def test_grounded_leaves_out_answers_past_the_passage_cut_only():
  domain = tasks.get_domain("synthetic_qa", seed=3, split_sizes=SIZES,
                            seed_harness="searchqa_compact")
  world = synthetic_qa.generate_world(seed=3)
  questions = {q["id"]: q for q in world[1]}
  texts = {p["id"]: p["text"] for p in world[0]}
  instances, trajectories = _teacher_trajectories(domain.seed_harness, domain, world)
  # Under h0 (two turns, 12 words) the teacher searches the question's entity, then answers
  # a one-hop question or searches a two-hop question's bridge entity (and the episode ends).
  # What it answers or searches second is shown when it is among the first 12 words of the
  # first passage.
  titles = {p["id"]: p["title"] for p in world[0]}
  expected = []
  for instance in instances:
    question = questions[instance.id]
    words = [w.strip(".") for w in texts[question["supporting_ids"][0]].split()[:12]]
    second = (titles[question["supporting_ids"][1]] if question["hops"] == 2 else
              question["golden_answers"][0])
    expected.append(second in words)
  assert [warm_start.grounded(t) for t in trajectories] == expected
  assert not all(expected) and any(expected)
  # With enough turns and passage every teacher episode is grounded.
  _, trajectories = _teacher_trajectories(synthetic_qa_teacher.teacher_harness_source(),
                                          domain, world)
  assert all(warm_start.grounded(t) for t in trajectories)


def test_batch_counts_split_each_batch_by_the_teachers_shares():
  assert warm_start.batch_counts(((2, 12, 1.0),), 48) == [48]
  assert warm_start.batch_counts(((2, 12, 0.5), (3, 64, 0.5)), 48) == [24, 24]
  assert warm_start.batch_counts(((2, 12, 0.3), (3, 64, 0.7)), 10) == [3, 7]
  assert warm_start.batch_counts(((1, 8, 0.25), (2, 12, 0.25), (3, 64, 0.5)), 6) == [2, 2, 2]


def test_bad_teacher_mixes_and_init_solvers_are_refused_with_the_key(tmp_path):
  with pytest.raises(ValueError, match=r"config\.warm_start\.teachers: the shares sum to 0\.9"):
    options.WarmStartConfig(teachers=((2, 12, 0.4), (3, 64, 0.5)))
  with pytest.raises(ValueError, match=r"teachers\[1\]=\(3, 64\): give \(max_turns"):
    options.WarmStartConfig(teachers=((2, 12, 0.5), (3, 64)))
  with pytest.raises(ValueError, match=r"teachers\[0\] max_doc_tokens=0 must be >= 1"):
    options.WarmStartConfig(teachers=((2, 0, 1.0),))
  with pytest.raises(ValueError, match=r"init_solver='.*nowhere' has no config\.json"):
    options.WarmStartConfig(init_solver=str(tmp_path / "nowhere"))


def _smoke(workdir, *overrides):
  from configs import embedded_solver  # pylint: disable=import-outside-toplevel
  config = embedded_solver.get_config("smoke")
  for key, value in overrides:
    config_dict = config
    *parents, last = key.split(".")
    for parent in parents:
      config_dict = config_dict[parent]
    config_dict[last] = value
  return experiment.run(config, str(workdir), show_progress=False)


def _tensors(solver_dir):
  with safe_open(os.path.join(solver_dir, "model.safetensors"), "numpy") as reader:
    return {name: reader.get_tensor(name) for name in reader.keys()}


@pytest.mark.slow  # two warm starts end to end: ~70 s on 2 cores
def test_a_mixed_warm_start_starts_from_the_init_solver_and_scores_every_teacher(tmp_path):
  """The real path: two smoke warm starts through experiment.run (tokenizer training, teacher
  episodes in the sandboxed runtime, SFT, evaluation, export), the second from the first's
  exported solver with two teacher harnesses. At learning rate 0 the second exports the
  first's tensors unchanged (read back from the safetensors files), so the weights did come
  from init_solver; its evaluation scores h0 and each teacher harness."""
  first = _smoke(tmp_path / "first")
  assert set(first) == {"h0", "teacher_harness"}
  solver = str(tmp_path / "first" / "solver")
  second = _smoke(tmp_path / "second", ("warm_start.init_solver", solver),
                  ("warm_start.teachers", ((2, 12, 0.5), (3, 64, 0.5))),
                  ("training.optimizer.learning_rate", 0.0))
  assert set(second) == {"h0", "teacher_harness_2x12", "teacher_harness_3x64"}
  assert all(0.0 <= value <= 1.0 for value in second.values())
  assert sorted(os.listdir(tmp_path / "second")).count("teacher_samples_3x64.npz") == 1
  assert os.path.exists(tmp_path / "second" / "teacher_samples_2x12.npz")
  before, after = _tensors(solver), _tensors(tmp_path / "second" / "solver")
  assert sorted(before) == sorted(after) and len(before) > 5
  for name, value in before.items():
    np.testing.assert_array_equal(after[name], value, err_msg=name)
  with open(os.path.join(solver, "tokenizer.json"), encoding="utf-8") as a, open(
      tmp_path / "second" / "solver" / "tokenizer.json", encoding="utf-8") as b:
    assert a.read() == b.read()
  # A config.model whose shape differs from init_solver's is refused, naming the key.
  with pytest.raises(ValueError, match=r"config\.model\.embed_dim=48 differs from the "
                     r"init_solver"):
    _smoke(tmp_path / "third", ("warm_start.init_solver", solver), ("model.embed_dim", 48))
