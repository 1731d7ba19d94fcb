"""The archive as a read-only tree of files, for a proposer that explores it with tools.

  view = build_view(archive, domain_name, description, instances=splits["harness"],
                    search_answers="answers", withheld=reference_strings(held_out))
  view.list("candidates/c0003")       # names in that folder
  view.read("candidates/c0003/traces/synthetic:4.txt")
  view.grep("Traceback")              # [(path, line number, line)] across every file
  view.write_to(directory)            # the same tree on disk (for a CLI coding agent)

Layout (README.md in the view says the same):
  README.md, task.md               the layout; the domain's task description
  scores.md                        every candidate: parent, status, success, turns, hypothesis
  frontier.md                      the Pareto front (success up, mean turns down)
  ledger.md                        what was tried and why it lost: rejected and duplicate
                                   proposals with their reasons, evaluated candidates that did
                                   not beat their parent
  candidates/<id>/harness.py       the source
  candidates/<id>/candidate.md     parent, origin, proposer, hypothesis, status, reasons, apply
                                   report, static-check failures
  candidates/<id>/scores.jsonl     per task: task_id, score, outcome, num_turns
  candidates/<id>/traces/<task>.txt  the whole episode: every llm call (messages, completions),
                                   every tool call with its arguments and result, the answer,
                                   the error and what the harness printed
  tasks/<task>.json                the public fields of each search task, plus its reference
                                   when search_answers says so

No leak by construction: the view is built only from the archive's candidate records (never
from the archive directory's other folders: the evaluation cache may hold validation episodes)
and from the instances passed in, which must be the search split. What of their references is
shown is SEARCH_ANSWER_MODES: "none", "answers" (the gold answers: Meta-Harness's traces carry
them), "answers_and_documents" (the whole reference, supporting documents included: Harness
Learning's execution reports). SEARCH_ANSWERS_BY_RECIPE holds each recipe's default. As a
second guard, every string in `withheld` (the held-out splits' reference strings, from
reference_strings) is replaced by WITHHELD_MARK wherever it occurs; strings shorter than
MIN_WITHHELD_CHARS are not searched for (they occur in ordinary text by chance).
"""
import functools
import json
import os
import posixpath

from whale_jax.search import archive as archive_lib

SEARCH_ANSWER_MODES = ("none", "answers", "answers_and_documents")
SEARCH_ANSWERS_BY_RECIPE = {
    "whale": "answers",                           # Meta-Harness search: traces carry answers
    "meta_harness": "answers",
    "harness_learning": "answers_and_documents",  # reports: gold answers + supporting docs
    "vace": "none",                               # the paper does not say; show nothing
    "baselines": "answers",
}
ANSWER_KEYS = ("golden_answers", "answers", "answer", "solution", "target", "label")
WITHHELD_MARK = "[withheld]"
MIN_WITHHELD_CHARS = 6
MAX_GREP_MATCHES = 200
MAX_GREP_LINE_CHARS = 300


def check_search_answers(mode, key="search_answers"):
  if mode not in SEARCH_ANSWER_MODES:
    raise ValueError(f"{key}={mode!r}; use one of {SEARCH_ANSWER_MODES} (defaults per recipe: "
                     f"{SEARCH_ANSWERS_BY_RECIPE}).")
  return mode


def reference_strings(instances):
  """Every string (and number, as text) in the references of instances: what must not leak."""
  found = set()

  def walk(value):
    if isinstance(value, str):
      found.add(value)
    elif isinstance(value, bool) or value is None:
      return
    elif isinstance(value, (int, float)):
      found.add(str(value))
    elif isinstance(value, dict):
      for item in value.values():
        walk(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
      for item in value:
        walk(item)
  for instance in instances:
    walk(instance.reference)
  return frozenset(found)


def _answers(reference):
  """The gold answers in a reference (the ANSWER_KEYS fields of a dict, else the value)."""
  if isinstance(reference, dict):
    return {key: reference[key] for key in ANSWER_KEYS if key in reference}
  return reference


def shown_reference(instance, search_answers):
  """What of instance's reference the proposer sees under search_answers (None: nothing)."""
  if instance is None or search_answers == "none":
    return None
  reference = _answers(instance.reference) if search_answers == "answers" else (
      instance.reference)
  return json.loads(json.dumps(reference, default=str))


def render_trace(trajectory, score, reference=None):
  """One episode in full as text: every call, every tool event, the answer and the error
  (and the task's reference, when one is given)."""
  lines = [f"# task {trajectory.task_id}: score {score:g}, outcome {trajectory.outcome}, "
           f"{trajectory.num_turns} llm call(s), {trajectory.num_completion_tokens} generated "
           f"tokens, {trajectory.wall_seconds:.2f} s"]
  if reference is not None:
    lines.append(f"reference: {json.dumps(reference, sort_keys=True)}")
  for index, call in enumerate(trajectory.calls):
    lines.append(f"\n## llm call {index + 1} ({call.method}, sampling "
                 f"{json.dumps(call.sampling, sort_keys=True, default=str)})")
    if call.messages is not None:
      for message in call.messages:
        lines.append(f"[{message.get('role')}]\n{message.get('content')}")
    if call.prompt is not None:
      lines.append(f"[prompt]\n{call.prompt}")
    for number, completion in enumerate(call.completions):
      lines.append(f"[model reply {number + 1}, finish {completion.finish_reason}]\n"
                   f"{completion.text}")
  for event in trajectory.tool_events:
    arguments = json.dumps(event.arguments, sort_keys=True, default=str)
    outcome = f"ERROR: {event.error}" if event.error else json.dumps(event.result, default=str)
    lines.append(f"\n## tool {event.name}({arguments})\n{outcome}")
  lines.append(f"\n## answer\n{trajectory.answer}")
  if trajectory.error:
    lines.append(f"\n## error\n{trajectory.error}")
  if trajectory.stdout:
    lines.append(f"\n## printed\n{trajectory.stdout}")
  return "\n".join(lines) + "\n"


def _trace_text(episodes, task_id, score, reference):
  trajectory = episodes().get(task_id)
  if trajectory is None:
    return f"# task {task_id}: score {score:g}; no trace was archived.\n"
  return render_trace(trajectory, score, reference)


def _safe_name(name):
  return "".join(c if c.isalnum() or c in "-_.:" else "_" for c in name) or "_"


class ArchiveView:
  """A read-only tree of text files (see the module docstring).

  Args:
    files: {posix path: text, or a function of no arguments returning it}; functions are
      called when the file is first read (so a session pays only for the traces it opens),
      and their text is kept.
    withheld: strings to replace by WITHHELD_MARK in every file.
  """

  def __init__(self, files, withheld=()):
    self.withheld = sorted({s for s in withheld if len(s) >= MIN_WITHHELD_CHARS},
                           key=len, reverse=True)
    self._sources = dict(files)
    self._texts = {}

  @property
  def paths(self):
    return sorted(self._sources)

  @property
  def files(self):
    """{path: text} of every file (renders them all)."""
    return {path: self.read(path) for path in self.paths}

  def scrub(self, text):
    """text with every withheld string replaced (also used on tool results)."""
    for secret in self.withheld:
      if secret in text:
        text = text.replace(secret, WITHHELD_MARK)
    return text

  @staticmethod
  def normalize(path):
    """A view path from what an agent typed ("/a/../b", "./x/" ...); ValueError if outside."""
    path = posixpath.normpath("/" + str(path or "").strip()).lstrip("/")
    return "" if path == "." else path

  def list(self, path=""):
    """Names directly under path (folders end with "/"), sorted; KeyError if none."""
    path = self.normalize(path)
    if path in self._sources:
      return [path]
    prefix = path + "/" if path else ""
    names = set()
    for name in self._sources:
      if name.startswith(prefix):
        head, _, rest = name[len(prefix):].partition("/")
        names.add(head + "/" if rest else head)
    if not names:
      raise KeyError(path)
    return sorted(names)

  def read(self, path):
    """The file's text; KeyError if there is none."""
    path = self.normalize(path)
    if path not in self._texts:
      source = self._sources[path]
      self._texts[path] = self.scrub(source() if callable(source) else source)
    return self._texts[path]

  def grep(self, pattern, path="", ignore_case=True, max_matches=MAX_GREP_MATCHES):
    """[(file, line number, line)] of lines containing pattern (a plain string) under path."""
    path = self.normalize(path)
    needle = pattern.lower() if ignore_case else pattern
    matches = []
    for name in self.paths:
      if path and name != path and not name.startswith(path + "/"):
        continue
      for number, line in enumerate(self.read(name).splitlines(), 1):
        if needle in (line.lower() if ignore_case else line):
          matches.append((name, number, line[:MAX_GREP_LINE_CHARS]))
          if len(matches) >= max_matches:
            return matches
    return matches

  def write_to(self, directory):
    """Writes the tree under directory (files read-only); returns directory."""
    for name in self.paths:
      text = self.read(name)
      target = os.path.join(directory, *name.split("/"))
      os.makedirs(os.path.dirname(target), exist_ok=True)
      with open(target, "w", encoding="utf-8") as file:
        file.write(text)
      os.chmod(target, 0o444)
    return directory


def _pareto(candidates):
  scored = [c for c in candidates if c.evaluated and c.success is not None]
  return [c for c in scored if not any(
      d.success >= c.success and d.mean_turns <= c.mean_turns and
      (d.success > c.success or d.mean_turns < c.mean_turns) for d in scored)]


def _row(candidate):
  success = "-" if candidate.success is None else f"{candidate.success:.3f}"
  turns = "-" if candidate.mean_turns is None else f"{candidate.mean_turns:.2f}"
  hypothesis = " ".join((candidate.hypothesis or "-").split())
  return (f"| {candidate.id} | {candidate.parent or '-'} | {candidate.iteration} | "
          f"{candidate.status} | {success} | {turns} | {candidate.mechanism or candidate.origin}"
          f" | {hypothesis} |")


_TABLE_HEAD = ("| id | parent | iteration | status | success | mean turns | mechanism | "
               "hypothesis |\n|---|---|---|---|---|---|---|---|")


def _candidate_md(candidate):
  lines = [f"# {candidate.id}", f"parent: {candidate.parent or '-'}",
           f"iteration: {candidate.iteration}", f"origin: {candidate.origin}",
           f"proposer: {candidate.proposer or '-'}", f"mechanism: {candidate.mechanism or '-'}",
           f"hypothesis: {candidate.hypothesis or '-'}", f"status: {candidate.status}",
           f"success: {candidate.success}", f"mean turns: {candidate.mean_turns}",
           f"outcomes: {json.dumps(candidate.outcomes, sort_keys=True)}",
           f"instruction hash: {candidate.instruction_hash or '-'}"]
  if candidate.duplicate_of:
    lines.append(f"duplicate of: {candidate.duplicate_of}")
  for reason in candidate.reasons:
    lines.append(f"reason [{reason['code']}]: {reason['message']}")
  if candidate.apply_report:
    lines.append(f"\n## apply report\n{candidate.apply_report}")
  if candidate.static_check:
    lines.append("\n## static-check failures\n" + "\n".join(
        json.dumps(failure, sort_keys=True) for failure in candidate.static_check))
  return "\n".join(lines) + "\n"


def _ledger(archive):
  lines = ["# Ledger: what was tried and why it lost", ""]
  for candidate in archive.candidates:
    if candidate.origin == "incoming":
      continue
    if candidate.status != "evaluated":
      why = "; ".join(f"[{r['code']}] {' '.join(r['message'].split())[:300]}"
                      for r in candidate.reasons) or candidate.status
      lines.append(f"- {candidate.id} (from {candidate.parent}, iteration "
                   f"{candidate.iteration}): {candidate.status}: {why}. Hypothesis: "
                   f"{candidate.hypothesis or '-'}")
      continue
    parent = archive.get(candidate.parent) if candidate.parent else None
    if parent is not None and parent.success is not None and candidate.success is not None and (
        candidate.success < parent.success or (candidate.success == parent.success and
                                               candidate.mean_turns >= parent.mean_turns)):
      lines.append(f"- {candidate.id} (from {parent.id}, iteration {candidate.iteration}): "
                   f"evaluated, did not beat its parent: success {candidate.success:.3f} vs "
                   f"{parent.success:.3f}, mean turns {candidate.mean_turns:.2f} vs "
                   f"{parent.mean_turns:.2f}. Hypothesis: {candidate.hypothesis or '-'}")
  if len(lines) == 2:
    lines.append("(nothing has lost yet)")
  return "\n".join(lines) + "\n"


README = """\
# The archive of this search (read-only)

task.md                           the task description
scores.md                         every candidate: parent, status, success, mean turns, hypothesis
frontier.md                       the Pareto front (success up, mean turns down)
ledger.md                         what was tried and why it lost
candidates/<id>/harness.py        a candidate's source
candidates/<id>/candidate.md      its parent, hypothesis, status, reasons, apply report
candidates/<id>/scores.jsonl      per task: task_id, score, outcome, num_turns
candidates/<id>/traces/<task>.txt every llm call, tool call, answer and error of one episode
tasks/<task>.json                 the public fields of a search task{answers_note}
The current harness (the one patches apply to) is {incumbent}.
"""


def build_view(archive, domain_name, description, instances, incumbent_id=None,
               search_answers="none", withheld=()):
  """The ArchiveView of archive (see the module docstring).

  Args:
    archive: the search's Archive.
    domain_name, description: the domain's name and task description.
    instances: the search split (the only tasks whose fields may appear).
    incumbent_id: the candidate patches apply to (named in README.md).
    search_answers: one of SEARCH_ANSWER_MODES.
    withheld: strings that must never appear (reference_strings of the held-out splits).
  """
  check_search_answers(search_answers)
  by_id = {instance.id: instance for instance in instances}
  files = {}
  note = {"none": "", "answers": " and its gold answers",
          "answers_and_documents": " and its whole reference (gold answers, documents)"}
  files["README.md"] = README.format(answers_note=note[search_answers],
                                     incumbent=incumbent_id or "-")
  files["task.md"] = f"# Task: {domain_name}\n\n{description.strip()}\n"
  rows = [_row(c) for c in archive.candidates]
  files["scores.md"] = "# Candidates\n\n" + _TABLE_HEAD + "\n" + "\n".join(rows) + "\n"
  front = sorted(_pareto(archive.candidates), key=lambda c: (-c.success, c.mean_turns))
  files["frontier.md"] = ("# Pareto front (success up, mean turns down)\n\n" + _TABLE_HEAD +
                          "\n" + "\n".join(_row(c) for c in front) + "\n")
  files["ledger.md"] = _ledger(archive)
  for candidate in archive.candidates:
    folder = f"candidates/{candidate.id}"
    source = archive.source(candidate.id)
    if source is not None:
      files[f"{folder}/harness.py"] = source
    files[f"{folder}/candidate.md"] = _candidate_md(candidate)
    examples = archive.examples(candidate.id)
    stray = [row["task_id"] for row in examples if row["task_id"] not in by_id]
    if stray:
      raise ValueError(f"Candidate {candidate.id} was scored on tasks {stray[:3]} that are not "
                       "in the instances given to build_view; pass the search split the "
                       "archive was evaluated on (never a held-out split).")
    if examples:
      files[f"{folder}/scores.jsonl"] = "".join(
          json.dumps({k: row[k] for k in ("task_id", "score", "outcome", "num_turns")}) + "\n"
          for row in examples)
    if examples:
      episodes = functools.lru_cache(maxsize=None)(
          lambda candidate_id=candidate.id: {t.task_id: t for t in
                                             archive.trajectories(candidate_id)})
      for row in examples:
        files[f"{folder}/traces/{_safe_name(row['task_id'])}.txt"] = functools.partial(
            _trace_text, episodes, row["task_id"], row["score"],
            shown_reference(by_id[row["task_id"]], search_answers))
  for instance in instances:
    record = {"id": instance.id, "task": dict(instance.public)}
    if search_answers != "none":
      record["reference"] = shown_reference(instance, search_answers)
    files[f"tasks/{_safe_name(instance.id)}.json"] = json.dumps(record, indent=2) + "\n"
  return ArchiveView(files, withheld)


def view_of_directory(archive_dir, domain_name, description, instances, **options):
  """build_view over the Archive at archive_dir."""
  return build_view(archive_lib.Archive(archive_dir), domain_name, description, instances,
                    **options)
