"""BM25 search tool: ranking against a numpy BM25, and Search-R1's passage format."""
import math
import re

import numpy as np
import pytest

from whale_jax.harness.tools import search
from whale_jax.tokenization import load_tokenizer

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliett", "kilo", "lima", "mike", "november", "oscar", "papa"]
K1, B = 1.5, 0.75


def random_corpus(seed, num_documents=30):
  rng = np.random.default_rng(seed)
  return [{"title": str(rng.choice(WORDS)),
           "text": " ".join(rng.choice(WORDS[:12], size=rng.integers(3, 15)))}
          for _ in range(num_documents)]


def reference_scores(corpus, query):
  """Lucene BM25, one document and one term at a time."""
  documents = [re.findall(r"\w\w+", f"{d['title']} {d['text']}".lower()) for d in corpus]
  average_length = sum(map(len, documents)) / len(documents)
  scores = []
  for words in documents:
    score = 0.0
    for term in set(re.findall(r"\w\w+", query.lower())):
      frequency = words.count(term)
      document_frequency = sum(term in other for other in documents)
      idf = math.log(1 + (len(documents) - document_frequency + 0.5) / (document_frequency + 0.5))
      norm = K1 * (1 - B + B * len(words) / average_length)
      score += idf * frequency * (K1 + 1) / (frequency + norm)
    scores.append(score)
  return np.array(scores)


@pytest.mark.parametrize("seed,query", [(0, "alpha"), (1, "bravo kilo"), (2, "mike lima golf")])
def test_ranking_matches_a_reference_bm25(seed, query):
  corpus = random_corpus(seed)
  tool = search.BM25Search(corpus)
  ranked = tool.rank(query, topk=5)
  expected = reference_scores(corpus, query)
  indices, scores = zip(*ranked)
  # bm25s leaves out the constant (k1 + 1) factor; compare scores relative to the best one.
  np.testing.assert_allclose(np.array(scores) / scores[0],
                             expected[list(indices)] / expected.max(), rtol=1e-4)
  left_out = np.delete(expected, indices)
  assert expected[indices[-1]] >= left_out.max() - 1e-6


def test_answer_uses_the_search_r1_passage_format():
  corpus = [{"title": "Paris", "text": "Paris is the capital and largest city of France."},
            {"title": "Lyon", "text": "Lyon is a city in France on the Rhone."},
            {"title": "Berlin", "text": "Berlin is the capital of Germany."}]
  tool = search.BM25Search(corpus)
  assert tool("largest city in France", topk=3, max_doc_tokens=4) == (
      'Doc 1 (Title: "Paris") Paris is the capital\n'
      'Doc 2 (Title: "Lyon") Lyon is a city')


def test_max_doc_tokens_counts_model_tokens_when_given_a_tokenizer():
  corpus = [{"title": "Seine", "text": "Seine river flows through Paris"}]
  tool = search.BM25Search(corpus, tokenizer=load_tokenizer("byte"))
  assert tool("seine", max_doc_tokens=11) == 'Doc 1 (Title: "Seine") Seine river'


def test_no_match_says_so():
  tool = search.BM25Search([{"title": "Paris", "text": "capital of France"}])
  assert tool("zebra") == search.NO_RESULTS


def test_bad_arguments_are_explained():
  tool = search.BM25Search([{"title": "Paris", "text": "capital of France"}])
  with pytest.raises(ValueError, match=r"topk=0\) must be an int in \[1, 50\]"):
    tool("paris", topk=0)
  with pytest.raises(TypeError, match="non-empty str"):
    tool(["paris"])
  with pytest.raises(ValueError, match="non-empty sequence"):
    search.BM25Search([{"title": "x"}])
