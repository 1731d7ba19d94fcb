"""The tools of the agentic proposer: browse the archive view, check and run drafts, submit.

  tools = AgentTools(view, incumbent_id, incumbent_source, runner, task_ids, budgets)
  result = tools.call("grep", {"pattern": "Traceback"})    # ToolResult(content, ok)
  tools.schemas()                                          # OpenAI-style function schemas
  tools.submission                                         # set by a successful submit

Tools (arguments; every result is text):
  list(path="")                 names under a folder of the view ("/" ends a folder)
  read(path, offset=0, limit)   a file of the view (or a draft: drafts/<n>.py), from offset
  grep(pattern, path="")        lines holding the plain string pattern (case-insensitive)
  diff(a, b)                    unified diff of two files (view paths or drafts/<n>.py; b
                                defaults to the latest draft, a to the current harness)
  check(patch | program)        what the search would do with it: the patch applied to the
                                current harness (per-block report), static checks, duplicate
                                check; the result is kept as drafts/<n>.py
  run(patch | program, num_tasks, task_ids)   the draft run in the sandboxed runtime on a few
                                search tasks: scores and full traces (costs rollouts)
  submit(patch | program, hypothesis)   the final answer; refused (with the reasons) when the
                                search would reject it, so the agent can fix it and submit again

tools.run_draft(program=...) is `run` as data (a DraftRun: report, scores, per-task traces),
which the CLI agent's in-jail `run` command calls (whale_jax.search.jail_run).

Budgets (AgentBudgets): runs and episodes per session, characters per result. Everything the
agent read is in `reads`; every call in `events`. Results pass through view.scrub, so a
withheld string never reaches the agent even if a run's trace should hold one.
"""
import dataclasses
import difflib
import json

from whale_jax.harness import program as program_lib
from whale_jax.harness import static_checks
from whale_jax.search import archive_view
from whale_jax.search import candidate_check
from whale_jax.search import proposal as proposal_lib


@dataclasses.dataclass(frozen=True)
class AgentBudgets:
  """Limits of one proposal session.

  Attributes:
    max_steps: model calls.
    max_tokens: prompt plus completion tokens over all model calls.
    max_runs: `run` calls; max_run_tasks: tasks per run; max_run_episodes: episodes in all.
    max_result_chars: longest tool result (longer ones are cut, with a note saying how to
      read on).
  """
  max_steps: int = 24
  max_tokens: int = 400_000
  max_runs: int = 3
  max_run_tasks: int = 4
  max_run_episodes: int = 8
  max_result_chars: int = 12_000

  def __post_init__(self):
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if not isinstance(value, int) or isinstance(value, bool) or value < (
          0 if field.name.startswith("max_run") else 1):
        raise ValueError(f"AgentBudgets.{field.name}={value!r} must be an int >= "
                         f"{0 if field.name.startswith('max_run') else 1}.")

  def to_json(self):
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ToolResult:
  """A tool's answer; kind names a refusal ("" when ok): bad_arguments, unknown_tool,
  empty_submission, refused."""
  content: str
  ok: bool = True
  kind: str = ""


@dataclasses.dataclass(frozen=True)
class DraftRun:
  """What `run` did with one draft (AgentTools.run_draft).

  Attributes:
    report: the checks' report (apply report, refusals); ok: the draft ran.
    task_ids, scores, outcomes, num_turns: per task run.
    traces: each episode in full (archive_view.render_trace), scrubbed.
    success_rate, mean_turns: over the tasks run.
    rollouts, generated_tokens: what it cost (counted in AgentTools.rollouts, ...).
  """
  report: str
  ok: bool
  task_ids: tuple = ()
  scores: tuple = ()
  outcomes: tuple = ()
  num_turns: tuple = ()
  traces: tuple = ()
  success_rate: float = 0.0
  mean_turns: float = 0.0
  rollouts: int = 0
  generated_tokens: int = 0

  @property
  def headline(self):
    return (f"ran on {len(self.task_ids)} task(s): mean score {self.success_rate:.3f}, "
            f"mean turns {self.mean_turns:.2f}")


class EmptySubmission(ValueError):
  """check, run or submit without a patch or a program."""


def _string(name, value):
  if not isinstance(value, str):
    raise ValueError(f"argument {name!r} must be a string; got "
                     f"{type(value).__name__}.")
  return value


SCHEMAS = {
    "list": ("List the files and folders under a folder of the archive view.",
             {"path": {"type": "string", "description": "folder, e.g. candidates/c0002; "
                       "empty for the top"}}, []),
    "read": ("Read a file of the archive view, or a draft (drafts/<n>.py).",
             {"path": {"type": "string"},
              "offset": {"type": "integer", "description": "first character to return"},
              "limit": {"type": "integer", "description": "most characters to return"}},
             ["path"]),
    "grep": ("Find the lines holding a plain string (case-insensitive) in every file under a "
             "folder (all files when path is empty).",
             {"pattern": {"type": "string"}, "path": {"type": "string"}}, ["pattern"]),
    "diff": ("Unified diff between two files (view paths or drafts/<n>.py). a defaults to the "
             "current harness, b to the latest draft.",
             {"a": {"type": "string"}, "b": {"type": "string"}}, []),
    "check": ("Apply a patch (SEARCH/REPLACE blocks against the current harness) or take a "
              "whole program, and run the search's checks on it without running it.",
              {"patch": {"type": "string"}, "program": {"type": "string"}}, []),
    "run": ("Run a draft (patch or program) in the sandbox on a few search tasks and return "
            "its scores and full traces. Costs rollouts; budgeted.",
            {"patch": {"type": "string"}, "program": {"type": "string"},
             "num_tasks": {"type": "integer"},
             "task_ids": {"type": "array", "items": {"type": "string"}}}, []),
    "submit": ("Submit the new candidate: a patch or a whole program, with a one-sentence "
               "hypothesis (what fails now, the mechanism you change, why it helps). Ends the "
               "session when the search's checks pass; otherwise says why.",
               {"patch": {"type": "string"}, "program": {"type": "string"},
                "hypothesis": {"type": "string"}}, ["hypothesis"]),
}
TOOL_NAMES = tuple(SCHEMAS)


def schemas(names=TOOL_NAMES):
  """OpenAI-style function schemas of the named tools."""
  return [{"type": "function", "function": {
      "name": name, "description": SCHEMAS[name][0],
      "parameters": {"type": "object", "properties": SCHEMAS[name][1],
                     "required": SCHEMAS[name][2]}}} for name in names]


class AgentTools:
  """One session's tools (see the module docstring).

  Args:
    view: the ArchiveView.
    incumbent_id, incumbent_source: the current harness (patches apply to it).
    runner: (harness, task_ids) -> Evaluation, the sandboxed runtime on search tasks; None
      leaves `run` out.
    task_ids: the search tasks `run` may use, in order.
    budgets: AgentBudgets.
    allowed_imports, max_lines, prompt_only_reference: the search's candidate checks.
    known_hashes: sources already archived (submitting one again is refused).
    search_answers: what of the search tasks' references run results show.
    references: task id -> the reference shown under search_answers.
  """

  def __init__(self, view, incumbent_id, incumbent_source, runner=None, task_ids=(),
               budgets=AgentBudgets(), allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
               max_lines=static_checks.DEFAULT_MAX_LINES, prompt_only_reference=None,
               known_hashes=frozenset(), references=None):
    self.view, self.incumbent_id, self.incumbent_source = view, incumbent_id, incumbent_source
    self.runner, self.task_ids, self.budgets = runner, list(task_ids), budgets
    self.allowed_imports, self.max_lines = tuple(allowed_imports), max_lines
    self.prompt_only_reference, self.known_hashes = prompt_only_reference, known_hashes
    self.references = dict(references or {})
    self.names = TOOL_NAMES if runner is not None else tuple(
        n for n in TOOL_NAMES if n != "run")
    self.drafts = []          # sources, drafts/<n>.py is drafts[n - 1]
    self.reads, self.events, self.runs = [], [], []
    self.rollouts = self.generated_tokens = self.run_episodes = 0
    self.submission = None    # Proposal once submitted

  def schemas(self):
    return schemas(self.names)

  @property
  def current_path(self):
    return f"candidates/{self.incumbent_id}/harness.py"

  def call(self, name, arguments):
    """Runs one tool; never raises for the agent's mistakes (they come back as errors)."""
    event = {"tool": name, "arguments": {k: (v if not isinstance(v, str) or len(v) <= 400
                                             else v[:400] + "...") for k, v in arguments.items()}}
    if name not in self.names:
      result = ToolResult(f"Unknown tool {name!r}; the tools are: {', '.join(self.names)}.",
                          False, "unknown_tool")
    else:
      method = getattr(self, f"_tool_{name}")
      allowed = set(SCHEMAS[name][1])
      unknown = sorted(set(arguments) - allowed)
      missing = [a for a in SCHEMAS[name][2] if a not in arguments]
      if unknown or missing:
        result = ToolResult(f"{name}: unknown arguments {unknown} / missing {missing}; it takes "
                            f"{sorted(allowed)} (required: {SCHEMAS[name][2]}).", False,
                            "bad_arguments")
      else:
        try:
          result = method(**arguments)
        except EmptySubmission as error:
          result = ToolResult(f"{name}: {error}", False, "empty_submission")
        except ValueError as error:
          result = ToolResult(f"{name}: {error}", False, "bad_arguments")
    content = self.view.scrub(result.content)
    limit = self.budgets.max_result_chars
    if len(content) > limit:
      content = (content[:limit] + f"\n[... cut at {limit} of {len(content)} characters; read "
                 "files with offset to see more]")
    kind = result.kind or ("" if result.ok else "refused")
    event.update(ok=result.ok, kind=kind, result_chars=len(content))
    self.events.append(event)
    return ToolResult(content, result.ok, kind)

  # ---- the archive view ---------------------------------------------------------------

  def _file(self, path):
    path = self.view.normalize(path)
    if path.startswith("drafts/"):
      try:
        number = int(path[len("drafts/"):].removesuffix(".py"))
        return path, self.drafts[number - 1]
      except (ValueError, IndexError):
        raise ValueError(f"there is no draft {path}; drafts so far: "
                         f"{[f'drafts/{i + 1}.py' for i in range(len(self.drafts))]}.") from None
    try:
      return path, self.view.read(path)
    except KeyError:
      raise ValueError(f"no file {path!r} in the archive view; `list` a folder to see its "
                       "files.") from None

  def _tool_list(self, path=""):
    path = _string("path", path)
    if self.view.normalize(path) == "drafts":
      names = [f"{i + 1}.py" for i in range(len(self.drafts))]
    else:
      try:
        names = self.view.list(path)
      except KeyError:
        raise ValueError(f"no folder {path!r} in the archive view; the top holds "
                         f"{self.view.list('')}.") from None
      if not self.view.normalize(path) and self.drafts:
        names = sorted(names + ["drafts/"])
    self.reads.append({"tool": "list", "path": self.view.normalize(path)})
    return ToolResult("\n".join(names) or "(empty)")

  def _tool_read(self, path, offset=0, limit=None):
    path, text = self._file(_string("path", path))
    if not isinstance(offset, int) or offset < 0:
      raise ValueError(f"offset={offset!r} must be an int >= 0.")
    limit = self.budgets.max_result_chars if limit is None else limit
    if not isinstance(limit, int) or limit < 1:
      raise ValueError(f"limit={limit!r} must be an int >= 1.")
    self.reads.append({"tool": "read", "path": path, "offset": offset})
    chunk = text[offset:offset + limit]
    if offset + limit < len(text):
      chunk += f"\n[... {len(text) - offset - limit} more characters: read with offset=" \
               f"{offset + limit}]"
    return ToolResult(chunk)

  def _tool_grep(self, pattern, path=""):
    pattern, path = _string("pattern", pattern), _string("path", path)
    if not pattern:
      raise ValueError("pattern must not be empty.")
    matches = self.view.grep(pattern, path)
    self.reads.append({"tool": "grep", "pattern": pattern, "path": self.view.normalize(path),
                       "files": sorted({m[0] for m in matches})})
    if not matches:
      return ToolResult(f"no line holds {pattern!r}.")
    return ToolResult("\n".join(f"{name}:{number}: {line}" for name, number, line in matches))

  def _tool_diff(self, a=None, b=None):
    a = self.current_path if a is None else _string("a", a)
    if b is None:
      if not self.drafts:
        raise ValueError("there is no draft yet: give b, or check/run a draft first.")
      b = f"drafts/{len(self.drafts)}.py"
    a, text_a = self._file(a)
    b, text_b = self._file(_string("b", b))
    self.reads.append({"tool": "diff", "a": a, "b": b})
    diff = "".join(difflib.unified_diff(text_a.splitlines(keepends=True),
                                        text_b.splitlines(keepends=True), a, b))
    return ToolResult(diff or "the files are identical.")

  # ---- drafts ------------------------------------------------------------------------

  def _proposal(self, patch, program_text, hypothesis=""):
    if patch is None and program_text is None:
      raise EmptySubmission("give a patch (SEARCH/REPLACE blocks against the current harness) "
                            "or a program (the whole new harness); this call had neither.")
    if patch is not None and program_text is not None:
      raise ValueError("give exactly one of patch (SEARCH/REPLACE blocks against the current "
                       "harness) and program (the whole new harness).")
    text = _string("patch" if patch is not None else "program",
                   patch if patch is not None else program_text)
    if not text.strip():
      raise EmptySubmission("the submission is empty: give the SEARCH/REPLACE blocks or the "
                       "program.")
    return proposal_lib.Proposal(kind="patch" if patch is not None else "program", text=text,
                                 hypothesis=hypothesis)

  def _prepare(self, proposal):
    prepared = candidate_check.prepare_candidate(
        proposal, self.incumbent_source, self.allowed_imports, self.max_lines,
        prompt_only_reference=self.prompt_only_reference)
    lines = [f"apply report: {prepared.apply_report or '-'}"]
    if prepared.source is not None:
      self.drafts.append(prepared.source)
      lines.append(f"the result is drafts/{len(self.drafts)}.py "
                   f"({len(prepared.source.splitlines())} lines)")
    for reason in prepared.reasons:
      lines.append(f"REFUSED [{reason['code']}]: {reason['message']}")
    duplicate = (prepared.source is not None and
                 program_lib.content_hash(prepared.source) in self.known_hashes)
    if duplicate:
      lines.append("REFUSED [duplicate]: this program is already in the archive; the search "
                   "would not evaluate it again.")
    if prepared.ok and not duplicate:
      lines.append("passes the search's checks.")
    return prepared, prepared.ok and not duplicate, "\n".join(lines)

  def _tool_check(self, patch=None, program=None):
    _, ok, report = self._prepare(self._proposal(patch, program))
    return ToolResult(report, ok)

  def run_draft(self, patch=None, program=None, num_tasks=None, task_ids=None):
    """`run` as data (also the CLI agent's in-jail `run`, whale_jax.search.jail_run): the
    draft checked, then run on the chosen search tasks; returns a DraftRun (its texts scrubbed
    of withheld strings). Raises ValueError (EmptySubmission) for a request it refuses; a
    refused request spends no budget."""
    budgets = self.budgets
    if len(self.runs) >= budgets.max_runs:
      raise ValueError(f"the run budget is spent ({budgets.max_runs} run(s) this session); no "
                       "more runs: finish with what the traces so far show.")
    if task_ids is not None:
      if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
        raise ValueError("task_ids must be a list of task id strings.")
      unknown = [t for t in task_ids if t not in self.task_ids]
      if unknown:
        raise ValueError(f"task_ids {unknown[:5]} are not search tasks; `list tasks` shows "
                         "them.")
      chosen = list(dict.fromkeys(task_ids))
    else:
      count = budgets.max_run_tasks if num_tasks is None else num_tasks
      if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"num_tasks={num_tasks!r} must be an int >= 1.")
      chosen = self.task_ids[:count]
    left = budgets.max_run_episodes - self.run_episodes
    chosen = chosen[:min(budgets.max_run_tasks, left)]
    if not chosen:
      raise ValueError(f"the episode budget is spent ({budgets.max_run_episodes} episodes "
                       "this session).")
    prepared, _, report = self._prepare(self._proposal(patch, program))
    if prepared.source is None or prepared.reasons:
      return DraftRun(self.view.scrub(report + "\nnot run: fix what is refused first."),
                      False)
    harness = program_lib.Harness(prepared.source, origin=prepared.origin)
    evaluation = self.runner(harness, chosen)
    self.rollouts += evaluation.rollouts
    self.generated_tokens += evaluation.generated_tokens
    self.run_episodes += len(chosen)
    self.runs.append({"draft": len(self.drafts), "task_ids": list(evaluation.task_ids),
                      "scores": list(evaluation.scores), "rollouts": evaluation.rollouts,
                      "generated_tokens": evaluation.generated_tokens})
    traces = tuple(self.view.scrub(archive_view.render_trace(
        trajectory, score, self.references.get(task_id)))
        for task_id, score, trajectory in zip(evaluation.task_ids, evaluation.scores,
                                              evaluation.trajectories))
    return DraftRun(self.view.scrub(report), True, tuple(evaluation.task_ids),
                    tuple(evaluation.scores),
                    tuple(t.outcome for t in evaluation.trajectories),
                    tuple(t.num_turns for t in evaluation.trajectories), traces,
                    evaluation.success_rate, evaluation.mean_turns, evaluation.rollouts,
                    evaluation.generated_tokens)

  def _tool_run(self, patch=None, program=None, num_tasks=None, task_ids=None):
    result = self.run_draft(patch, program, num_tasks, task_ids)
    if not result.ok:
      return ToolResult(result.report, False)
    return ToolResult("\n".join([result.report, result.headline] + list(result.traces)))

  def _tool_submit(self, hypothesis, patch=None, program=None):
    hypothesis = " ".join(_string("hypothesis", hypothesis).split())
    if not hypothesis:
      raise ValueError("hypothesis must say what fails now, the mechanism you change and why "
                       "it helps.")
    proposal = self._proposal(patch, program, hypothesis[:proposal_lib.MAX_HYPOTHESIS_CHARS])
    _, ok, report = self._prepare(proposal)
    if not ok:
      return ToolResult(report + "\nnot submitted: fix it and submit again.", False)
    self.submission = proposal
    return ToolResult(report + "\nsubmitted.")

  def summary(self):
    """What the session did with its tools (saved with the conversation)."""
    return {"events": self.events, "reads": self.reads, "runs": self.runs,
            "rollouts": self.rollouts, "generated_tokens": self.generated_tokens,
            "files_read": sorted({r["path"] for r in self.reads if r["tool"] == "read"}),
            "num_drafts": len(self.drafts)}


def render_result(result):
  """A tool result as the text of a tool message."""
  return result.content if result.ok else f"ERROR: {result.content}"


def arguments_json(arguments):
  return json.dumps(arguments, sort_keys=True)
