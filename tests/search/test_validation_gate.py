"""The validation gate's wiring: identical tasks and sample keys for both harnesses, logged."""
import json

import pytest

from tests.search import fakes
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.harness import host_calls
from whale_jax.sampling import SamplingParams
from whale_jax.search import evaluation
from whale_jax.search import validation_gate
from whale_jax.tokenization import load_tokenizer

INCUMBENT = Harness("def run(task, llm, tools):\n  return 'a'\n")
CANDIDATE = Harness("def run(task, llm, tools):\n  return 'b'\n")
OTHER = Harness("def run(task, llm, tools):\n  return 'c'\n")
SCORES = {INCUMBENT.hash: [1, 0, 1, 0, 0, 1, 0, 0], CANDIDATE.hash: [1, 1, 1, 0, 1, 1, 1, 0],
          OTHER.hash: [0] * 8}


@pytest.fixture(scope="module")
def instances():
  return [tasks.Instance(id=f"v{i}", public={"question": f"q{i}"}) for i in range(8)]


class CraftedEvaluate:
  """Scores from SCORES by harness; records what each call was asked."""

  def __init__(self):
    self.calls = []

  def __call__(self, harness, instances, keys):
    self.calls.append((harness.hash, [i.id for i in instances], list(keys)))
    scores = [float(SCORES[harness.hash][int(i.id[1:])]) for i in instances]
    return scores, [fakes.fake_trajectory(harness, i.id, 1) for i in instances]


def test_both_harnesses_see_identical_tasks_and_sample_keys(instances, tmp_path):
  evaluate = CraftedEvaluate()
  log_path = tmp_path / "gate.jsonl"
  result = validation_gate.gate_candidate(INCUMBENT, CANDIDATE, evaluate, instances,
                                          weights_id="w", seed=3, rule="strict",
                                          log_path=log_path)
  (first_hash, first_ids, first_keys), (second_hash, second_ids, second_keys) = evaluate.calls
  assert (first_hash, second_hash) == (INCUMBENT.hash, CANDIDATE.hash)
  assert first_ids == second_ids == [i.id for i in instances]
  assert first_keys == second_keys == evaluation.sample_keys(instances, 3)
  # Hand-computed: the candidate is better on v1, v4, v6 and worse nowhere.
  assert result.decision.accepted
  assert result.decision.mean_difference == pytest.approx(3 / 8)
  assert (result.decision.num_better, result.decision.num_worse) == (3, 0)
  assert result.rollouts == 16
  [row] = [json.loads(line) for line in log_path.read_text().splitlines()]
  assert row["n"] == 8 and row["mean_difference"] == pytest.approx(0.375)
  assert (row["incumbent"], row["candidate"], row["weights_id"], row["seed"]) == (
      INCUMBENT.hash, CANDIDATE.hash, "w", 3)


def test_paired_rule_decisions_are_logged_with_p_value(instances, tmp_path):
  log_path = tmp_path / "gate.jsonl"
  result = validation_gate.gate_candidate(INCUMBENT, CANDIDATE, CraftedEvaluate(), instances,
                                          weights_id="w", rule="sign_test", log_path=log_path)
  # 3 discordant tasks, all better: p = 1 / 2**3 = 0.125 > alpha = 0.05.
  assert not result.decision.accepted and result.decision.p_value == pytest.approx(0.125)
  validation_gate.gate_candidate(INCUMBENT, CANDIDATE, CraftedEvaluate(), instances,
                                 weights_id="w", rule="bootstrap", log_path=log_path)
  rows = [json.loads(line) for line in log_path.read_text().splitlines()]
  assert [row["rule"] for row in rows] == ["sign_test", "bootstrap"]
  assert rows[1]["interval"][0] <= 0.375 <= rows[1]["interval"][1]


def test_an_unchanged_harness_reproduces_its_scores_exactly(instances):
  # Scores that depend only on (task, sample key): the same harness scores identically.
  def noisy(harness, batch, keys):
    return ([float(fakes.feature_score("TOPK = 3", i.id, k)) for i, k in zip(batch, keys)],
            [fakes.fake_trajectory(harness, i.id, 1) for i in batch])

  for rule in ("strict", "sign_test", "bootstrap"):
    result = validation_gate.gate_candidate(INCUMBENT, INCUMBENT, noisy, instances,
                                            weights_id="w", seed=11, rule=rule)
    assert result.decision.mean_difference == 0.0 and not result.decision.accepted


def test_episodes_of_both_harnesses_draw_the_same_seeds_on_the_runtime():
  domain = tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)
  instances = domain.splits()["validation"]
  candidate = Harness(domain.seed_harness.replace("TOPK = 1", "TOPK = 3"))
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, fakes.qa_model(instances))
  with HarnessRuntime(backend, tokenizer, num_workers=2, timeout_seconds=30) as runtime:
    evaluate = evaluation.make_evaluate(runtime, domain, SamplingParams(max_tokens=512),
                                        weights_id="w")
    result = validation_gate.gate_candidate(Harness(domain.seed_harness), candidate, evaluate,
                                            instances, seed=5)
  keys = evaluation.sample_keys(instances, 5)
  for trajectories in (result.incumbent_evaluation.trajectories,
                       result.candidate_evaluation.trajectories):
    assert [[c.sampling["seed"] for c in t.calls] for t in trajectories] == [
        [host_calls.call_seed(key, 0), host_calls.call_seed(key, 1)] for key in keys]
  assert result.decision.accepted and result.log_row["weights_id"] == "w"


def test_the_cache_spares_the_incumbent_at_the_same_weights(instances, tmp_path):
  evaluate = CraftedEvaluate()
  first = validation_gate.gate_candidate(INCUMBENT, CANDIDATE, evaluate, instances,
                                         weights_id="w", cache_dir=tmp_path)
  other = OTHER
  second = validation_gate.gate_candidate(INCUMBENT, other, evaluate, instances,
                                          weights_id="w", cache_dir=tmp_path)
  new_weights = validation_gate.gate_candidate(INCUMBENT, other, evaluate, instances,
                                               weights_id="w2", cache_dir=tmp_path)
  assert (first.rollouts, second.rollouts, new_weights.rollouts) == (16, 8, 16)
  assert not second.decision.accepted
