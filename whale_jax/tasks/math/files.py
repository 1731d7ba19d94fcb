"""Readers for math problem files: AIME-style and DAPO-Math-style layouts.

  AIME-style (.jsonl, .json, .parquet, .csv): a problem field ("problem", "Problem",
      "question" or "Question") and an answer field ("answer" or "Answer"); an id from "id",
      "ID" or "problem_id" when present. E.g. AIME 2024 (ID, Problem, Solution, Answer) and
      AIME 2025 (question, answer).
  DAPO-Math-17k (.parquet): prompt = [{"role": "user", "content": <DAPO instruction> +
      problem + <DAPO reminder>}], reward_model = {"ground_truth": answer}, extra_info.index;
      the deduplicated re-release has prompt = the problem and solution = the answer.
The DAPO instruction and reminder around the problem are removed, so every record is
{"id", "question", "answer"} with the bare problem statement.
"""
import os

from whale_jax.tasks.record_files import read_located_records

DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your response "
               "should be of the form Answer: $Answer (without quotes) where $Answer is the "
               "answer to the problem.\n\n")
DAPO_SUFFIX = "\n\nRemember to put your answer on its own line after \"Answer:\"."


def _strip_dapo_template(text):
  if text.startswith(DAPO_PREFIX):
    text = text[len(DAPO_PREFIX):]
  if text.endswith(DAPO_SUFFIX):
    text = text[:-len(DAPO_SUFFIX)]
  return text.strip()


def _problem_text(row):
  for field in ("problem", "Problem", "question", "Question"):
    if isinstance(row.get(field), str) and row[field].strip():
      return row[field]
  prompt = row.get("prompt")
  if isinstance(prompt, str):
    return prompt
  if hasattr(prompt, "tolist"):
    prompt = prompt.tolist()
  if isinstance(prompt, (list, tuple)):
    user = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    if user and isinstance(user[-1], str):
      return user[-1]
  return None


def _answer_text(row):
  for field in ("answer", "Answer"):
    if row.get(field) not in (None, ""):
      return str(row[field])
  reward_model = row.get("reward_model")
  if isinstance(reward_model, dict) and reward_model.get("ground_truth") not in (None, ""):
    return str(reward_model["ground_truth"])
  if row.get("solution") not in (None, ""):
    return str(row["solution"])
  return None


def math_record(row, index, source, location=None):
  """{"id", "question", "answer"} from one row of an AIME- or DAPO-style file.

  location names the row in errors (default: "{source} row {index}").
  """
  problem = _problem_text(row)
  answer = _answer_text(row)
  if problem is None or answer is None:
    where = location or f"{source} row {index}"
    raise ValueError(f"{where} needs a problem ('problem', 'Problem', 'question' or a chat "
                     "'prompt') and an answer ('answer', 'Answer', "
                     f"reward_model.ground_truth or 'solution'); found fields {sorted(row)}.")
  extra_info = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
  record_id = next((value for value in (row.get("id"), row.get("ID"), row.get("problem_id"),
                                        extra_info.get("index")) if value not in (None, "")),
                   index)
  return {"id": f"{source}:{record_id}", "question": _strip_dapo_template(problem),
          "answer": answer.strip()}


def load_problems(path, source=None):
  """Math records from one file; `source` prefixes the ids (default: the file stem)."""
  source = source or os.path.splitext(os.path.basename(os.fspath(path)))[0]
  return [math_record(row, i, source, where)
          for i, (where, row) in enumerate(read_located_records(path))]
