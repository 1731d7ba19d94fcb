"""Document-grounded QA (OfficeQA) as a domain: search pages, open pages and tables, compute.

  domain = docqa_domain(questions="officeqa_pro.csv",
                        corpus="treasury_bulletins_parsed/transformed_page_level")
  domain = docqa_domain(seed=0)        # offline: generated fiscal bulletins (docqa_generator)

Instances: public {"question"}; reference {"answer", "source_files", "difficulty", "kind"}.
Tools, served on the host (the corpus never enters the sandbox whole):
  search(query, topk=5) -> str: BM25 over pages, one line per hit
      '[<document> page <n>] <first words of the page>'.
  open_document(document, page=None, table=None) -> str: without page or table the outline
      (page count and every table with its page and caption); page=n the text of page n
      (1-based, cut to MAX_PAGE_CHARS); table=k the k-th table of the document with its caption.
  python(code) -> str: the sandboxed interpreter (whale_jax.harness.tools.python_interpreter).
Verifier: docqa_answers.score_answer on the last <FINAL_ANSWER>...</FINAL_ANSWER> at the
domain's tolerance (OfficeQA's rules and this project's departures are in docqa_answers).
Extra metrics: documents_opened_per_episode, tables_opened_per_episode,
source_document_opened_rate (episodes that opened every source document of their question),
search_calls_per_episode, python_calls_per_episode, success_rate_<difficulty> and
success_rate_<kind> (kinds of generated questions).
"""
import difflib
import os
import threading

from whale_jax.harness import static_checks
from whale_jax.harness.tools import python_interpreter
from whale_jax.harness.tools import search as search_lib
from whale_jax.tasks import behaviour
from whale_jax.tasks import seed_harnesses
from whale_jax.tasks import splits as splits_lib
from whale_jax.tasks.docqa import answers as docqa_answers
from whale_jax.tasks.docqa import edits
from whale_jax.tasks.docqa import files as docqa_files
from whale_jax.tasks.docqa import generator as docqa_generator
from whale_jax.tasks.domain import Domain
from whale_jax.tasks.domain import Instance
from whale_jax.tasks.record_files import as_paths

EDIT_CATALOGUE = edits.CATALOGUE  # the Domain's edit_catalogue (registry.edit_catalogue)
MAX_TOPK = 10
MAX_PAGE_CHARS = 8000
SNIPPET_WORDS = 40
DEFAULT_SPLIT_SIZES = {"weight": -1, "harness": 32, "validation": 32, "test": 64}
DESCRIPTION = """\
Task: answer a question about a corpus of financial documents (bulletins with dense tables:
yearly figures by category, totals, footnotes, revised figures marked "r"). Answers need
looking up table cells, arithmetic across tables, or combining several documents.
task = {"question": str}.
tools.search(query, topk=5) -> str: the best pages, one per line as
  '[<document> page <n>] <first words of the page>'; topk <= 10.
tools.open_document(document, page=None, table=None) -> str: the outline of a document (its
  pages and tables), page n (1-based), or table k (1-based, numbered through the document).
tools.python(code) -> str: runs Python in a fresh sandbox and returns what it printed.
run must return text whose last <FINAL_ANSWER>...</FINAL_ANSWER> holds the answer in the
form the question asks (e.g. 2,602 or 12.34% or March 3, 1942). Score: 1 if it matches the
reference under OfficeQA's rules (relative tolerance {tolerance}), else 0.
"""


def question_instance(record):
  return Instance(id=record["id"], public={"question": record["question"]},
                  reference={"answer": record["answer"],
                             "source_files": list(record["source_files"]),
                             "difficulty": record.get("difficulty", ""),
                             "kind": record.get("kind", "")})


class Library:
  """The host-side corpus: documents, a BM25 index over their pages built on first search."""

  def __init__(self, load_documents):
    self._load_documents, self._documents, self._index = load_documents, None, None
    self._lock = threading.Lock()

  @property
  def documents(self):
    with self._lock:
      if self._documents is None:
        self._documents = self._load_documents()
      return self._documents

  def _pages_index(self):
    documents = self.documents
    with self._lock:
      if self._index is None:
        pages = [{"title": f"{doc_id} page {number}", "text": page, "document": doc_id,
                  "page": number}
                 for doc_id, document in documents.items()
                 for number, page in enumerate(document.pages, 1)]
        self._index = (search_lib.BM25Search(pages), pages)
      return self._index

  def search(self, query, topk=5):
    if not isinstance(query, str) or not query.strip():
      raise ValueError(f"search(query={query!r}): query must be a non-empty string.")
    if not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
      raise ValueError(f"search(topk={topk!r}): topk must be an int from 1 to {MAX_TOPK}.")
    index, pages = self._pages_index()
    ranked = index.rank(query, topk)
    if not ranked:
      return search_lib.NO_RESULTS
    return "\n".join(
        f"[{pages[i]['document']} page {pages[i]['page']}] "
        + " ".join(pages[i]["text"].split()[:SNIPPET_WORDS]) for i, _ in ranked)

  def open_document(self, document, page=None, table=None):
    documents = self.documents
    if not isinstance(document, str) or document not in documents:
      close = difflib.get_close_matches(str(document), list(documents), n=3, cutoff=0.5)
      raise ValueError(f"open_document(document={document!r}): no such document"
                       + (f"; did you mean {', '.join(close)}?" if close else
                          "; use a name that tools.search returned."))
    doc = documents[document]
    if page is not None and table is not None:
      raise ValueError("open_document(): give page or table, not both.")
    if page is not None:
      if not isinstance(page, int) or not 1 <= page <= len(doc.pages):
        raise ValueError(f"open_document({document!r}, page={page!r}): pages run from 1 to "
                         f"{len(doc.pages)}.")
      text = doc.pages[page - 1]
      if len(text) > MAX_PAGE_CHARS:
        text = text[:MAX_PAGE_CHARS] + f"\n[... page cut at {MAX_PAGE_CHARS} characters]"
      return f"{document} page {page} of {len(doc.pages)}\n\n{text}"
    if table is not None:
      if not isinstance(table, int) or not 1 <= table <= len(doc.tables):
        raise ValueError(f"open_document({document!r}, table={table!r}): this document has "
                         f"{len(doc.tables)} tables, numbered from 1.")
      found = doc.tables[table - 1]
      return (f"{document} table {table} (page {found.page})\n{found.caption}\n\n"
              f"{found.text[:MAX_PAGE_CHARS]}")
    lines = [f"{document}: {len(doc.pages)} pages, {len(doc.tables)} tables."]
    lines += [f"table {t.number} (page {t.page}): {t.caption}" for t in doc.tables]
    return "\n".join(lines)


def docqa_tools(library, python):
  def search(query, topk=5):
    return library.search(query, topk)

  def open_document(document, page=None, table=None):
    return library.open_document(document, page, table)
  return {"search": search, "open_document": open_document, "python": python}


def opened_documents(trajectory):
  """Document names of the episode's successful open_document calls, in call order."""
  return [str(event.arguments.get("document"))
          for event in behaviour.tool_events(trajectory, "open_document") if not event.error]


def _scorer(tolerance, require_tag):
  if not 0 <= tolerance <= 1:
    raise ValueError(f"tolerance={tolerance!r}: use a relative error in [0, 1], e.g. 0.01.")

  def verify(instance, answer, trajectory=None):
    return docqa_answers.score_answer(instance.reference["answer"], answer, tolerance,
                                      require_tag)
  return verify


def docqa_metrics(instances, trajectories, scores):
  metrics = behaviour.episode_metrics(
      trajectories, scores,
      lambda answer: docqa_answers.extract_final_answer(answer) is not None)
  count = max(len(trajectories), 1)
  opened = [opened_documents(t) for t in trajectories]
  metrics["documents_opened_per_episode"] = sum(len(set(o)) for o in opened) / count
  metrics["tables_opened_per_episode"] = sum(
      1 for t in trajectories for e in behaviour.tool_events(t, "open_document")
      if not e.error and e.arguments.get("table") is not None) / count
  metrics["source_document_opened_rate"] = sum(
      set(i.reference["source_files"]) <= set(o) for i, o in zip(instances, opened)) / count
  for tool in ("search", "python"):
    metrics[f"{tool}_calls_per_episode"] = sum(
        len(behaviour.tool_events(t, tool)) for t in trajectories) / count
  for field in ("difficulty", "kind"):
    groups = {}
    for instance, score in zip(instances, scores):
      if instance.reference.get(field):
        groups.setdefault(instance.reference[field], []).append(score)
    for name, group in sorted(groups.items()):
      metrics[f"success_rate_{name}"] = sum(group) / len(group)
  return metrics


def docqa_domain(questions=None, corpus=None, split_questions=None, split_sizes=None, seed=0,
                 tolerance=0.0, require_tag=True, num_issues=12, python_timeout_seconds=10.0,
                 seed_harness="docqa"):
  """OfficeQA-style QA over OfficeQA files, or over generated bulletins when given no files.

  Args:
    questions: OfficeQA CSV file(s) of the shared pool.
    corpus: the folder of parsed documents (.txt/.md/.pdf) the questions cite.
    split_questions: {split: CSV file(s)} for splits with their own questions.
    split_sizes: {split: size}, -1 for the rest (default DEFAULT_SPLIT_SIZES).
    seed: split seed, and generator seed offline.
    tolerance: relative numeric tolerance of the verifier (OfficeQA reports 0 to 5%).
    require_tag: score only answers inside <FINAL_ANSWER> tags (see docqa_answers).
    num_issues: bulletins generated offline (14 questions each).
    seed_harness: "docqa" (tool schemas, JSON results) or "docqa_compact" (tag calls and
      short results, for tiny models).
  """
  split_sizes = dict(DEFAULT_SPLIT_SIZES if split_sizes is None else split_sizes)
  if seed_harness not in ("docqa", "docqa_compact"):
    raise ValueError(f"seed_harness={seed_harness!r}; use 'docqa' or 'docqa_compact'.")
  offline = questions is None and corpus is None and not split_questions
  if not offline and corpus is None:
    raise ValueError("docqa with question files needs corpus=<folder of parsed documents>; "
                     "or give neither questions nor corpus for generated bulletins.")
  if not offline and not as_paths(questions) and not split_questions:
    raise ValueError("docqa with corpus= needs questions=<OfficeQA CSV(s)> or "
                     "split_questions={'test': <CSV>, ...}.")
  if offline:
    texts, generated = docqa_generator.generate_bulletins(seed=seed, num_issues=num_issues)
    library = Library(lambda: {doc_id: docqa_files.make_document(
        doc_id, docqa_files.split_pages(text)) for doc_id, text in texts.items()})

    def make_splits():
      return splits_lib.split_instances([question_instance(q) for q in generated],
                                        split_sizes, seed)
  else:
    library = Library(lambda: docqa_files.load_corpus(corpus))

    def load(files):
      return [question_instance(record) for path in as_paths(files)
              for record in docqa_files.load_officeqa_questions(path, library.documents)]

    def make_splits():
      fixed = {split: load(files) for split, files in (split_questions or {}).items()}
      return splits_lib.split_instances(load(questions), split_sizes, seed, fixed=fixed)
  python = python_interpreter.python_tool(timeout_seconds=python_timeout_seconds)
  tools = docqa_tools(library, python)
  config = {"questions": [os.fspath(p) for p in as_paths(questions)],
            "corpus": os.fspath(corpus) if corpus is not None else None,
            "split_questions": {k: [os.fspath(p) for p in as_paths(v)]
                                for k, v in (split_questions or {}).items()},
            "split_sizes": split_sizes, "seed": seed, "tolerance": tolerance,
            "require_tag": require_tag, "num_issues": num_issues if offline else None,
            "seed_harness": seed_harness}
  return Domain(name="docqa", description=DESCRIPTION.replace("{tolerance}", f"{tolerance:g}"),
                seed_harness=seed_harnesses.source(seed_harness), splits=make_splits,
                verify=_scorer(tolerance, require_tag), tools=lambda instance: dict(tools),
                metrics=docqa_metrics, allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
                config=config,
                edit_catalogue=EDIT_CATALOGUE)
