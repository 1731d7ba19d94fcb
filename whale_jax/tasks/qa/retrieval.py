"""Passage retrieval behind one interface: local BM25 or a Search-R1-style HTTP server.

A retriever is a callable `retrieve(queries, topk) -> [[passage, ...] per query]`, best
first, each passage {"id", "title", "text", "score"}.

  retrieve = retrieval.BM25Retriever(corpus)                       # in process, BM25
  retrieve = retrieval.HTTPRetriever(["http://host:8000/retrieve"]) # Search-R1 server
  passages = retrieve(["who founded Talvek"], topk=3)[0]
  text = retrieval.format_passages(passages, max_doc_tokens=200)
  # 'Doc 1 (Title: "Talvek") Talvek is ...\n'

The server protocol is Search-R1's: POST {"queries": [...], "topk": k, "return_scores": true}
answered by {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}, where
contents is '"title"\ntext' (documents with title/text fields are read too). Requests go
round-robin over the given URLs and are retried on the next URL when one fails.
"""
import itertools
import json
import threading
import urllib.error
import urllib.request

from whale_jax.harness.tools import search
from whale_jax.tasks.qa import files as qa_files


class BM25Retriever:
  """Local BM25 over title + text of each passage (the harness's BM25Search index).

  Passages that share no word with a query are left out, so a row may hold fewer than topk.
  """

  def __init__(self, corpus):
    if not corpus:
      raise ValueError("BM25Retriever needs a non-empty corpus of {id, title, text} passages.")
    self.corpus = [dict(passage) for passage in corpus]
    self._search = search.BM25Search(self.corpus)

  def __call__(self, queries, topk=3):
    queries = _check_queries(queries, topk)
    return [[{**self.corpus[i], "score": score} for i, score in self._search.rank(query, topk)]
            for query in queries]


class HTTPRetriever:
  """A client for Search-R1-style retrieval servers (POST /retrieve)."""

  def __init__(self, urls, timeout_seconds=30.0, max_attempts=3):
    if isinstance(urls, str):
      urls = [urls]
    urls = list(urls)
    if not urls or not all(u.startswith(("http://", "https://")) for u in urls):
      raise ValueError(f"HTTPRetriever urls={urls!r}: give one or more http(s) URLs of "
                       "retrieval endpoints, e.g. ['http://localhost:8000/retrieve'].")
    self.urls = urls
    self.timeout_seconds = timeout_seconds
    self.max_attempts = max_attempts
    self._next_url = itertools.cycle(range(len(urls)))
    self._lock = threading.Lock()

  def __call__(self, queries, topk=3):
    queries = _check_queries(queries, topk)
    body = json.dumps({"queries": list(queries), "topk": topk, "return_scores": True}).encode()
    errors = []
    for _ in range(self.max_attempts):
      with self._lock:
        url = self.urls[next(self._next_url)]
      request = urllib.request.Request(url, data=body, method="POST",
                                       headers={"Content-Type": "application/json"})
      try:
        with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
          payload = json.loads(response.read())
        return _parse_results(payload, len(queries), url)
      except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError) as error:
        errors.append(f"{url}: {error}")
    raise RuntimeError(f"Retrieval failed after {self.max_attempts} attempts: "
                       + "; ".join(errors))


def _check_queries(queries, topk):
  if isinstance(queries, str):
    raise TypeError(f"retrieve() takes a list of queries; got the string {queries[:60]!r}. "
                    "Wrap it: retrieve([query], topk).")
  if not isinstance(topk, int) or topk < 1:
    raise ValueError(f"topk={topk!r} must be an int >= 1.")
  return [str(q) for q in queries]


def _parse_results(payload, num_queries, url):
  results = payload.get("result") if isinstance(payload, dict) else None
  if not isinstance(results, list) or len(results) != num_queries:
    raise ValueError(f"{url} answered without a 'result' list of {num_queries} rows: "
                     f"{json.dumps(payload)[:200]}")
  parsed = []
  for row in results:
    passages = []
    for rank, item in enumerate(row):
      document = item.get("document", item) if isinstance(item, dict) else None
      if not isinstance(document, dict):
        raise ValueError(f"{url} returned a result that is not a document: {str(item)[:200]}")
      passage = qa_files.passage_record(document, rank, url)
      score = item.get("score") if "document" in item else None
      passage["score"] = float(score) if score is not None else None
      passages.append(passage)
    parsed.append(passages)
  return parsed


def format_passages(passages, max_doc_tokens=None):
  """Search-R1's view of retrieved passages: 'Doc i (Title: "t") text' lines.

  max_doc_tokens caps each passage's text at that many whitespace-separated words; no
  passages give search.NO_RESULTS.
  """
  if not passages:
    return search.NO_RESULTS
  if max_doc_tokens is not None:
    passages = [{**p, "text": " ".join(p["text"].split()[:max_doc_tokens])} for p in passages]
  return search.format_documents(passages)
