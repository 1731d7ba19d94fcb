"""The synthetic world: deterministic, answerable, and retrievable by BM25."""
import collections

from whale_jax.tasks.qa import generator as synthetic_qa
from whale_jax.tasks.qa import retrieval


def test_same_seed_same_world_other_seed_other_world():
  assert synthetic_qa.generate_world(seed=3) == synthetic_qa.generate_world(seed=3)
  assert synthetic_qa.generate_world(seed=3)[0] != synthetic_qa.generate_world(seed=4)[0]


def test_names_are_unique_short_single_words():
  corpus, _ = synthetic_qa.generate_world(seed=0)
  titles = [passage["title"] for passage in corpus]
  assert len(set(titles)) == len(titles)
  assert all(title.isalpha() and len(title) == 6 for title in titles)


def test_every_answer_is_stated_in_its_last_supporting_passage():
  corpus, questions = synthetic_qa.generate_world(seed=1)
  text = {passage["id"]: passage["text"] for passage in corpus}
  for question in questions:
    assert question["golden_answers"][0] in text[question["supporting_ids"][-1]], question
    assert question["golden_answers"][0] not in question["question"]


def test_questions_have_unique_answers_per_question_text():
  _, questions = synthetic_qa.generate_world(seed=2)
  answers = collections.defaultdict(set)
  for question in questions:
    answers[question["question"]].add(question["golden_answers"][0])
  assert all(len(a) == 1 for a in answers.values())


def test_one_and_two_hop_questions_present():
  _, questions = synthetic_qa.generate_world(seed=0)
  hops = collections.Counter(question["hops"] for question in questions)
  assert hops[1] > 0 and hops[2] > 0 and set(hops) == {1, 2}


def test_bm25_top1_finds_the_first_hop_and_the_bridge():
  for seed in range(3):
    corpus, questions = synthetic_qa.generate_world(seed=seed)
    retrieve = retrieval.BM25Retriever(corpus)
    title = {passage["id"]: passage["title"] for passage in corpus}
    first = retrieve([q["question"] for q in questions], topk=1)
    assert [r[0]["id"] for r in first] == [q["supporting_ids"][0] for q in questions]
    two_hop = [q for q in questions if q["hops"] == 2]
    second = retrieve([title[q["supporting_ids"][1]] for q in two_hop], topk=1)
    assert [r[0]["id"] for r in second] == [q["supporting_ids"][1] for q in two_hop]
