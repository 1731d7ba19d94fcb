"""Math loaders on AIME- and DAPO-style files written in their real layouts."""
import json

import pyarrow
import pyarrow.parquet
import pytest

from whale_jax.tasks.math import files as math_files


def test_aime_2024_jsonl(tmp_path):
  path = tmp_path / "aime_2024.jsonl"
  path.write_text(json.dumps({"ID": "2024-I-1", "Problem": "Every morning Aya walks...",
                              "Solution": "$\\frac{9}{s} + t = 4$ ... so 204.",
                              "Answer": 204}) + "\n")
  assert math_files.load_problems(path) == [
      {"id": "aime_2024:2024-I-1", "question": "Every morning Aya walks...", "answer": "204"}]


def test_aime_2025_question_answer_columns(tmp_path):
  path = tmp_path / "aime2025.jsonl"
  path.write_text(json.dumps({"question": "Find the sum of all integer bases b>9...",
                              "answer": "70"}) + "\n")
  record = math_files.load_problems(path)[0]
  assert (record["id"], record["answer"]) == ("aime2025:0", "70")


def test_dapo_math_parquet_strips_the_instruction(tmp_path):
  path = tmp_path / "dapo-math-17k.parquet"
  problem = "In triangle $ABC$, find $k+m$."
  rows = [{"data_source": "math_dapo",
           "prompt": [{"content": math_files.DAPO_PREFIX + problem + math_files.DAPO_SUFFIX,
                       "role": "user"}],
           "ability": "MATH", "reward_model": {"ground_truth": "34", "style": "rule-lean"},
           "extra_info": {"index": "a7f3c2e0-uuid"}}]
  pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
  assert math_files.load_problems(path) == [
      {"id": "dapo-math-17k:a7f3c2e0-uuid", "question": problem, "answer": "34"}]


def test_dapo_processed_prompt_and_solution(tmp_path):
  path = tmp_path / "dapo_processed.parquet"
  rows = [{"prompt": "What is 2+3?", "solution": "5", "data_source": "math_dapo",
           "source_prompt": [{"content": "...", "role": "user"}], "ability": "MATH",
           "reward_model": {"ground_truth": "5", "style": "rule-lean"},
           "extra_info": {"index": "u1"}}]
  pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
  assert math_files.load_problems(path)[0] == {"id": "dapo_processed:u1",
                                                "question": "What is 2+3?", "answer": "5"}


def test_missing_answer_names_the_fields(tmp_path):
  path = tmp_path / "bad.jsonl"
  path.write_text(json.dumps({"problem": "p"}) + "\n")
  with pytest.raises(ValueError, match="reward_model.ground_truth"):
    math_files.load_problems(path)
