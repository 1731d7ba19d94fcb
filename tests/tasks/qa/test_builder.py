"""The SearchQA domain: file splits, the search tool's limits, verifier modes, metrics."""
import json
import threading

import pytest

from whale_jax import tasks
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.tasks import domain as domain_lib
from whale_jax.tasks import judge
from whale_jax.tasks.domain import Instance
from whale_jax.tasks.qa import builder as searchqa_domain
from tests.tasks.qa.test_retrieval import StubRetrievalServer

CORPUS = [{"id": "1", "title": "Zorvik", "text": "Zorvik is the capital of Quelland."},
          {"id": "2", "title": "Ulpa", "text": "Ulpa is a long river in Merth with " +
           "many words " * 50}]
INSTANCE = Instance("q", {"question": "What is the capital of Quelland?"},
                    {"golden_answers": ["Zorvik", "Zorvik City"], "supporting_ids": ["1"]})


def write_jsonl(path, rows):
  path.write_text("".join(json.dumps(row) + "\n" for row in rows))
  return str(path)


@pytest.fixture
def files(tmp_path):
  corpus = write_jsonl(tmp_path / "corpus.jsonl", CORPUS)
  train = write_jsonl(tmp_path / "train.jsonl", [
      {"id": f"t{i}", "question": f"question {i}?", "golden_answers": [f"a{i}"]}
      for i in range(12)])
  test = write_jsonl(tmp_path / "test.jsonl", [
      {"id": f"s{i}", "question": f"question {i}?", "golden_answers": [f"a{i}"]}
      for i in range(3)])
  return corpus, train, test


def test_file_splits_keep_test_questions_out_of_training(files):
  corpus, train, test = files
  domain = tasks.get_domain("searchqa", questions=train, split_questions={"test": test},
                            corpus=corpus, split_sizes={"weight": -1, "harness": 2, "test": 3})
  splits = domain.splits()
  assert [len(splits[name]) for name in tasks.SPLIT_NAMES] == [7, 2, 0, 3]
  assert all(i.id.startswith("test:") for i in splits["test"])
  test_questions = {i.public["question"] for i in splits["test"]}
  assert not test_questions & {i.public["question"] for i in splits["weight"] +
                               splits["harness"]}


def test_same_file_names_in_two_folders_get_distinct_ids(tmp_path, files):
  corpus, _, _ = files
  (tmp_path / "nq").mkdir()
  (tmp_path / "hotpotqa").mkdir()
  paths = [write_jsonl(tmp_path / folder / "train.jsonl",
                       [{"id": "0", "question": f"{folder} q?", "golden_answers": ["x"]}])
           for folder in ("nq", "hotpotqa")]
  domain = tasks.get_domain("searchqa", questions=paths, corpus=corpus,
                            split_sizes={"weight": -1})
  assert sorted(i.id for i in domain.splits()["weight"]) == ["hotpotqa/train:0", "nq/train:0"]


def test_search_tool_limits_and_query_lists(files):
  corpus, train, _ = files
  domain = tasks.get_domain("searchqa", questions=train, corpus=corpus)
  search = domain.tools(INSTANCE)["search"]
  assert search("capital of Quelland", topk=1) == (
      'Doc 1 (Title: "Zorvik") Zorvik is the capital of Quelland.')
  assert len(search("river Merth", topk=1, max_doc_tokens=5).split()) == 4 + 5
  both = search(["capital of Quelland", "river Merth"], topk=1, max_doc_tokens=3)
  assert both.count("Doc 1 (Title:") == 2
  for bad in [dict(query=""), dict(query=[]), dict(query="x", topk=0),
              dict(query="x", topk=searchqa_domain.MAX_TOPK + 1),
              dict(query="x", max_doc_tokens=searchqa_domain.MAX_DOC_TOKENS + 1)]:
    with pytest.raises(ValueError, match="search\\("):
      search(**bad)


def test_search_through_a_retrieval_server(files):
  _, train, _ = files
  with StubRetrievalServer() as stub:
    domain = tasks.get_domain("searchqa", questions=train, retrieval_urls=[stub.url])
    result = domain.tools(INSTANCE)["search"]("capital", topk=2)
  assert result == 'Doc 1 (Title: "T0") capital\nDoc 2 (Title: "T1") capital'
  assert stub.requests[0][1] == {"queries": ["capital"], "topk": 2, "return_scores": True}


def test_corpus_or_server_exactly_one(files):
  corpus, train, _ = files
  with pytest.raises(ValueError, match="exactly one of corpus"):
    tasks.get_domain("searchqa", questions=train)
  with pytest.raises(ValueError, match="question files"):
    tasks.get_domain("searchqa", corpus=corpus)


@pytest.mark.parametrize("verifier, answer, expected", [
    ("exact_match", "<answer>zorvik city</answer>", 1.0),
    ("exact_match", "<answer>Zorvik, the capital</answer>", 0.0),
    ("exact_match", "Zorvik", 0.0),                    # no tag, no answer
    ("f1", "<answer>the city of Zorvik</answer>", 0.8),  # [city, of, zorvik] vs [zorvik, city]
    ("judge", "<answer>Zorvik, the capital</answer>", 1.0),
    ("judge", "no tag at all", 0.0),
])
def test_verifier_modes(verifier, answer, expected):
  asked = []
  llm_judge = judge.LLMJudge(lambda prompt: asked.append(prompt) or "CORRECT")
  domain = tasks.get_domain("synthetic_qa", verifier=verifier, judge=llm_judge)
  assert domain.verify(INSTANCE, answer, None) == pytest.approx(expected)
  if verifier == "judge" and expected:
    assert "Predicted answer: Zorvik, the capital" in asked[0]


def test_the_domain_counts_its_judges_verdicts():
  replies = iter(["CORRECT", "hmm", "INCORRECT"])
  llm_judge = judge.LLMJudge(lambda prompt: next(replies), max_attempts=2, backoff_seconds=0.0)
  domain = tasks.get_domain("synthetic_qa", verifier="judge", judge=llm_judge)
  scores = [domain.verify(INSTANCE, answer, None) for answer in (
      "<answer>Zorvik</answer>", "<answer>Ulpa</answer>", "no tag at all")]
  assert scores == [1.0, 0.0, 0.0]
  assert domain.counters() == {
      "judge_calls": 3, "judge_parsed": 2, "judge_unparsable": 1, "judge_failed_calls": 0,
      "judge_verdicts_judge": 2, "judge_verdicts_exact_match_fallback": 0,
      "judge_verdicts_no_answer": 1, "judge_cache_hits": 0, "judge_retries": 1,
      "judge_rate_limited": 0, "judge_server_errors": 0, "judge_guided_choice_refusals": 0,
      "judge_prompt_tokens": 0, "judge_completion_tokens": 0, "judge_constrained": "never",
      "judge_mode": "free_text"}
  assert tasks.get_domain("synthetic_qa", verifier="exact_match").counters() == {}


def test_a_batch_of_episodes_asks_the_judge_concurrently():
  # Each call waits at a barrier of 3: the batch passes only with 3 calls in flight at once.
  barrier = threading.Barrier(3, timeout=5)

  def complete(prompt):
    barrier.wait()
    return "CORRECT" if "Predicted answer: Zorvik " in prompt else "INCORRECT"
  domain = tasks.get_domain("synthetic_qa", verifier="judge", judge=judge.LLMJudge(complete))
  answers = ["<answer>Zorvik</answer>", "<answer>Ulpa</answer>", "<answer>Kest</answer>",
             "no tag at all"]
  scores = domain_lib.verify_episodes(domain, [INSTANCE] * 4, answers, [None] * 4)
  assert scores == [1.0, 0.0, 0.0, 0.0]
  assert tasks.get_domain("synthetic_qa", verifier="exact_match").verify_many is None


def test_judge_verifier_needs_a_judge():
  with pytest.raises(ValueError, match="LLMJudge"):
    tasks.get_domain("synthetic_qa", verifier="judge")
  with pytest.raises(ValueError, match="exact_match, f1, judge"):
    tasks.get_domain("synthetic_qa", verifier="bleu")


def episode(answer, search_results):
  events = [trajectory_lib.ToolEvent("search", {"query": "q"}, result, "", 0.0, 0.0)
            for result in search_results]
  return trajectory_lib.Trajectory("e", "q", "h", "ok", answer=answer, tool_events=events)


def test_qa_metrics_by_hand():
  trajectories = [episode("<answer>Zorvik</answer>", ['Doc 1 (Title: "Z") Zorvik is big.']),
                  episode("<answer>Ulpa river</answer>", ['Doc 1 (Title: "U") Ulpa.']),
                  episode("none", [])]
  metrics = searchqa_domain.qa_metrics([INSTANCE] * 3, trajectories, [1.0, 0.0, 0.0])
  assert metrics["exact_match"] == pytest.approx(1 / 3)
  assert metrics["retrieval_hit_rate_when_searched"] == 0.5   # of the two that searched
  assert metrics["retrieval_accuracy"] == pytest.approx(1 / 3)  # of all three (WHALE's)
  assert metrics["search_calls_per_episode"] == pytest.approx(2 / 3)
  assert metrics["answer_format_rate"] == pytest.approx(2 / 3)
  # "Zorvikia" contains "Zorvik" but is another word: not a hit.
  assert searchqa_domain.qa_metrics([INSTANCE], [episode("x", ["Zorvikia"])], [0.0])[
      "retrieval_accuracy"] == 0.0
