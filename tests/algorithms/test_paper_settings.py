"""The paper settings the configs express (SPEC 1.4, 1.10, behaviour metrics): SearchQA's test
set drawn per file, per-subset test means, correctness conditional on retrieval, and every
WHALE baseline's budget in configs/whale.py. Fast: no model is built."""
import json
import os
import types

import pytest

from configs import whale as whale_config
from tests.algorithms import paper_fixtures
from whale_jax.algorithms import experiment_config
from whale_jax.algorithms import loop
from whale_jax.algorithms import options
from whale_jax.algorithms import run_log
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.tasks.qa import builder as searchqa_domain


def _write_questions(path, stem, count):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as file:
    for i in range(count):
      file.write(json.dumps({"id": f"{stem}{i}", "question": f"{stem} question {i}?",
                             "golden_answers": [f"{stem}{i}"]}) + "\n")


@pytest.fixture
def question_files(tmp_path):
  pool = tmp_path / "train.jsonl"
  _write_questions(str(pool), "train", 12)
  tests = []
  for name, count in (("nq", 5), ("popqa", 7), ("bamboogle", 3)):
    path = tmp_path / name / "test.jsonl"
    _write_questions(str(path), name, count)
    tests.append(str(path))
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text(json.dumps({"id": "0", "title": "t", "text": "x"}) + "\n")
  return str(pool), tests, str(corpus)


def test_test_split_takes_n_of_each_file_and_is_reproducible(question_files):
  pool, tests, corpus = question_files
  make = lambda seed: searchqa_domain.searchqa_domain(
      questions=[pool], split_questions={"test": tests}, corpus=corpus, seed=seed,
      per_file_sizes={"test": 2},
      split_sizes={"weight": -1, "harness": 2, "validation": 2, "test": 999}).splits()
  splits = make(0)
  test_ids = [instance.id for instance in splits["test"]]
  # 2 of each file: ids carry the file's folder/stem (three files share the stem "test").
  by_file = {}
  for test_id in test_ids:
    by_file.setdefault(test_id.split(":")[0], []).append(test_id)
  assert {k: len(v) for k, v in by_file.items()} == {"nq/test": 2, "popqa/test": 2,
                                                     "bamboogle/test": 2}
  assert len(set(test_ids)) == 6
  assert len(splits["weight"]) == 12 - 4                     # the pool is untouched
  assert [i.id for i in make(0)["test"]] == test_ids         # same seed, same draw
  draws = {tuple(i.id for i in make(seed)["test"]) for seed in range(6)}
  assert len(draws) > 1                                      # the seed matters


def test_per_file_sizes_errors_name_the_file_and_the_key(question_files):
  pool, tests, corpus = question_files
  with pytest.raises(ValueError, match=r"bamboogle.*has only 3 questions"):
    searchqa_domain.searchqa_domain(questions=[pool], split_questions={"test": tests},
                                    corpus=corpus, per_file_sizes={"test": 4}).splits()
  with pytest.raises(ValueError, match=r"per_file_sizes\['validation'\]: split 'validation' "
                     "has no files"):
    searchqa_domain.searchqa_domain(questions=[pool], split_questions={"test": tests},
                                    corpus=corpus, per_file_sizes={"validation": 4})


def _episode(answer, search_results):
  events = [trajectory_lib.ToolEvent("search", {"query": "q"}, result, "", 0.0, 0.0)
            for result in search_results]
  return trajectory_lib.Trajectory("e", "q", "h", "ok", answer=answer, tool_events=events)


def test_correctness_conditional_on_retrieval_by_hand():
  instance = searchqa_domain.question_instance(
      {"id": "q", "question": "Where?", "golden_answers": ["Ulpa"]})
  hit = ['Doc 1 (Title: "U") The Ulpa river.']
  miss = ['Doc 1 (Title: "K") The Kessa river.']
  trajectories = [_episode("<answer>Ulpa</answer>", hit), _episode("<answer>x</answer>", hit),
                  _episode("<answer>Ulpa</answer>", hit), _episode("<answer>Ulpa</answer>", miss),
                  _episode("<answer>Ulpa</answer>", [])]
  scores = [1.0, 0.0, 1.0, 1.0, 1.0]
  metrics = searchqa_domain.qa_metrics([instance] * 5, trajectories, scores)
  assert metrics["retrieval_hits"] == 3
  assert metrics["correct_given_retrieval_hit"] == pytest.approx(2 / 3)
  assert metrics["retrieval_hit_rate_when_searched"] == pytest.approx(3 / 4)  # 4 searched
  assert metrics["retrieval_accuracy"] == pytest.approx(3 / 5)   # WHALE's: of all 5


def test_per_subset_means_by_hand():
  per_task = {"nq/test:a": 1.0, "nq/test:b": 0.0, "popqa/test:c": 0.25, "plain": 1.0}
  assert loop.per_subset_means(per_task) == {"nq/test": 0.5, "popqa/test": 0.25}


@pytest.mark.parametrize("domain,method,epochs,iterations", [
    ("math", "weight_only", 6.0, None), ("searchqa", "weight_only", 4.0, None),
    ("math", "harness_only", None, 60), ("chess", "harness_only", None, 40),
    ("searchqa", "stagewise", 2.7, 32), ("math", "stagewise", 4.3, 33)])
def test_every_baseline_budget_is_the_papers_and_passes_the_config_check(
    domain, method, epochs, iterations, tmp_path, monkeypatch):
  config = whale_config.get_config(f"{domain},{method}")
  assert config.recipe == method
  baseline = options.BaselineConfig(**config.baseline.to_dict())
  if epochs is not None:
    assert baseline.total_weight_epochs == epochs
  if iterations is not None:
    assert baseline.search_iterations == iterations
  assert baseline.budget_rollouts == 0      # the budgets above, not a shared rollout count
  # Its tiny variant (the paper's files at the paper's paths) passes the whole config check.
  monkeypatch.chdir(tmp_path)
  getattr(paper_fixtures, f"write_{domain}")(str(tmp_path))
  tiny = whale_config.get_config(f"{domain},{method},tiny")
  assert tiny.recipe == method
  experiment_config.parse(tiny, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run")


def test_paper_searchqa_test_set_is_100_of_each_of_seven_files():
  domain = whale_config.get_config("searchqa").domain
  assert len(domain.split_questions["test"]) == 7
  assert dict(domain.per_file_sizes) == {"test": 100}
  assert 7 * domain.per_file_sizes["test"] == domain.split_sizes["test"] == 700


@pytest.mark.parametrize("argument", ["searchqa", "math,adaptive", "chess,harness_only",
                                      "searchqa,stagewise", "math,fst"])
def test_the_paper_variants_propose_with_one_claude_code_session_per_iteration(argument,
                                                                              tmp_path):
  search = whale_config.get_config(argument).search
  assert search.proposer == "cli_agent" and search.session_per == "iteration"
  assert tuple(search.command[:3]) == ("claude", "-p", "{prompt}")
  assert search.command[search.command.index("--model") + 1] == "claude-opus-4-7"
  assert search.wall_clock_seconds == 2400.0 and search.run_tool
  assert whale_config.get_config(argument + ",claude_code").search == search


def test_one_word_switches_the_proposer_and_the_context_budget_reaches_the_search(
    tmp_path, monkeypatch):
  from tests.algorithms import tiny   # pylint: disable=import-outside-toplevel
  agentic = whale_config.get_config("searchqa,agentic")
  assert (agentic.search.proposer, agentic.search.agent_backend) == ("agentic", "openai")
  one_shot = whale_config.get_config("math,one_shot")
  assert one_shot.search.proposer == "openai" and one_shot.search.context_tokens == 16_000
  for config in (agentic, one_shot):
    config.model = tiny.tiny_config().model.to_dict()
    experiment_config.parse(config, str(tmp_path / "run"))
  one_shot.search.context_tokens = 0
  with pytest.raises(experiment_config.ConfigError, match=r"config\.search\.context_tokens=0"):
    experiment_config.parse(one_shot, str(tmp_path / "run"))
  one_shot.search.context_tokens, one_shot.search.max_lines = 16_000, 0
  with pytest.raises(experiment_config.ConfigError, match=r"config\.search\.max_lines=0"):
    experiment_config.parse(one_shot, str(tmp_path / "run"))
  # loop.harness_search hands the Run's budget (build_run: config.search.context_tokens) on.
  seen = {}

  def search(*args, **kwargs):
    seen.update(kwargs)
    raise StopIteration

  monkeypatch.setattr(loop.meta_harness, "search", search)
  policy = types.SimpleNamespace(weights_id="w0")
  run = loop.Run(workdir=str(tmp_path), loop=options.LoopConfig(), policy=policy, runtime=None,
                 domain=None, sampling=None, eval_sampling=None, proposer=object(), log=None,
                 counts=None, state=None, search_context_tokens=1234, search_max_lines=77)
  monkeypatch.setattr(loop, "make_evaluate", lambda run: None)
  monkeypatch.setattr(loop.Run, "splits", {"harness": []})
  with pytest.raises(StopIteration):
    loop.harness_search(run, None, "whale_cycle_000")
  assert seen["context_budget_tokens"] == 1234 and seen["max_lines"] == 77


def _interval_run(weight_size, epochs, rollout_interval=0):
  return types.SimpleNamespace(
      loop=options.LoopConfig(prompt_batch=256, eval_interval_epochs=epochs,
                              eval_interval_rollouts=rollout_interval),
      splits={"weight": [None] * weight_size},
      state=loop.LoopState(incumbent=""), counts=types.SimpleNamespace(training=0))


@pytest.mark.parametrize("weight_size,expected", [(18_946, 7), (17_917, 7), (16_384, 6),
                                                  (100, 1)])
def test_eval_interval_of_a_tenth_of_an_epoch_in_weight_steps(weight_size, expected):
  # 0.1 x 18,946 / 256 = 7.40 -> 7 (WHALE's TRAINER_TEST_FREQ=7); 6.999 -> 7; 6.4 -> 6;
  # 0.04 -> at least 1.
  assert loop.eval_interval_steps(_interval_run(weight_size, 0.1)) == expected
  assert loop.eval_interval_steps(_interval_run(weight_size, 0.0)) == 0


def test_maybe_evaluate_every_seven_weight_steps_once_each(monkeypatch):
  run = _interval_run(18_946, 0.1)
  evaluated = []

  def evaluate(run):
    evaluated.append(run.state.weight_steps)
    run.state.evaluations.append({"weight_steps": run.state.weight_steps})
  monkeypatch.setattr(loop, "evaluate_test", evaluate)
  for step in range(0, 23):
    run.state.weight_steps = step
    loop.maybe_evaluate(run)
    loop.maybe_evaluate(run)          # after a harness phase: the same step is not due again
  assert evaluated == [7, 14, 21]


def test_tensorboard_gets_each_subset_of_a_per_subset_dict():
  row = {"test_mean": 0.5, "label": "final", "per_subset": {"nq/test": 0.25, "popqa": 1.0},
         "flag": True, "nan": float("nan")}
  assert dict(run_log._scalars(row)) == {"test_mean": 0.5, "per_subset/nq/test": 0.25,
                                         "per_subset/popqa": 1.0}


def test_summary_keeps_the_best_evaluations_per_subset_beside_the_final_ones():
  state = loop.LoopState(incumbent="def run(task, llm, tools):\n  return ''\n")
  state.evaluations = [
      {"rollouts": 0, "test_mean": 0.3, "per_task": {}, "per_subset": {"nq": 0.1}},
      {"rollouts": 8, "test_mean": 0.6, "per_task": {}, "per_subset": {"nq": 0.9}},
      {"rollouts": 16, "test_mean": 0.4, "per_task": {}, "per_subset": {"nq": 0.2}}]
  run = types.SimpleNamespace(
      state=state, domain=None,
      counts=types.SimpleNamespace(training=16, to_json=lambda: {}))
  summary = loop.summary(run, "whale")
  assert summary["best_per_subset"] == {"nq": 0.9}
  assert summary["final_per_subset"] == {"nq": 0.2}


def _two_call_trajectory(task_id):
  call = lambda: trajectory_lib.LLMCall(
      method="chat", messages=[], prompt=None, prompt_token_ids=[1, 2], sampling={},
      completions=[trajectory_lib.RecordedCompletion([3, 4], [-0.1, -0.2], "x", "stop")],
      started_seconds=0.0, duration_seconds=0.0)
  return trajectory_lib.Trajectory(f"{task_id}#0", task_id, "h", "ok", answer="",
                                   calls=[call(), call()])


def test_rsft_minibatches_count_trajectories_as_whale_does():
  from whale_jax.algorithms import policy as policy_lib  # pylint: disable=import-outside-toplevel
  from whale_jax.algorithms import samples as samples_lib  # pylint: disable=import-outside-toplevel
  samples, groups = samples_lib.from_trajectories(
      [_two_call_trajectory("a"), _two_call_trajectory("b"), _two_call_trajectory("c")],
      with_groups=True)
  assert (len(samples), groups) == (6, [0, 0, 1, 1, 2, 2])   # a sample per call

  def minibatches(unit, groups):
    policy = types.SimpleNamespace(config=options.PolicyConfig(samples_per_step=2,
                                                                minibatch_unit=unit),
                                   num_updates=0)
    return policy_lib.Policy.minibatches(policy, 6, 0, groups)
  # 2 trajectories per minibatch: 4 + 2 samples, each trajectory's calls together.
  batches = minibatches("trajectory", groups)
  assert sorted(len(b) for b in batches) == [2, 4]
  assert sorted(i for b in batches for i in b) == list(range(6))
  assert all({groups[i] for i in b} and len(b) == 2 * len({groups[i] for i in b})
             for b in batches)
  # 2 samples (LLM calls) per minibatch: 3 minibatches; the same without groups.
  assert [len(b) for b in minibatches("sample", groups)] == [2, 2, 2]
  assert [len(b) for b in minibatches("trajectory", None)] == [2, 2, 2]
  with pytest.raises(ValueError, match=r"config\.training\.minibatch_unit='episode'"):
    options.PolicyConfig(minibatch_unit="episode")
  assert whale_config.get_config("searchqa").training.minibatch_unit == "trajectory"
