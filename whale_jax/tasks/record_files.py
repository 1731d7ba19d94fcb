"""Rows of a data file as dicts (.jsonl, .json, .parquet, .csv, .tsv), and path lists."""
import csv
import json
import os

SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".tsv")


def as_paths(paths):
  """A list of paths from None, one path, or several."""
  if paths is None:
    return []
  return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)


def read_records(path):
  """The rows of a .jsonl, .json (list, or a dict holding one list), .parquet, .csv or .tsv."""
  path = os.fspath(path)
  if path.endswith(".jsonl"):
    with open(path, encoding="utf-8") as file:
      return [json.loads(line) for line in file if line.strip()]
  if path.endswith(".json"):
    with open(path, encoding="utf-8") as file:
      data = json.load(file)
    if isinstance(data, dict):
      lists = [value for value in data.values() if isinstance(value, list)]
      if len(lists) != 1:
        raise ValueError(f"{path} is a JSON object with {len(lists)} lists of records; expected "
                         "a JSON list of records or an object holding exactly one list "
                         "(e.g. TriviaQA's {\"Data\": [...]}).")
      data = lists[0]
    return list(data)
  if path.endswith(".parquet"):
    import pyarrow.parquet
    return pyarrow.parquet.read_table(path).to_pylist()
  if path.endswith((".csv", ".tsv")):
    with open(path, encoding="utf-8", newline="") as file:
      return list(csv.DictReader(file, delimiter="\t" if path.endswith(".tsv") else ","))
  raise ValueError(f"{path}: unknown file type; use one of {', '.join(SUFFIXES)}.")
