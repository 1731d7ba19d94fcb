"""BM25 search over a corpus, answering in Search-R1's passage format.

  search = BM25Search([{"title": "Paris", "text": "Paris is the capital of France."}, ...])
  search("capital of France", topk=3, max_doc_tokens=200)
  # 'Doc 1 (Title: "Paris") Paris is the capital of France.'

Ranking is bm25s's Lucene BM25 (k1=1.5, b=0.75) over "title text", lowercased words of two or
more characters, English stopwords removed. Documents that share no word with the query score 0
and are left out; with none left the answer is NO_RESULTS. max_doc_tokens cuts each document's
text to that many tokens of `tokenizer` (the model's, so the budget is in the model's tokens),
or to that many whitespace-separated words without one.
"""
import threading

NO_RESULTS = "No documents matched the query."
MAX_TOPK = 50


def format_documents(documents):
  """'Doc i (Title: "title") text' lines, numbered from 1."""
  return "\n".join(f'Doc {i} (Title: "{document["title"]}") {document["text"]}'
                   for i, document in enumerate(documents, 1))


class BM25Search:
  """A search tool over a fixed corpus.

  Args:
    documents: a sequence of {"title": str, "text": str} (other keys are kept and ignored).
    tokenizer: optional whale_jax tokenizer that max_doc_tokens counts in.
  """

  def __init__(self, documents, tokenizer=None):
    import bm25s  # pylint: disable=import-outside-toplevel
    documents = list(documents)
    if not documents or not all(isinstance(d, dict) and isinstance(d.get("title"), str) and
                                isinstance(d.get("text"), str) for d in documents):
      raise ValueError("BM25Search needs a non-empty sequence of {'title': str, 'text': str} "
                       "documents.")
    self.documents, self.tokenizer = documents, tokenizer
    self._bm25s = bm25s
    self._index = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    self._index.index(bm25s.tokenize([f"{d['title']} {d['text']}" for d in documents],
                                     stopwords="en", show_progress=False),
                      show_progress=False)
    self._lock = threading.Lock()  # bm25s keeps per-call state on the index

  def rank(self, query, topk):
    """[(document index, score)] of the best topk documents with a positive score."""
    words = self._bm25s.tokenize([query], stopwords="en", return_ids=False,
                                 show_progress=False)
    if not words[0]:
      return []
    with self._lock:
      indices, scores = self._index.retrieve(words, k=min(topk, len(self.documents)),
                                             show_progress=False, n_threads=1)
    return [(int(i), float(s)) for i, s in zip(indices[0], scores[0]) if s > 0]

  def _truncate(self, text, max_doc_tokens):
    if self.tokenizer is None:
      return " ".join(text.split()[:max_doc_tokens])
    token_ids = self.tokenizer.encode(text)
    return text if len(token_ids) <= max_doc_tokens else self.tokenizer.decode(
        token_ids[:max_doc_tokens])

  def __call__(self, query, topk=3, max_doc_tokens=200):
    """The topk documents for query, formatted (see format_documents)."""
    if not isinstance(query, str) or not query.strip():
      raise TypeError(f"search(query) takes a non-empty str; got {query!r:.80}.")
    if not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
      raise ValueError(f"search(topk={topk!r}) must be an int in [1, {MAX_TOPK}].")
    if not isinstance(max_doc_tokens, int) or max_doc_tokens < 1:
      raise ValueError(f"search(max_doc_tokens={max_doc_tokens!r}) must be an int >= 1.")
    ranked = self.rank(query, topk)
    if not ranked:
      return NO_RESULTS
    return format_documents(
        {"title": self.documents[i]["title"],
         "text": self._truncate(self.documents[i]["text"], max_doc_tokens)} for i, _ in ranked)
