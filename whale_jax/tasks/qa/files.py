"""Readers for the question files and passage corpora that QA researchers bring.

Question files (.jsonl, .json, .parquet, .csv, .tsv) in the layouts the usual datasets ship:
  Search-R1 / FlashRAG (NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, MuSiQue, Bamboogle):
      question, golden_answers (list), id, data_source; Search-R1 parquet also
      reward_model.ground_truth.target
  HotpotQA and 2WikiMultihopQA originals (a JSON list): _id, question, answer
  MuSiQue original (jsonl): id, question, answer, answer_aliases
  NQ-open (jsonl): question, answer (list)
  TriviaQA: original JSON {"Data": [{QuestionId, Question, Answer: {Value, Aliases}}]} and
      the Hugging Face layout question_id, question, answer {value, aliases}
  PopQA (tsv/csv): id, question, possible_answers (a JSON list in a string)
  Bamboogle (csv): Question, Answer
Each record becomes {"id", "question", "golden_answers"}.

Passage corpora (.jsonl or .parquet): id, title, text; or id, contents with contents =
'"title"\ntext' (the wiki-18 layout of Search-R1). Each passage becomes {"id", "title", "text"}.
"""
import json
import os

from whale_jax.tasks.record_files import check_exists
from whale_jax.tasks.record_files import read_located_records


def _as_answer_list(value):
  """Golden answers from a string, a list, a JSON-list string or a TriviaQA answer dict."""
  if value is None:
    return []
  if isinstance(value, dict):
    answers = []
    for field in ("value", "Value", "target", "aliases", "Aliases", "normalized_aliases"):
      answers += _as_answer_list(value.get(field))
    return answers
  if isinstance(value, str):
    stripped = value.strip()
    if stripped.startswith("[") and stripped.endswith("]"):
      try:
        return _as_answer_list(json.loads(stripped))
      except json.JSONDecodeError:
        pass
    return [stripped] if stripped else []
  if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
    value = value.tolist() if hasattr(value, "tolist") else value
    return [answer for item in value for answer in _as_answer_list(item)]
  return [str(value)]


def _dedupe(answers):
  seen, unique = set(), []
  for answer in answers:
    if answer not in seen:
      seen.add(answer)
      unique.append(answer)
  return unique


def question_record(row, index, source, location=None):
  """{"id", "question", "golden_answers"} from one row of any supported layout.

  location names the row in errors (default: "{source} row {index}").
  """
  where = location or f"{source} row {index}"
  question = next((row[field] for field in ("question", "Question", "query")
                   if row.get(field)), None)
  if not isinstance(question, str):
    raise ValueError(f"{where} has no question; expected a 'question' (or "
                     f"'Question', 'query') field, found fields {sorted(row)}.")
  answers = []
  for field in ("golden_answers", "answers", "answer", "Answer", "possible_answers",
              "answer_aliases"):
    answers += _as_answer_list(row.get(field))
  reward_model = row.get("reward_model")
  if not answers and isinstance(reward_model, dict):
    answers = _as_answer_list(reward_model.get("ground_truth"))
  answers = _dedupe(answers)
  if not answers:
    raise ValueError(f"{where} ({question[:60]!r}) has no answer; expected "
                     "'golden_answers', 'answer', 'answers', 'possible_answers' or "
                     f"reward_model.ground_truth.target; found fields {sorted(row)}.")
  record_id = next((row[field] for field in ("id", "_id", "question_id", "QuestionId")
                    if row.get(field) not in (None, "")), index)
  return {"id": f"{source}:{record_id}", "question": question.strip(),
          "golden_answers": answers}


def load_questions(path, source=None):
  """Question records from one file; `source` prefixes the ids (default: the file stem)."""
  source = source or os.path.splitext(os.path.basename(os.fspath(path)))[0]
  return [question_record(row, i, source, where)
          for i, (where, row) in enumerate(read_located_records(path))]


def passage_record(row, index, source="corpus", location=None):
  """{"id", "title", "text"} from an id/title/text row or a wiki-18 id/contents row."""
  if "contents" in row and "text" not in row:
    title, _, text = str(row["contents"]).partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
      title = title[1:-1]
  elif "text" in row:
    title, text = row.get("title") or "", row["text"]
  else:
    raise ValueError(f"{location or f'{source} row {index}'} has neither 'text' nor "
                     "'contents'; passages need id/title/text or id/contents "
                     f"('\"title\"\\ntext'); found fields {sorted(row)}.")
  passage_id = row.get("id", row.get("docid", index))
  return {"id": str(passage_id), "title": str(title), "text": str(text).strip()}


def load_corpus(path):
  """Passages from a .jsonl or .parquet corpus file."""
  path = check_corpus(path)
  return [passage_record(row, i, path, where)
          for i, (where, row) in enumerate(read_located_records(path))]


def check_corpus(path):
  """path (as str) if it names an existing .jsonl or .parquet file; else a clear error.

  Cheap: call it where a corpus is configured, before anything loads it.
  """
  path = os.fspath(path)
  if not path.endswith((".jsonl", ".parquet")):
    raise ValueError(f"{path}: a corpus must be .jsonl or .parquet with id/title/text or "
                     "id/contents per passage.")
  check_exists(path, "passage corpus")
  return path
