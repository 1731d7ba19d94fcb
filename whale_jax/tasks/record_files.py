"""Rows of a data file as dicts (.jsonl, .json, .parquet, .csv, .tsv), and path lists.

Bad files fail on reading, naming the file and where in it: a missing file, a line that is
not a JSON object, a CSV line with more or fewer fields than its header, a parquet file that
is not one, a JSON file that is not a list of objects.
"""
import csv
import json
import os

SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".tsv")


def as_paths(paths):
  """A list of paths from None, one path, or several."""
  if paths is None:
    return []
  return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)


def check_exists(path, what="data file"):
  """Raises FileNotFoundError naming path unless it is a file."""
  path = os.fspath(path)
  if not os.path.isfile(path):
    where = "a directory, not a file" if os.path.isdir(path) else "does not exist"
    raise FileNotFoundError(f"The {what} {path} {where}; fix the path in the config "
                            f"(absolute, or relative to {os.getcwd()}).")


def read_records(path):
  """The rows of a .jsonl, .json (list, or a dict holding one list), .parquet, .csv or .tsv."""
  return [row for _, row in read_located_records(path)]


def read_located_records(path):
  """(location, row) pairs: location is e.g. "q.jsonl line 7" or "q.parquet row 3" (1-based),
  for error messages about that row."""
  path = os.fspath(path)
  if not path.endswith(SUFFIXES):
    raise ValueError(f"{path}: unknown file type; use one of {', '.join(SUFFIXES)}.")
  check_exists(path)
  try:
    if path.endswith(".jsonl"):
      return _jsonl(path)
    if path.endswith(".json"):
      return _json(path)
    if path.endswith(".parquet"):
      return _parquet(path)
    return _csv(path)
  except UnicodeDecodeError as error:
    raise ValueError(f"{path}: not UTF-8 text ({error}).") from None


def _object(value, where, expected):
  if not isinstance(value, dict):
    raise ValueError(f"{where}: a JSON {type(value).__name__}, {json.dumps(value)[:60]}; "
                     f"expected {expected}.")
  return value


def _jsonl(path):
  rows = []
  with open(path, encoding="utf-8") as file:
    for number, line in enumerate(file, 1):
      if not line.strip():
        continue
      where = f"{path} line {number}"
      try:
        value = json.loads(line)
      except json.JSONDecodeError as error:
        position = (f"at column {error.colno}" if error.lineno == 1
                    else "at the end of the line")
        raise ValueError(f"{where}: not valid JSON ({error.msg} {position}); expected one "
                         f"JSON object per line, got {line.strip()[:60]!r}.") from None
      rows.append((where, _object(value, where, "one JSON object per line")))
  return rows


def _json(path):
  with open(path, encoding="utf-8") as file:
    try:
      data = json.load(file)
    except json.JSONDecodeError as error:
      raise ValueError(f"{path} line {error.lineno} column {error.colno}: not valid JSON "
                       f"({error.msg}).") from None
  if isinstance(data, dict):
    lists = [value for value in data.values() if isinstance(value, list)]
    if len(lists) != 1:
      raise ValueError(f"{path} is a JSON object with {len(lists)} lists of records; expected "
                       "a JSON list of records or an object holding exactly one list "
                       "(e.g. TriviaQA's {\"Data\": [...]}).")
    data = lists[0]
  if not isinstance(data, list):
    raise ValueError(f"{path} holds a JSON {type(data).__name__}; expected a list of records.")
  return [(f"{path} record {i + 1}", _object(value, f"{path} record {i + 1}", "an object"))
          for i, value in enumerate(data)]


def _parquet(path):
  import pyarrow  # pylint: disable=import-outside-toplevel
  import pyarrow.parquet  # pylint: disable=import-outside-toplevel
  try:
    table = pyarrow.parquet.read_table(path)
  except (pyarrow.ArrowException, OSError) as error:
    raise ValueError(f"{path}: not a readable parquet file ({error}).") from None
  return [(f"{path} row {i + 1}", row) for i, row in enumerate(table.to_pylist())]


def _csv(path):
  rows = []
  with open(path, encoding="utf-8", newline="") as file:
    reader = csv.DictReader(file, delimiter="\t" if path.endswith(".tsv") else ",")
    try:
      for row in reader:
        where = f"{path} line {reader.line_num}"
        if None in row or None in row.values():
          values = len(reader.fieldnames) + len(row.get(None) or ()) - sum(
              value is None for key, value in row.items() if key is not None)
          raise ValueError(f"{where}: {values} fields, but the header line has "
                           f"{len(reader.fieldnames)} ({', '.join(reader.fieldnames)}).")
        rows.append((where, row))
    except csv.Error as error:
      raise ValueError(f"{path} line {reader.line_num}: not readable as CSV ({error}).") from None
  return rows
