"""Retrieval: local BM25 ranking and the Search-R1 HTTP client against a stub server."""

import pytest

from tests import http_stub
from whale_jax.tasks.qa import retrieval

CORPUS = [
    {"id": "a", "title": "Paris", "text": "Paris is the capital and largest city of France."},
    {"id": "b", "title": "Berlin", "text": "Berlin is the capital of Germany."},
    {"id": "c", "title": "Danube", "text": "The Danube river flows through Vienna and "
                                           "Budapest."},
]


def test_bm25_ranks_the_passage_sharing_rare_words_first():
  retrieve = retrieval.BM25Retriever(CORPUS)
  results = retrieve(["capital of Germany", "river through Budapest"], topk=2)
  assert [p["id"] for p in results[0]] == ["b", "a"]  # both say "capital"; only b "Germany"
  assert results[1][0]["id"] == "c"
  assert results[0][0]["score"] > results[0][1]["score"] > 0
  assert set(results[0][0]) == {"id", "title", "text", "score"}


def test_bm25_topk_larger_than_corpus_and_unknown_words():
  retrieve = retrieval.BM25Retriever(CORPUS)
  assert [p["id"] for p in retrieve(["capital"], topk=10)[0]] == ["b", "a"]  # c lacks it
  assert retrieve(["zzzz qqqq", "the of"], topk=1) == [[], []]  # no shared word: no passage


def test_bm25_rejects_a_bare_string():
  with pytest.raises(TypeError, match="list of queries"):
    retrieval.BM25Retriever(CORPUS)("capital", topk=1)


def test_format_passages_search_r1_style_with_word_cap():
  passages = [{"id": "a", "title": "Paris", "text": "one two three four"},
              {"id": "b", "title": "Berlin", "text": "five six"}]
  assert retrieval.format_passages(passages, max_doc_tokens=2) == (
      'Doc 1 (Title: "Paris") one two\nDoc 2 (Title: "Berlin") five six')


class StubRetrievalServer(http_stub.StubServer):
  """Answers POST /retrieve like Search-R1's server; `failures` requests get HTTP 500 first."""

  def __init__(self, failures=0, return_title_text=False):
    self.failures = failures

    def respond(path, body):
      if self.failures > 0:
        self.failures -= 1
        return 500, None
      rows = []
      for query in body["queries"]:
        rows.append([{"document": ({"id": f"{query}-{k}", "title": f"T{k}", "text": query}
                                   if return_title_text else
                                   {"id": f"{query}-{k}", "contents": f"\"T{k}\"\n{query}"}),
                      "score": 1.0 / (k + 1)} for k in range(body["topk"])])
      return 200, {"result": rows}
    super().__init__(respond)
    self.url = self.base + "/retrieve"


def test_http_retriever_speaks_search_r1_protocol():
  with StubRetrievalServer() as stub:
    results = retrieval.HTTPRetriever(stub.url)(["q one", "q two"], topk=2)
  assert stub.requests == [("/retrieve", {"queries": ["q one", "q two"], "topk": 2,
                                          "return_scores": True})]
  assert results[1] == [{"id": "q two-0", "title": "T0", "text": "q two", "score": 1.0},
                        {"id": "q two-1", "title": "T1", "text": "q two", "score": 0.5}]


def test_http_retriever_reads_title_text_documents():
  with StubRetrievalServer(return_title_text=True) as stub:
    results = retrieval.HTTPRetriever(stub.url)(["x"], topk=1)
  assert results == [[{"id": "x-0", "title": "T0", "text": "x", "score": 1.0}]]


def test_http_retriever_retries_on_the_next_url():
  with StubRetrievalServer(failures=1) as stub:
    results = retrieval.HTTPRetriever([stub.url, stub.url], max_attempts=2)(["x"], topk=1)
  assert results[0][0]["id"] == "x-0"
  assert len(stub.requests) == 2


def test_http_retriever_gives_up_with_every_error():
  with StubRetrievalServer(failures=5) as stub:
    with pytest.raises(RuntimeError, match="after 2 attempts"):
      retrieval.HTTPRetriever(stub.url, max_attempts=2)(["x"], topk=1)


def test_http_retriever_rejects_non_http_urls():
  with pytest.raises(ValueError, match="http"):
    retrieval.HTTPRetriever("localhost:8000")
