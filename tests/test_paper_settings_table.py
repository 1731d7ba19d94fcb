"""docs/paper_settings.md cannot drift: every row's config value is what the paper config
gives, every paper config has its table, and every status is paper, departs or guess."""
import ast
import dataclasses
import importlib
import os
import re

import pytest

from whale_jax import typed_config
from whale_jax.algorithms import experiment_config

TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                     "paper_settings.md")
HEADING = re.compile(r"^## `configs/(\w+)\.py:([\w,]*)`$")
STATUSES = ("paper", "departs", "guess")
ABSENT = object()
# Every paper variant must have a table (smoke and tiny change only sizes).
REQUIRED = {"whale": ("searchqa", "math", "chess", "searchqa,adaptive", "searchqa,fst",
                      "searchqa,weight_only", "searchqa,harness_only", "searchqa,stagewise"),
            "vace": ("docqa", "toolflow"),
            "harness_learning": ("maze", "qa", "qa,2wiki", "qa,hotpotqa")}


def parse_tables(text):
  """[(config file stem, argument, [row dict])] of the markdown."""
  tables, rows = [], None
  for number, line in enumerate(text.splitlines(), 1):
    heading = HEADING.match(line.strip())
    if heading:
      rows = []
      tables.append((heading.group(1), heading.group(2), rows))
      continue
    if line.startswith("## "):
      rows = None
    if rows is None or not line.startswith("|") or line.startswith("|---"):
      continue
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    if cells[0] == "setting":
      continue
    assert len(cells) == 5, f"line {number}: {len(cells)} cells, want 5: {line}"
    rows.append({"line": number, "setting": cells[0].strip("`"), "paper": cells[1],
                 "source": cells[2], "config": cells[3].strip("`"), "status": cells[4]})
  return tables


def _plain(value):
  """Lists as tuples, ConfigDicts as dicts, so a literal compares with a config value."""
  if hasattr(value, "to_dict"):
    value = value.to_dict()
  if isinstance(value, dict):
    return {key: _plain(item) for key, item in value.items()}
  if isinstance(value, (list, tuple)):
    return tuple(_plain(item) for item in value)
  return value


def _typed_section(config, name):
  """A config section read by its options class (defaults filled, the recipe's preset)."""
  kind = experiment_config._TYPED.get(name)  # pylint: disable=protected-access
  if kind is None:
    return ABSENT
  section = typed_config.read(kind, _plain(config.get(name, {})), path=f"config.{name}")
  preset_section, preset = experiment_config.RECIPE_PRESETS.get(config.recipe, (None, {}))
  if preset_section == name:
    section = dataclasses.replace(section, **preset)
  return section


def _step(value, part):
  key, *indices = re.findall(r"[^\[\]]+", part)
  if isinstance(value, dict) or hasattr(value, "to_dict"):
    value = value.get(key, ABSENT)
  else:
    value = getattr(value, key, ABSENT)
  for index in indices:
    if value is ABSENT or not isinstance(value, (list, tuple)) or int(index) >= len(value):
      return ABSENT
    value = value[int(index)]
  return value


def resolve(config, setting):
  """The value at setting's key path (module docstring of docs/paper_settings.md)."""
  count = setting.startswith("len(")
  path = setting[4:-1] if count else setting
  parts = path.split(".")
  value = config
  for depth, part in enumerate(parts):
    value = _step(value, part)
    if value is ABSENT and depth == 0:
      break
    if value is ABSENT and depth == 1:
      value = _typed_section(config, parts[0])
      for typed_part in parts[1:]:
        value = ABSENT if value is ABSENT else _step(value, typed_part)
      break
    if value is ABSENT:
      break
  if value is ABSENT:
    return ABSENT
  return len(value) if count else _plain(value)


def check_table(text):
  """Messages for every row whose config value is not the table's (empty: no drift)."""
  problems = []
  for stem, argument, rows in parse_tables(text):
    config = importlib.import_module(f"configs.{stem}").get_config(argument)
    for row in rows:
      where = f"docs/paper_settings.md line {row['line']} (configs/{stem}.py:{argument})"
      if not row["status"].split(":")[0].split(" ")[0] in STATUSES:
        problems.append(f"{where}: status {row['status']!r} is none of {STATUSES}")
      actual = resolve(config, row["setting"])
      if row["config"] == "-":
        if actual is not ABSENT:
          problems.append(f"{where}: {row['setting']} is {actual!r} in the config, the table "
                          "says it has no such key (-)")
        continue
      expected = _plain(ast.literal_eval(row["config"]))
      if actual is ABSENT or actual != expected:
        shown = "absent" if actual is ABSENT else repr(actual)
        problems.append(f"{where}: {row['setting']} is {shown} in the config, the table says "
                        f"{expected!r}")
  return problems


def test_every_row_is_the_config_value():
  with open(TABLE, encoding="utf-8") as file:
    problems = check_table(file.read())
  assert not problems, "\n".join(problems)


def test_every_paper_config_has_a_table_and_every_table_rows():
  with open(TABLE, encoding="utf-8") as file:
    tables = parse_tables(file.read())
  present = {(stem, argument) for stem, argument, rows in tables if rows}
  missing = [(stem, argument) for stem, arguments in REQUIRED.items()
             for argument in arguments if (stem, argument) not in present]
  assert not missing
  assert sum(len(rows) for _, _, rows in tables) >= 150


def test_a_planted_change_on_either_side_is_caught():
  with open(TABLE, encoding="utf-8") as file:
    text = file.read()
  # The table changed: SearchQA's learning rate written as 1e-6.
  planted = text.replace("| `training.optimizer.learning_rate` | 1e-7 | SPEC 1.5 | `1e-07` |",
                         "| `training.optimizer.learning_rate` | 1e-7 | SPEC 1.5 | `1e-06` |",
                         1)
  assert planted != text
  assert ["training.optimizer.learning_rate is 1e-07 in the config, the table says 1e-06"
          in problem for problem in check_table(planted)] == [True]
  # A key the table says is absent, and a status that is none of the three.
  planted = text.replace("| `domain.seed` | 42 | SPEC 7 | `-` |",
                         "| `loop.seed` | 42 | SPEC 7 | `-` |", 1)
  planted = planted.replace("| 256 | SPEC 1.4 | `256` | paper |",
                            "| 256 | SPEC 1.4 | `256` | roughly |", 1)
  problems = check_table(planted)
  assert len(problems) == 2
  assert any("loop.seed is 0 in the config, the table says it has no such key" in problem
             for problem in problems)
  assert any("status 'roughly' is none of" in problem for problem in problems)


def test_resolve_reads_typed_defaults_presets_indices_and_counts():
  from configs import whale  # pylint: disable=import-outside-toplevel
  config = whale.get_config("searchqa,adaptive")
  assert resolve(config, "whale.window_epochs") == 0.2          # WhaleConfig's default
  assert resolve(config, "whale.adaptive") is True               # whale_adaptive's preset
  assert resolve(config, "search.command[0]") == "claude"
  assert resolve(config, "search.command[99]") is ABSENT
  assert resolve(config, "len(domain.split_questions.test)") == 7
  assert resolve(config, "domain.no_such_key") is ABSENT
  assert resolve(config, "no_such_section.key") is ABSENT
