"""SearchQA and synthetic multi-hop QA as domains: questions, a search tool, EM/F1/judge.

  domain = searchqa_domain(questions=["nq_train.parquet", "hotpotqa_train.parquet"],
                           split_questions={"test": ["nq_test.parquet", ...]},
                           corpus="wiki-18.jsonl")             # or retrieval_urls=[...]
  domain = synthetic_qa_domain(seed=0)                       # offline: generated world + BM25

Instances: public {"question"}; reference {"golden_answers", "supporting_ids"}.
Tool: search(query, topk=3, max_doc_tokens=200) -> 'Doc i (Title: "...") text' lines; query
may be a list of queries (each gets topk passages); topk <= MAX_TOPK, max_doc_tokens <=
MAX_DOC_TOKENS (words).
Verifier: the last <answer>…</answer> of the returned text, scored by normalized exact match
("exact_match", the default and Harness Learning's metric), token F1 ("f1") or the WHALE LLM
judge ("judge", which needs `judge=LLMJudge(...)`). No answer tag scores 0.
Extra metrics: exact_match, f1, retrieval_accuracy (WHALE's "retrieval accuracy": episodes
whose search results contain a golden answer, normalized, over all episodes; one that never
searched counts as a miss), retrieval_hit_rate_when_searched (the same hits over the episodes
that searched), correct_given_retrieval_hit (mean score of the hit episodes: WHALE Fig. 3's
conditional correctness), retrieval_hits (their number) and search_calls_per_episode.
"""
import os
import threading
import zlib

import numpy as np

from whale_jax.harness import static_checks
from whale_jax.tasks import behaviour
from whale_jax.tasks import seed_harnesses
from whale_jax.tasks import splits as splits_lib
from whale_jax.tasks.domain import Domain
from whale_jax.tasks.domain import Instance
from whale_jax.tasks.qa import answers as qa_answers
from whale_jax.tasks.qa import edits
from whale_jax.tasks.qa import files as qa_files
from whale_jax.tasks.qa import generator as synthetic_qa
from whale_jax.tasks.qa import retrieval
from whale_jax.tasks.record_files import as_paths

MAX_TOPK = 10
MAX_DOC_TOKENS = 1000
VERIFIERS = ("exact_match", "f1", "judge")
QA_SEED_HARNESSES = ("searchqa", "searchqa_compact", "searchqa_two_hop")  # seed_harnesses/
EDIT_CATALOGUE = edits.CATALOGUE  # the Domain's edit_catalogue (registry.edit_catalogue)
INSTRUCTIONS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "instructions")
DEFAULT_SPLIT_SIZES = {"weight": -1, "harness": 64, "validation": 64, "test": 128}
DESCRIPTION = """\
Task: answer factual questions, many of which need two hops of reasoning (find an entity, then
a fact about it), using a search tool over a passage corpus.
task = {"question": str}.
tools.search(query, topk=3, max_doc_tokens=200) -> str: the top passages for the query, one
per line as 'Doc i (Title: "...") text', each cut to max_doc_tokens words; query may also be a
list of queries. topk <= 10, max_doc_tokens <= 1000.
run must return text whose last <answer>...</answer> holds the final answer: one short entity
or value, not a sentence. Score: 1 if that answer matches a reference answer ({verifier}), else 0.
"""


def question_instance(record):
  """An Instance from a question record {"id", "question", "golden_answers", ...}."""
  return Instance(id=record["id"], public={"question": record["question"]},
                  reference={"golden_answers": list(record["golden_answers"]),
                             "supporting_ids": list(record.get("supporting_ids", []))})


def search_tool(retrieve):
  """The host-side search tool over any retriever (see whale_jax.tasks.qa.retrieval)."""
  def search(query, topk=3, max_doc_tokens=200):
    queries = [query] if isinstance(query, str) else query
    if (not isinstance(queries, list) or not queries or
        not all(isinstance(q, str) and q.strip() for q in queries)):
      raise ValueError(f"search(query={query!r}): query must be a non-empty string or a list "
                       "of non-empty strings.")
    if not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
      raise ValueError(f"search(topk={topk!r}): topk must be an int from 1 to {MAX_TOPK}.")
    if not isinstance(max_doc_tokens, int) or not 1 <= max_doc_tokens <= MAX_DOC_TOKENS:
      raise ValueError(f"search(max_doc_tokens={max_doc_tokens!r}): use an int from 1 to "
                       f"{MAX_DOC_TOKENS}.")
    results = retrieve(queries, topk)
    return "\n".join(retrieval.format_passages(passages, max_doc_tokens)
                     for passages in results)
  return search


def _scorer(verifier, judge):
  if verifier not in VERIFIERS:
    raise ValueError(f"verifier={verifier!r}; choose one of {', '.join(VERIFIERS)}.")
  if verifier == "judge" and judge is None:
    raise ValueError("verifier='judge' needs judge=tasks.judge.LLMJudge(complete); build one "
                     "with judge.backend_completer(backend, tokenizer) or "
                     "judge.client_completer(client), or use verifier='exact_match'.")

  def verify(instance, answer, trajectory=None):
    prediction = qa_answers.extract_answer(answer)
    golden_answers = instance.reference["golden_answers"]
    if verifier == "exact_match":
      return qa_answers.exact_match(prediction, golden_answers)
    if verifier == "f1":
      return qa_answers.f1_score(prediction, golden_answers)
    return judge(instance.public["question"], golden_answers, prediction).score
  return verify


def _judge_many(judge):
  """verify_many of the judge verifier: the batch's verdicts asked concurrently."""
  def verify_many(instances, answers, trajectories):
    requests = [(instance.public["question"], instance.reference["golden_answers"],
                 qa_answers.extract_answer(answer))
                for instance, answer in zip(instances, answers)]
    return [verdict.score for verdict in judge.judge_many(requests)]
  return verify_many


def _retrieval_hit(trajectory, golden_answers):
  """None if the episode never searched; else whether a search result holds a golden answer."""
  results = [event.result for event in behaviour.tool_events(trajectory, "search")
             if not event.error and isinstance(event.result, str)]
  if not results:
    return None
  text = f" {qa_answers.normalize_answer(' '.join(results))} "
  return any(f" {qa_answers.normalize_answer(gold)} " in text for gold in golden_answers)


def qa_metrics(instances, trajectories, scores):
  """Shared behaviour metrics plus exact_match, f1, retrieval_accuracy and the rest of the
  module docstring's list."""
  metrics = behaviour.episode_metrics(
      trajectories, scores, lambda answer: qa_answers.extract_answer(answer) is not None)
  predictions = [qa_answers.extract_answer(t.answer) for t in trajectories]
  golds = [instance.reference["golden_answers"] for instance in instances]
  count = max(len(instances), 1)
  metrics["exact_match"] = sum(map(qa_answers.exact_match, predictions, golds)) / count
  metrics["f1"] = sum(map(qa_answers.f1_score, predictions, golds)) / count
  hit_of = list(map(_retrieval_hit, trajectories, golds))
  hits = [hit for hit in hit_of if hit is not None]
  metrics["retrieval_accuracy"] = sum(hits) / count              # WHALE: over all episodes
  metrics["retrieval_hit_rate_when_searched"] = sum(hits) / len(hits) if hits else 0.0
  # WHALE Fig. 3: correctness of the episodes whose search results held a golden answer.
  scores_on_hit = [score for hit, score in zip(hit_of, scores) if hit]
  metrics["correct_given_retrieval_hit"] = (sum(scores_on_hit) / len(scores_on_hit)
                                            if scores_on_hit else 0.0)
  metrics["retrieval_hits"] = len(scores_on_hit)
  metrics["search_calls_per_episode"] = sum(
      len(behaviour.tool_events(t, "search")) for t in trajectories) / count
  return metrics


def _qa_domain(name, make_splits, retrieve, verifier, judge, config, seed_harness="searchqa"):
  if seed_harness not in QA_SEED_HARNESSES:
    raise ValueError(f"seed_harness={seed_harness!r}; use one of {QA_SEED_HARNESSES}.")
  verify = _scorer(verifier, judge)
  search = search_tool(retrieve)
  counts = getattr(judge, "counts", None) if verifier == "judge" else None
  counters = dict
  if counts is not None:  # the LLM judge's calls and verdicts (tasks/judge.JudgeCounts)
    counters = lambda: {f"judge_{name}": value for name, value in counts.to_json().items()}
  return Domain(
      name=name, description=DESCRIPTION.replace("{verifier}", verifier.replace("_", " ")),
      seed_harness=seed_harnesses.source(seed_harness), splits=make_splits, verify=verify,
      tools=lambda instance: {"search": search}, metrics=qa_metrics,
      allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS, config=config, counters=counters,
      verify_many=_judge_many(judge) if hasattr(judge, "judge_many") and verifier == "judge"
      else None,
      edit_catalogue=EDIT_CATALOGUE, instructions=os.path.join(INSTRUCTIONS_DIR, f"{name}.md"))


def _load_question_files(paths):
  """Question records from several files; ids are prefixed by file stem (or folder/stem)."""
  return [record for records in _load_each_file(paths) for record in records]


def _load_each_file(paths):
  """[records of one file] per path, ids prefixed by file stem (or folder/stem)."""
  paths = [os.fspath(p) for p in paths]
  stems = [os.path.splitext(os.path.basename(p))[0] for p in paths]
  per_file = []
  for path, stem in zip(paths, stems):
    source = stem
    if stems.count(stem) > 1:
      source = f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}/{stem}"
    per_file.append(qa_files.load_questions(path, source=source))
  return per_file


def _draw_per_file(split, paths, per_file, seed):
  """Question records of paths, per_file of each file drawn at random (seeded by seed, split
  and the file's position), in file order: WHALE's SearchQA test set is 100 questions of
  each of its 7 test files."""
  records = []
  paths = as_paths(paths)
  for index, (path, file_records) in enumerate(zip(paths, _load_each_file(paths))):
    if per_file > len(file_records):
      raise ValueError(f"per_file_sizes[{split!r}]={per_file}: {os.fspath(path)} has only "
                       f"{len(file_records)} questions; lower per_file_sizes or use a larger "
                       "file.")
    stream = [seed, index, zlib.crc32(split.encode())]
    order = np.random.default_rng(stream).permutation(len(file_records))
    records += [file_records[i] for i in sorted(order[:per_file])]
  return records


def searchqa_domain(questions=None, split_questions=None, corpus=None, retrieval_urls=None,
                    split_sizes=None, seed=0, verifier="exact_match", judge=None,
                    per_file_sizes=None, seed_harness="searchqa"):
  """SearchQA over question files the researcher brings (see qa_files for the layouts).

  Args:
    questions: file(s) of the shared pool the splits without their own files draw from.
    split_questions: {split: file(s)} for splits with their own source (e.g. the seven test
      sets); their questions are removed from the shared pool.
    corpus: a passage corpus file for local BM25; or
    retrieval_urls: Search-R1-style retrieval server URL(s) (.../retrieve).
    split_sizes: {split: size}, -1 for the rest of the pool (default DEFAULT_SPLIT_SIZES).
    seed: split seed.
    verifier, judge: see the module docstring.
    per_file_sizes: {split: n} for splits of split_questions drawn as n questions of each of
      their files (the split's size is then n x files; WHALE's test: 100 of each of 7).
      Instance ids start with the file's stem, so per-file scores can be read back
      (loop.per_subset_means).
    seed_harness: one of QA_SEED_HARNESSES: "searchqa" (WHALE's h0), "searchqa_compact"
      (the same loop in fewer tokens) or "searchqa_two_hop" (Harness Learning's QA seed).
  """
  per_file_sizes = dict(per_file_sizes or {})
  for split, per_file in per_file_sizes.items():
    if split not in (split_questions or {}):
      raise ValueError(f"per_file_sizes[{split!r}]: split {split!r} has no files of its own; "
                       f"add split_questions[{split!r}] = [file, ...] or drop the entry.")
    if not isinstance(per_file, int) or per_file < 1:
      raise ValueError(f"per_file_sizes[{split!r}]={per_file!r} must be an int >= 1.")
  if (corpus is None) == (retrieval_urls is None):
    raise ValueError("searchqa needs exactly one of corpus=<passages .jsonl/.parquet> (local "
                     "BM25) or retrieval_urls=[<http://host:port/retrieve>, ...].")
  if not as_paths(questions) and not split_questions:
    raise ValueError("searchqa needs question files: questions=<file(s)> for a shared pool "
                     "and/or split_questions={'test': <file(s)>, ...}.")
  split_sizes = dict(DEFAULT_SPLIT_SIZES if split_sizes is None else split_sizes)
  if retrieval_urls is not None:
    retrieve = retrieval.HTTPRetriever(retrieval_urls)
  else:
    qa_files.check_corpus(corpus)  # a missing corpus fails here, not at the first search
    retrieve = _LazyBM25(lambda: qa_files.load_corpus(corpus))

  def make_splits():
    pool = [question_instance(r) for r in _load_question_files(as_paths(questions))]
    fixed, sizes = {}, dict(split_sizes)
    for split, paths in (split_questions or {}).items():
      if split in per_file_sizes:
        records = _draw_per_file(split, paths, per_file_sizes[split], seed)
        fixed[split] = [question_instance(r) for r in records]
        sizes[split] = len(splits_lib.unique_instances(fixed[split]))
      else:
        fixed[split] = [question_instance(r)
                        for r in _load_question_files(as_paths(paths))]
    return splits_lib.split_instances(pool, sizes, seed, fixed=fixed)

  config = {"questions": [os.fspath(p) for p in as_paths(questions)],
            "split_questions": {k: [os.fspath(p) for p in as_paths(v)]
                                for k, v in (split_questions or {}).items()},
            "corpus": os.fspath(corpus) if corpus is not None else None,
            "retrieval_urls": retrieval_urls, "split_sizes": split_sizes, "seed": seed,
            "verifier": verifier, "per_file_sizes": per_file_sizes,
            "seed_harness": seed_harness}
  return _qa_domain("searchqa", make_splits, retrieve, verifier, judge, config, seed_harness)


class _LazyBM25:
  """A BM25Retriever built on first use, so building a domain does not index a corpus."""

  def __init__(self, load_corpus):
    self._load_corpus, self._retriever = load_corpus, None
    self._lock = threading.Lock()

  def __call__(self, queries, topk):
    with self._lock:
      if self._retriever is None:
        self._retriever = retrieval.BM25Retriever(self._load_corpus())
    return self._retriever(queries, topk)


def synthetic_qa_domain(seed=0, split_sizes=None, verifier="exact_match", judge=None,
                        seed_harness="searchqa", **world):
  """Multi-hop QA over a generated world of fictional entities (synthetic_qa), offline.

  Args:
    seed: seeds both the world and the splits.
    seed_harness: "searchqa" (WHALE's h0), "searchqa_compact" (the same loop in fewer
      tokens, with short passages, for tiny models) or "searchqa_two_hop" (Harness
      Learning's fixed two-hop program).
    world: num_countries, num_cities, num_companies, num_people for generate_world.
  """
  split_sizes = dict(DEFAULT_SPLIT_SIZES if split_sizes is None else split_sizes)
  corpus, questions = synthetic_qa.generate_world(seed=seed, **world)
  retrieve = retrieval.BM25Retriever(corpus)

  def make_splits():
    return splits_lib.split_instances([question_instance(q) for q in questions], split_sizes,
                                      seed)
  config = {"seed": seed, "split_sizes": split_sizes, "verifier": verifier,
            "seed_harness": seed_harness, **world}
  return _qa_domain("synthetic_qa", make_splits, retrieve, verifier, judge, config,
                    seed_harness)
