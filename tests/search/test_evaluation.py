"""Evaluate functions on the harness runtime, sample keys and the evaluation cache."""

import gzip

import pytest

from tests.search import fakes
from tests import test_seeds
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.harness import host_calls
from whale_jax.sampling import SamplingParams
from whale_jax.search import evaluation
from whale_jax.search import evaluation_cache
from whale_jax.tokenization import load_tokenizer

ANSWER_HARNESS = """\
def run(task, llm, tools):
  reply = llm.chat([{"role": "user", "content": "Question: " + task["question"] + "\\n"}])
  if "crash" in reply:
    raise ValueError("the harness failed")
  return reply
"""


@pytest.fixture(scope="module")
def domain():
  return tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)


def test_sample_keys_are_stable_per_seed_and_task():
  instances = [tasks.Instance(id=f"q{i}", public={"question": "?"}) for i in range(3)]
  expected = [test_seeds.reference_seed(7, "sample_key", f"q{i}") for i in range(3)]
  assert evaluation.sample_keys(instances, 7) == expected
  assert evaluation.sample_keys(instances, 8) != expected
  assert evaluation.sample_key(7, "q1") == expected[1]


def test_make_evaluate_scores_ok_episodes_and_zeroes_failures(domain):
  instances = domain.splits()["harness"][:4]
  golds = {i.public["question"]: i.reference["golden_answers"][0] for i in instances}
  questions = [i.public["question"] for i in instances]

  def reply(prompt):
    question = next(q for q in questions if q in prompt)
    index = questions.index(question)
    return ["<answer>" + golds[question] + "</answer>", "<answer>wrong</answer>",
            "crash", "<answer>" + golds[question] + "</answer>"][index]

  tokenizer = load_tokenizer("byte")
  with HarnessRuntime(ScriptedBackend(tokenizer, reply), tokenizer, num_workers=2) as runtime:
    evaluate = evaluation.make_evaluate(runtime, domain, SamplingParams(max_tokens=256),
                                        weights_id="w")
    keys = [11, 12, 13, 14]
    result = evaluate(Harness(ANSWER_HARNESS), instances, keys)
  assert result.scores == (1.0, 0.0, 0.0, 1.0)
  assert [t.outcome for t in result.trajectories] == ["ok", "ok", "harness_error", "ok"]
  assert result.success_rate == 0.5 and result.mean_turns == 1.0 and result.rollouts == 4
  # The sample key is the episode seed: call k of the episode is seeded from (key, k).
  assert [t.calls[0].sampling["seed"] for t in result.trajectories] == [
      host_calls.call_seed(key, 0) for key in keys]
  assert evaluate.weights_id == "w"


def test_infra_errors_are_retried_and_counted(domain):
  instances = domain.splits()["harness"][:2]
  failures = {"left": 1}

  def reply(prompt):
    if failures["left"] and instances[0].public["question"] in prompt:
      failures["left"] -= 1
      raise RuntimeError("backend hiccup")
    return "<answer>x</answer>"

  tokenizer = load_tokenizer("byte")
  with HarnessRuntime(ScriptedBackend(tokenizer, reply), tokenizer, num_workers=2) as runtime:
    evaluate = evaluation.make_evaluate(runtime, domain, SamplingParams(max_tokens=64))
    result = evaluate(Harness(ANSWER_HARNESS), instances, [1, 2])
  assert [t.outcome for t in result.trajectories] == ["ok", "ok"]
  assert result.rollouts == 3




def test_cache_runs_only_missing_episodes_per_weights(tmp_path, domain):
  instances = domain.splits()["harness"]
  harness = Harness(domain.seed_harness)
  keys = evaluation.sample_keys(instances, 0)
  inner = fakes.FakeEvaluate()
  cache = evaluation_cache.EvaluationCache(tmp_path)
  evaluate = evaluation_cache.cached(inner, cache, "w0")
  first = evaluate(harness, instances[:5], keys[:5])
  second = evaluate(harness, instances, keys)
  assert (first.rollouts, second.rollouts) == (5, 3)
  assert inner.calls[1][1] == [i.id for i in instances[5:]]
  assert second.scores == fakes.FakeEvaluate()(harness, instances, keys).scores
  # A new process reads the same cache from disk; other weights or other keys miss.
  reread = evaluation_cache.cached(inner, evaluation_cache.EvaluationCache(tmp_path), "w0")
  assert reread(harness, instances, keys).rollouts == 0
  assert [t.task_id for t in reread(harness, instances, keys).trajectories] == [
      i.id for i in instances]
  other_weights = evaluation_cache.cached(inner, cache, "w1")
  assert other_weights(harness, instances, keys).rollouts == len(instances)
  assert evaluate(harness, instances, [k + 1 for k in keys]).rollouts == len(instances)


def test_cache_never_stores_infra_errors_and_skips_torn_lines(tmp_path):
  cache = evaluation_cache.EvaluationCache(tmp_path)
  harness = Harness("def run(task, llm, tools):\n  return ''\n")
  good = fakes.fake_trajectory(harness, "a", 1)
  broken = fakes.fake_trajectory(harness, "b", 1)
  broken.outcome = "infra_error"
  cache.store(harness.hash, "w", ["a", "b"], [1, 2], [1.0, 0.0], [good, broken])
  path = next((tmp_path).rglob("*.jsonl.gz"))
  with open(path, "ab") as file:  # a gzip member cut short
    file.write(gzip.compress(b'{"task_id": "c", "sample_key": 3, "score": 1.0}\n')[:20])
  reread = evaluation_cache.EvaluationCache(tmp_path)
  assert reread.lookup(harness.hash, "w", "a", 1)[0] == 1.0
  assert reread.lookup(harness.hash, "w", "b", 2) is None
  assert reread.lookup(harness.hash, "w", "a", 2) is None


def test_cache_needs_a_weights_id():
  with pytest.raises(ValueError, match="weights_id"):
    evaluation_cache.cached(fakes.FakeEvaluate(), None, None)
