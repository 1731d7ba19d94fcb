"""Bad data files fail at once, naming the file, the line or row, and what was expected; a
failed load leaves nothing behind."""
import json
import os
import time

import pyarrow
import pyarrow.parquet
import pytest

from whale_jax import tasks
from whale_jax.tasks import record_files
from whale_jax.tasks.math import files as math_files
from whale_jax.tasks.qa import files as qa_files

GOOD = {"id": "q1", "question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare"]}


def _fails(load, error_type, pattern, directory):
  """load() raises error_type matching pattern within 10 s and writes nothing into directory."""
  before = sorted(os.listdir(directory))
  started = time.perf_counter()
  with pytest.raises(error_type, match=pattern) as raised:
    load()
  elapsed = time.perf_counter() - started
  assert elapsed < 10, elapsed
  assert sorted(os.listdir(directory)) == before
  return str(raised.value)


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
  path = tmp_path / "train.jsonl"
  path.write_text(json.dumps(GOOD) + "\n\n" + '{"question": "Where?", "golden_answers": [\n')
  message = _fails(lambda: qa_files.load_questions(path), ValueError,
                   "train.jsonl line 3: not valid JSON", tmp_path)
  assert "expected one JSON object per line" in message


def test_jsonl_line_that_is_not_an_object(tmp_path):
  path = tmp_path / "train.jsonl"
  path.write_text(json.dumps(GOOD) + "\n" + '["Who?", "Me"]\n')
  _fails(lambda: record_files.read_records(path), ValueError,
         "train.jsonl line 2: a JSON list, .*expected one JSON object per line", tmp_path)


def test_parquet_with_a_missing_column_names_file_row_and_fields(tmp_path):
  path = tmp_path / "test.parquet"
  pyarrow.parquet.write_table(pyarrow.table({"id": ["a", "b"], "question": ["Q1?", "Q2?"]}),
                              path)
  message = _fails(lambda: qa_files.load_questions(path), ValueError,
                   "test.parquet row 1 .* has no answer", tmp_path)
  assert "golden_answers" in message and "found fields ['id', 'question']" in message


def test_math_parquet_without_an_answer_column(tmp_path):
  path = tmp_path / "dapo.parquet"
  pyarrow.parquet.write_table(pyarrow.table({"prompt": ["What is 1+1?"]}), path)
  _fails(lambda: math_files.load_problems(path), ValueError,
         "dapo.parquet row 1 needs a problem .* and an answer", tmp_path)


def test_corrupt_parquet_names_the_file(tmp_path):
  path = tmp_path / "test.parquet"
  path.write_bytes(b"PAR1 this is not parquet")
  _fails(lambda: qa_files.load_questions(path), ValueError,
         "test.parquet: not a readable parquet file", tmp_path)


def test_csv_line_with_the_wrong_number_of_fields(tmp_path):
  path = tmp_path / "bamboogle.csv"
  path.write_text("Question,Answer\nWho wrote Hamlet?,Shakespeare\nWhere?,Paris,France,extra\n")
  _fails(lambda: qa_files.load_questions(path), ValueError,
         r"bamboogle.csv line 3: 4 fields, but the header line has 2 \(Question, Answer\)",
         tmp_path)
  path.write_text("Question,Answer\nWho wrote Hamlet?\n")
  _fails(lambda: qa_files.load_questions(path), ValueError,
         "bamboogle.csv line 2: 1 fields, but the header line has 2", tmp_path)


def test_json_file_errors_name_line_and_record(tmp_path):
  path = tmp_path / "hotpot.json"
  path.write_text('[{"question": "Q?", "answer": "A"},\n {"question": }]')
  _fails(lambda: qa_files.load_questions(path), ValueError,
         "hotpot.json line 2 column 15: not valid JSON", tmp_path)
  path.write_text('[{"question": "Q?", "answer": "A"}, "just text"]')
  _fails(lambda: qa_files.load_questions(path), ValueError,
         "hotpot.json record 2: a JSON str", tmp_path)


def test_non_utf8_file_is_named(tmp_path):
  path = tmp_path / "questions.csv"
  path.write_bytes(b"Question,Answer\nCaf\xe9?,yes\n")
  _fails(lambda: qa_files.load_questions(path), ValueError, "questions.csv: not UTF-8 text",
         tmp_path)


def test_missing_question_file_is_named(tmp_path):
  missing = tmp_path / "nq_test.jsonl"
  _fails(lambda: qa_files.load_questions(missing), FileNotFoundError,
         "data file .*nq_test.jsonl does not exist", tmp_path)


def test_missing_corpus_fails_when_the_domain_is_built(tmp_path):
  questions = tmp_path / "train.jsonl"
  questions.write_text(json.dumps(GOOD) + "\n")
  missing = tmp_path / "wiki-18.jsonl"
  message = _fails(lambda: tasks.get_domain("searchqa", questions=str(questions),
                                            corpus=str(missing)),
                   FileNotFoundError, "passage corpus .*wiki-18.jsonl does not exist", tmp_path)
  assert "fix the path" in message
  _fails(lambda: qa_files.load_corpus(missing), FileNotFoundError, "wiki-18.jsonl", tmp_path)


def test_corpus_row_without_text_names_the_line(tmp_path):
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text('{"id": "1", "text": "a"}\n{"id": "2", "title": "t"}\n')
  _fails(lambda: qa_files.load_corpus(corpus), ValueError,
         "corpus.jsonl line 2 has neither 'text' nor 'contents'", tmp_path)


def test_good_files_still_load(tmp_path):
  path = tmp_path / "train.jsonl"
  path.write_text(json.dumps(GOOD) + "\n")
  assert qa_files.load_questions(path) == [{"id": "train:q1", "question": "Who wrote Hamlet?",
                                            "golden_answers": ["Shakespeare"]}]
  csv_path = tmp_path / "b.csv"
  csv_path.write_text('Question,Answer\n"Who, then?",Me\n')
  assert record_files.read_located_records(csv_path) == [
      (f"{csv_path} line 2", {"Question": "Who, then?", "Answer": "Me"})]
