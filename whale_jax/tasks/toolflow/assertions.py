"""End-state assertions over a toolflow environment, and the partial-credit reward.

  results = evaluate(assertions, initial_state, final_state)    # [True, False, ...]
  reward = partial_credit(results)                              # fraction satisfied

An assertion is {"kind", "collection", "where", "contains", ...}; a record matches when
  where     {field: value}: the field equals value (case-insensitive for text; a list field
            holds value), and
  contains  {field: text or [texts]}: every text is inside the field (case-insensitive; a list
            field is read joined by ", "; field "*" is any field of the record).
Fields are looked up in the record, then in its "cells" (spreadsheet rows).
Kinds:
  exists       some record matches.
  not_exists   no record matches.
  field_equals the records matching `where` (at least one) all have field == value.
  updated      a record matching `where` differs from its initial version and matches
               `contains` (a spreadsheet row that was edited to hold the right text).
  not_updated  no record matching `where` both differs from its initial version and matches
               `contains` (without `contains`: none differs).
  unchanged    every record matching `where` in the initial state is still there, unchanged.
  count        exactly `count` records match.
Records are paired with their initial versions by "id". With exclude_initially_satisfied,
assertions already true of the initial state and still true at the end are left out of the
partial credit (how AutomationBench's published per-task records count "excluded"
assertions); an assertion true at the start and broken at the end still counts as failed.
"""
KINDS = ("exists", "not_exists", "field_equals", "updated", "not_updated", "unchanged", "count")
_KEYS = {"exists": (), "not_exists": (), "field_equals": ("field", "value"), "updated": (),
         "not_updated": (), "unchanged": (), "count": ("count",)}


def check_assertion(assertion, where_from=""):
  """Raises ValueError for a malformed assertion (naming where_from, e.g. a file and task)."""
  prefix = f"{where_from}: " if where_from else ""
  if not isinstance(assertion, dict) or assertion.get("kind") not in KINDS:
    raise ValueError(f"{prefix}assertion {assertion!r:.120} needs a kind in {', '.join(KINDS)}.")
  if not isinstance(assertion.get("collection"), str):
    raise ValueError(f"{prefix}assertion {assertion!r:.120} needs a collection name.")
  for key in ("where", "contains"):
    if not isinstance(assertion.get(key, {}), dict):
      raise ValueError(f"{prefix}assertion {key} must be a dict of field -> value.")
  missing = [k for k in _KEYS[assertion["kind"]] if k not in assertion]
  if missing:
    raise ValueError(f"{prefix}{assertion['kind']} assertion needs {', '.join(missing)}.")


def _field(record, name):
  if name in record:
    return record[name]
  return (record.get("cells") or {}).get(name)


def _text(value):
  if isinstance(value, list):
    return ", ".join(str(v) for v in value)
  return "" if value is None else str(value)


def _equal(value, expected):
  if isinstance(value, list):
    return any(_equal(item, expected) for item in value)
  if isinstance(value, str) or isinstance(expected, str):
    return _text(value).casefold() == _text(expected).casefold()
  return value == expected


def _contains(record, field, texts):
  texts = texts if isinstance(texts, list) else [texts]
  if field == "*":
    haystack = " | ".join(_text(v) for v in list(record.values()) +
                          list((record.get("cells") or {}).values()))
  else:
    haystack = _text(_field(record, field))
  return all(str(text).casefold() in haystack.casefold() for text in texts)


def matches(record, where=None, contains=None):
  return (all(_equal(_field(record, f), v) for f, v in (where or {}).items()) and
          all(_contains(record, f, t) for f, t in (contains or {}).items()))


def holds(assertion, initial_state, state):
  """Whether one assertion holds of state (initial_state is the task's starting state)."""
  kind, where, contains = assertion["kind"], assertion.get("where"), assertion.get("contains")
  records = state.get(assertion["collection"], [])
  initial = {r.get("id"): r for r in initial_state.get(assertion["collection"], [])}
  if kind == "exists":
    return any(matches(r, where, contains) for r in records)
  if kind == "not_exists":
    return not any(matches(r, where, contains) for r in records)
  if kind == "count":
    return sum(matches(r, where, contains) for r in records) == assertion["count"]
  if kind == "field_equals":
    chosen = [r for r in records if matches(r, where)]
    return bool(chosen) and all(_equal(_field(r, assertion["field"]), assertion["value"])
                                for r in chosen)
  changed = [r for r in records if matches(r, where) and r != initial.get(r.get("id"))]
  if kind == "updated":
    return any(matches(r, None, contains) for r in changed)
  if kind == "not_updated":
    return not any(matches(r, None, contains) for r in changed)
  current = {r.get("id"): r for r in records}
  return all(current.get(r_id) == r for r_id, r in initial.items() if matches(r, where))


def evaluate(assertions, initial_state, state):
  return [holds(a, initial_state, state) for a in assertions]


def counted(assertions, initial_state, results, exclude_initially_satisfied=False):
  """Which assertions count toward the partial credit (see the module docstring)."""
  if not exclude_initially_satisfied:
    return [True] * len(assertions)
  at_start = evaluate(assertions, initial_state, initial_state)
  return [not (start and end) for start, end in zip(at_start, results)]


def partial_credit(results, counts=None):
  """Fraction of the counted assertions that hold (1.0 when none count)."""
  counts = [True] * len(results) if counts is None else counts
  scored = [result for result, count in zip(results, counts) if count]
  return sum(scored) / len(scored) if scored else 1.0
