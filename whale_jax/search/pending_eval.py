"""One coding-agent session, M candidates: the reserved files and pending_eval.json.

  names = candidate_names(3)           # ["candidate_1.py", "candidate_2.py", "candidate_3.py"]
  text = session_rules(names, domain.name, max_lines, allowed_imports)   # for the instructions
  entries, why_not = read_entries(pending_json_text, names)
  entries["candidate_2.py"]            # {"name", "hypothesis", "changes", "axis", "components"}
  why_not["candidate_3.py"]            # why it has no usable entry ("" when it has one)
  mechanism(entries["candidate_2.py"])          # "axis B: user template"

As WHALE and Meta-Harness run their proposer (SPEC 1.6): one session per iteration writes the
M candidate files whose names its task reserved, each a whole harness program, and
pending_eval.json, a JSON list with one object per candidate:
  {"name": "candidate_1", "hypothesis": "<one sentence>", "changes": "<what changed>",
   "axis": "A".."F", "components": ["<the parts of the harness changed>", ...]}
(a {"candidates": [...]} object is read too; a name may end in .py). A candidate without a
valid entry is not evaluated: read_entries says why, and the caller records it as refused with
that reason. The axes are the exploitation axes of WHALE's proposer skill (AXES, per domain
family; DEFAULT_AXES elsewhere).
"""
import json

AXIS_LETTERS = "ABCDEF"
DEFAULT_AXES = {"A": "system prompt", "B": "user prompt template",
                "C": "rewriting the model's actions (queries, code) before they run",
                "D": "tool parameters and how results are fetched",
                "E": "what goes back to the model after a tool call (nudges, recovery)",
                "F": "stop rule and turn budget"}
_SEARCH_AXES = {"A": "system prompt", "B": "user prompt template", "C": "query rewriting",
                "D": "retrieval parameters (topk, max_doc_tokens)",
                "E": "env_response nudges (what follows a tool result)",
                "F": "stop rule and turn budget"}
AXES = {"searchqa": _SEARCH_AXES, "synthetic_qa": _SEARCH_AXES,
        "math": {"A": "system prompt", "B": "user prompt template", "C": "code normalization",
                 "D": "interpreter feedback", "E": "env_response and no-tool recovery",
                 "F": "turn budget and stop hooks"}}
FIELDS = ("name", "hypothesis", "changes", "axis", "components")
MAX_REPORT_LINES = 30
MAX_FIELD_CHARS = 2000


def axes_for(domain_name):
  """{letter: what that axis changes} of a domain (its family: the part before ':')."""
  return AXES.get(str(domain_name).split(":", 1)[0], DEFAULT_AXES)


def candidate_names(count):
  """The file names reserved for a session's candidates."""
  if not isinstance(count, int) or count < 1:
    raise ValueError(f"a session needs at least one candidate; got count={count!r}.")
  return [f"candidate_{number}.py" for number in range(1, count + 1)]


def session_rules(names, domain_name, max_lines, allowed_imports):
  """The part of a session's instructions that says what to write."""
  axes = axes_for(domain_name)
  first = names[0].removesuffix(".py")
  return "\n".join([
      f"Write {len(names)} new candidate harnesses, each a whole program, to the files "
      f"reserved for them: {', '.join(names)} (each at most {max_lines} lines, importing "
      f"only: {', '.join(allowed_imports)}). One mechanism per candidate, and each a "
      "different one; an edit that only changes constants is parameter tuning: change a "
      "mechanism instead. No dataset names, no question-specific branches, no hardcoded "
      "answers.",
      "Then write pending_eval.json: a JSON list with one object per candidate, e.g.",
      f'  {{"name": "{first}", "hypothesis": "<one sentence: what fails now, the mechanism '
      'you change, why it helps>", "changes": "<what you changed>", "axis": "<one of '
      f'{", ".join(AXIS_LETTERS)}>", "components": ["<the parts of the harness you '
      'changed>"]}',
      "Axes: " + "; ".join(f"{letter} {what}" for letter, what in axes.items()) + ". If the "
      "last iterations all explored the same axis, pick a different one.",
      "A candidate that is missing, fails the search's checks (syntax, the run function, "
      "imports, line limit) or has no valid pending_eval.json entry is recorded as invalid "
      "with the reason, and not evaluated.",
      f"Also write REPORT.md: at most {MAX_REPORT_LINES} lines on what the last iteration's "
      "results (archive/ledger.md, archive/scores.md, the traces) taught you."])


def _check_entry(entry):
  """(normalized entry, "") or (None, why not)."""
  if not isinstance(entry, dict):
    return None, f"it is a {type(entry).__name__}, not an object with {', '.join(FIELDS)}"
  problems = []
  for field in ("hypothesis", "changes"):
    value = entry.get(field)
    if not isinstance(value, str) or not value.strip():
      problems.append(f"{field} must be a non-empty string")
  axis = entry.get("axis")
  letter = axis.strip()[:1].upper() if isinstance(axis, str) else ""
  if not letter or letter not in AXIS_LETTERS or (
      len(axis.strip()) > 1 and axis.strip()[1].isalpha()):
    problems.append(f"axis={axis!r} must be one letter of {AXIS_LETTERS}")
  components = entry.get("components")
  if (not isinstance(components, list) or not components or
      not all(isinstance(c, str) and c.strip() for c in components)):
    problems.append("components must be a non-empty list of strings")
  if problems:
    return None, "; ".join(problems)
  return {"name": str(entry.get("name")),
          "hypothesis": " ".join(entry["hypothesis"].split())[:MAX_FIELD_CHARS],
          "changes": entry["changes"].strip()[:MAX_FIELD_CHARS], "axis": letter,
          "components": [" ".join(c.split())[:200] for c in components]}, ""


def read_entries(text, names):
  """({name: normalized entry or None}, {name: why it has none, or ""}) for the reserved
  names, from pending_eval.json's text (None: the file was not written)."""
  entries, why_not = dict.fromkeys(names), dict.fromkeys(names, "")
  if text is None:
    return entries, dict.fromkeys(names, "pending_eval.json was not written")
  try:
    data = json.loads(text)
  except ValueError as error:
    return entries, dict.fromkeys(names, f"pending_eval.json is not JSON ({error})")
  if isinstance(data, dict) and isinstance(data.get("candidates"), list):
    data = data["candidates"]
  if not isinstance(data, list):
    return entries, dict.fromkeys(names, "pending_eval.json must be a JSON list of objects, "
                                  "one per candidate")
  by_name = {}
  for entry in data:
    name = entry.get("name") if isinstance(entry, dict) else None
    if isinstance(name, str):
      by_name.setdefault(name.strip().removesuffix(".py"), entry)
  for name in names:
    entry = by_name.get(name.removesuffix(".py"))
    if entry is None:
      why_not[name] = (f"pending_eval.json has no entry named {name.removesuffix('.py')!r} "
                       f"(names found: {sorted(by_name)[:10]})")
      continue
    entries[name], why = _check_entry(entry)
    if why:
      why_not[name] = f"the pending_eval.json entry of {name.removesuffix('.py')!r} is " \
                      f"invalid: {why}"
  return entries, why_not


def mechanism(entry):
  """The archive's mechanism of a candidate: its axis and components."""
  return f"axis {entry['axis']}: {', '.join(entry['components'])}"[:200]


def read_report(text):
  """REPORT.md as kept: at most MAX_REPORT_LINES lines ("" when none was written)."""
  lines = (text or "").strip().splitlines()
  return "\n".join(lines[:MAX_REPORT_LINES])
