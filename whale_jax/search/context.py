"""What a proposer sees: instructions plus material from the archive, within a token budget.

  context = build_context(archive, incumbent_id, domain_name, description, iteration=3,
                          budget_tokens=16_000, tokenizer=None)
  context.messages        # [system: the versioned instructions, user: the archive material]
  context.num_tokens      # <= budget_tokens, always
  context.instruction_version, context.instruction_hash   # recorded with every candidate

The system message is INSTRUCTIONS (version INSTRUCTIONS_VERSION) filled with the allowed
imports, the line limit and, in prompt-only mode, the names of the prompt strings; its
sha256 (16 hex digits) is the instruction hash. The user message holds, in this order of
priority:
  1. the task description (the domain's),                                    always
  2. the incumbent's code with its scores,                                   always
  3. the scores of every evaluated candidate (best first, at most 30 rows),
  4. the apply reports of the most recent proposals (status, reasons, block report),
  5. failing episodes of the incumbent (score < 1), rendered compactly (or of the episodes
     passed in, e.g. a weight-update block's trajectories),
  6. the best other candidates as unified diffs against the incumbent,
  7. succeeding episodes of the incumbent,
then one closing line. Sections 1-2 and the instructions must fit (else ValueError naming the
budget needed); each later section is added while it fits and cut (marked "[... cut]") when it
does not, and dropped when fewer than MIN_SECTION_TOKENS remain. The assembled messages are
measured once more and trimmed from the last section until they fit.

Tokens are counted with the tokenizer when one is given (len(tokenizer.encode(text))), else
estimated as ceil(characters / 4); each message adds MESSAGE_OVERHEAD_TOKENS for its chat
template framing. Episodes are rendered from their trajectories: for each llm call, the
messages the harness added since the previous call (each cut to MAX_MESSAGE_CHARS, middle
elided) and the model's reply; then tool calls, the answer and any error. Reference answers
are shown only where the caller passes them (`references`: Harness Learning's execution
reports, whose search_answers setting gives the gold answers, or the whole reference with
supporting documents, of the search-split diagnostic tasks): one "[reference, ...]" line
under an episode's header, cut to MAX_REFERENCE_CHARS. Every string in `withheld` (e.g. the
held-out splits' gold answers) is replaced by archive_view.WITHHELD_MARK in sections 3-7, as in
the agentic proposer's archive view; sections 1-2 (the domain's description and the current
code, which patches must match) are left as they are.
"""
import dataclasses
import difflib
import hashlib
import json
import math
import textwrap

from whale_jax.harness import program
from whale_jax.harness import static_checks
from whale_jax.search import archive_view
from whale_jax.search import edit_scope as edit_scope_lib
from whale_jax.search import prompt_only as prompt_only_lib
from whale_jax.search import proposal as proposal_lib

INSTRUCTIONS_VERSION = "meta-harness-1"
INSTRUCTIONS = """\
You improve a harness: a Python program `run(task, llm, tools) -> str` that drives a fixed
language model on a task and returns its final answer. You see the task, the current harness,
the scores of earlier candidates, reports on recent proposals and episodes of the current
harness. Propose ONE new candidate that should score higher (mean score over the tasks), or
score the same with fewer model calls.

Rules:
- One mechanism per candidate (e.g. the prompt, how queries are written, retrieval
  parameters, how tool output is fed back, retries, voting, when to stop); say which in the
  hypothesis. Prefer changing how the harness works over only retuning a constant.
- No branches on particular questions, datasets or benchmarks and no hard-coded answers: the
  harness must work for any task of this kind.
- Never touch the verifier: scores are computed outside the harness from references the
  harness cannot see; do not try to read or guess them.
- Keep the signature `def run(task, llm, tools):`, at most {max_lines} lines, and import only
  these modules:
{allowed_imports}
- llm.chat(messages, **sampling) and llm.generate(prompt, **sampling) return text (a list of
  texts when n > 1); sampling keywords: max_tokens, temperature, top_p, top_k, n, stop, seed.
{mode_rule}
{reply_format}
"""
FULL_MODE_RULE = "- You may change any part of the program."
PROMPT_ONLY_RULE = ("- Prompt-only mode: change only the text of the prompt strings "
                    "({names}); every other line must stay exactly as it is.")
GUIDANCE_RULE = ("- Skills and execution guidance only: change only the values of the "
                 "module-level constants ({names}) to other literal values (instructions, "
                 "skills as text, turn and length budgets); keep every function, import and "
                 "statement, and add or remove no constant.")
MESSAGE_OVERHEAD_TOKENS = 8
CHARS_PER_TOKEN = 4
MIN_SECTION_TOKENS = 48
MAX_MESSAGE_CHARS = 600
MAX_EPISODE_CHARS = 4000
MAX_REFERENCE_CHARS = 1200
MAX_SCORE_ROWS = 30
CUT_MARK = "\n[... cut]"


def count_tokens(text, tokenizer=None):
  """Tokens in text: exact with a tokenizer, else ceil(len(text) / CHARS_PER_TOKEN)."""
  if tokenizer is not None:
    return len(tokenizer.encode(text))
  return math.ceil(len(text) / CHARS_PER_TOKEN)


def count_message_tokens(messages, tokenizer=None):
  return sum(count_tokens(m["content"], tokenizer) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def instructions(allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
                 max_lines=static_checks.DEFAULT_MAX_LINES, prompt_names=None,
                 constant_names=None):
  """The system message: INSTRUCTIONS filled in (prompt_names set means prompt-only mode,
  constant_names the "guidance" edit scope)."""
  mode_rule = FULL_MODE_RULE
  if prompt_names is not None:
    mode_rule = PROMPT_ONLY_RULE.format(names=", ".join(prompt_names) or "none")
  elif constant_names is not None:
    mode_rule = GUIDANCE_RULE.format(names=", ".join(constant_names) or "none")
  allowed = textwrap.fill(", ".join(allowed_imports) + ".", width=92, initial_indent="  ",
                          subsequent_indent="  ")
  return INSTRUCTIONS.format(max_lines=max_lines, allowed_imports=allowed,
                             mode_rule=mode_rule, reply_format=proposal_lib.REPLY_FORMAT)


def instruction_hash(text):
  return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class ProposerContext:
  """Everything a proposer gets for one iteration.

  Attributes:
    domain_name: e.g. "synthetic_qa" (the edit library picks its catalogue by it).
    incumbent: the Harness proposals are applied to.
    incumbent_id: its archive id.
    iteration: the search iteration being proposed for.
    messages: [system, user] chat messages for a model proposer.
    num_tokens, budget_tokens: the messages' size and the most they may have.
    instruction_version, instruction_hash: identify the system message.
    known_hashes: content hashes already in the archive (proposing them again is wasted).
    recent_mechanisms: mechanisms of recent candidates, oldest first.
    session: names the search this iteration belongs to (a recipe runs one search per harness
      phase, e.g. "cycle_002"); proposers fold it into their seeds, so a later search that
      starts from the same harness draws afresh instead of repeating an earlier one.
    prompt_only: whether only prompt strings may change.
    edit_scope: what a candidate may change (search/edit_scope.SCOPES).
    allowed_imports, max_lines: the static-check limits candidates must meet.
  """
  domain_name: str
  incumbent: program.Harness
  incumbent_id: str
  iteration: int
  messages: tuple
  num_tokens: int
  budget_tokens: int
  instruction_version: str
  instruction_hash: str
  known_hashes: frozenset = frozenset()
  recent_mechanisms: tuple = ()
  session: str = ""
  prompt_only: bool = False
  edit_scope: str = "any"
  allowed_imports: tuple = static_checks.DEFAULT_ALLOWED_IMPORTS
  max_lines: int = static_checks.DEFAULT_MAX_LINES

  @property
  def text(self):
    """The user message: the archive material."""
    return self.messages[-1]["content"]

  @property
  def call_site(self):
    """What a model proposer's call seeds fold in: (iteration,), or (iteration, session)
    when the session is named."""
    return (self.iteration, self.session) if self.session else (self.iteration,)


# ---- Rendering --------------------------------------------------------------------------


def _elide(text, max_chars):
  text = str(text)
  if len(text) <= max_chars:
    return text
  half = max(max_chars // 2 - 10, 1)
  return f"{text[:half]} [... {len(text) - 2 * half} characters ...] {text[-half:]}"


def render_episode(trajectory, score, max_chars=MAX_EPISODE_CHARS, reference=None):
  """One episode as compact text (at most about max_chars characters), with the task's
  reference under the header when one is given (never shown to the harness itself)."""
  lines = [f"### task {trajectory.task_id}: score {score:g}, outcome {trajectory.outcome}, "
           f"{trajectory.num_turns} llm call(s)"]
  if reference is not None:
    text = json.dumps(reference, sort_keys=True, default=str)
    lines.append(f"[reference, not visible to the harness] {_elide(text, MAX_REFERENCE_CHARS)}")
  shown = 0
  for index, call in enumerate(trajectory.calls):
    if call.method == "chat" and isinstance(call.messages, list):
      new_messages = call.messages[shown:] if len(call.messages) >= shown else call.messages
      shown = len(call.messages) + 1   # the reply is usually appended next
      for message in new_messages:
        if message.get("role") == "assistant":
          continue
        lines.append(f"[{message.get('role')}] {_elide(message.get('content'), MAX_MESSAGE_CHARS)}")
    elif call.prompt is not None:
      lines.append(f"[prompt] {_elide(call.prompt, MAX_MESSAGE_CHARS)}")
    for completion in call.completions[:2]:
      lines.append(f"[model, call {index + 1}] {_elide(completion.text, MAX_MESSAGE_CHARS)}")
  for event in trajectory.tool_events:
    arguments = ", ".join(f"{k}={_elide(repr(v), 80)}" for k, v in event.arguments.items())
    outcome = f"error: {event.error}" if event.error else _elide(repr(event.result), 160)
    lines.append(f"[tool] {event.name}({arguments}) -> {_elide(outcome, 200)}")
  if trajectory.answer is not None:
    lines.append(f"[answer] {_elide(trajectory.answer, 300)}")
  if trajectory.error:
    lines.append(f"[error] {_elide(trajectory.error, 600)}")
  return _elide("\n".join(lines), max_chars)


def _scored(candidate):
  """Evaluated with a score (single-proposal archives hold runnable, unscored candidates)."""
  return candidate.evaluated and candidate.success is not None


def _score_table(candidates, incumbent_id):
  evaluated = sorted((c for c in candidates if _scored(c)),
                     key=lambda c: (-c.success, c.mean_turns, int(c.id[1:])))
  rows = ["id | parent | success | mean turns | mechanism | hypothesis"]
  for c in evaluated[:MAX_SCORE_ROWS]:
    marker = " (current)" if c.id == incumbent_id else ""
    rows.append(f"{c.id}{marker} | {c.parent or '-'} | {c.success:.3f} | {c.mean_turns:.2f} | "
                f"{c.mechanism or '-'} | {_elide(c.hypothesis or '-', 160)}")
  if len(evaluated) > MAX_SCORE_ROWS:
    rows.append(f"... and {len(evaluated) - MAX_SCORE_ROWS} more")
  return "## Scores of evaluated candidates (best first)\n" + "\n".join(rows)


def _recent_reports(candidates, count):
  recent = [c for c in candidates if c.origin != "incoming"][-count:]
  if not recent:
    return ""
  parts = ["## Recent proposals and what happened to them"]
  for c in recent:
    line = f"- {c.id} (iteration {c.iteration}, {c.mechanism or c.origin}): {c.status}"
    if _scored(c):
      line += f", success {c.success:.3f}, mean turns {c.mean_turns:.2f}"
    if c.duplicate_of:
      line += f" (same program as {c.duplicate_of})"
    parts.append(line)
    for reason in c.reasons:
      parts.append(f"    [{reason['code']}] {_elide(reason['message'], 400)}")
    if c.apply_report and c.status == "rejected":
      parts.append("    " + _elide(c.apply_report, 400).replace("\n", "\n    "))
  return "\n".join(parts)


def _diff(old, new, name):
  lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                               "current/harness.py", f"{name}/harness.py", n=2)
  return "".join(lines)


def _archived_episodes(archive, candidate_id):
  """[(Trajectory, score)] of an archived candidate, in task order."""
  by_task = {t.task_id: t for t in archive.trajectories(candidate_id)}
  return [(by_task[row["task_id"]], row["score"]) for row in archive.examples(candidate_id)
          if row["task_id"] in by_task]


def _episodes(episodes, failing, count, iteration, title, references):
  picked = [(t, score) for t, score in episodes if (score < 1.0) == failing]
  if not picked or count <= 0:
    return ""
  start = (iteration * count) % len(picked)     # show different episodes each iteration
  picked = (picked[start:] + picked[:start])[:count]
  return f"## {title}\n" + "\n\n".join(
      render_episode(t, score, reference=references.get(t.task_id)) for t, score in picked)


# ---- Fitting ------------------------------------------------------------------------------


def _cut_to_tokens(text, allowance, tokenizer):
  """The longest prefix of text (plus CUT_MARK) within allowance tokens; "" if none."""
  if count_tokens(text, tokenizer) <= allowance:
    return text
  low, high = 0, len(text)
  while low < high:
    middle = (low + high + 1) // 2
    if count_tokens(text[:middle] + CUT_MARK, tokenizer) <= allowance:
      low = middle
    else:
      high = middle - 1
  return text[:low] + CUT_MARK if low else ""


def build_context(archive, incumbent_id, domain_name, description, iteration, budget_tokens,
                  tokenizer=None, prompt_only=False,
                  allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
                  max_lines=static_checks.DEFAULT_MAX_LINES, num_failing=5, num_succeeding=2,
                  num_best=3, num_recent=6, episodes=None, session="", references=None,
                  withheld=(), edit_scope="any"):
  """The ProposerContext for one iteration (see the module docstring).

  Args:
    archive: the Archive; incumbent_id names the candidate proposals will be applied to.
    session: the search's name (ProposerContext.session).
    episodes: [(Trajectory, score)] to show instead of the incumbent's archived episodes
      (e.g. the trajectories of a weight-update block, for a VACE-style proposal).
    references: {task id: what of its reference to show} (archive_view.shown_reference of
      search-split tasks only); an episode whose task is absent shows none.
    withheld: strings never to show in sections 3-7 (e.g. the held-out splits' gold answers;
      archive_view.MIN_WITHHELD_CHARS applies).
  """
  incumbent_record = archive.get(incumbent_id)
  incumbent_source = archive.source(incumbent_id)
  incumbent = program.Harness(incumbent_source, parent=None, origin=incumbent_record.origin)
  names = prompt_only_lib.prompt_names(incumbent_source) if prompt_only else None
  constants = (edit_scope_lib.constant_names(incumbent_source) if edit_scope == "guidance"
               else None)
  system = instructions(allowed_imports, max_lines, names, constants)
  scores = (f"success {incumbent_record.success:.3f}, mean turns "
            f"{incumbent_record.mean_turns:.2f}" if incumbent_record.success is not None
            else "not scored")
  required = [f"## Task\n{description.strip()}",
              f"## Current harness ({incumbent_id}: {scores})\n```python\n"
              f"{incumbent_source.rstrip()}\n```"]
  closing = "Propose one new candidate now, in the reply format."
  candidates = archive.candidates
  if episodes is None:
    episodes = _archived_episodes(archive, incumbent_id)
  best_others = sorted((c for c in candidates if _scored(c) and c.id != incumbent_id and
                        c.hash != incumbent.hash),
                       key=lambda c: (-c.success, c.mean_turns, int(c.id[1:])))[:num_best]
  diffs = [f"### {c.id}: success {c.success:.3f}, mean turns {c.mean_turns:.2f}\n```diff\n"
           f"{_diff(incumbent_source, archive.source(c.id) or '', c.id)}```"
           for c in best_others]
  optional = [
      _score_table(candidates, incumbent_id),
      _recent_reports(candidates, num_recent),
      _episodes(episodes, True, num_failing, iteration,
                "Failing episodes of the current harness", references or {}),
      "## Best other candidates, as diffs against the current harness\n" + "\n\n".join(diffs)
      if diffs else "",
      _episodes(episodes, False, num_succeeding, iteration,
                "Succeeding episodes of the current harness", references or {}),
  ]
  scrubber = archive_view.ArchiveView({}, withheld)
  optional = [scrubber.scrub(part) for part in optional]
  separator_tokens = count_tokens("\n\n", tokenizer)
  fixed = (count_tokens(system, tokenizer) + 2 * MESSAGE_OVERHEAD_TOKENS +
           sum(count_tokens(part, tokenizer) + separator_tokens for part in required) +
           count_tokens(closing, tokenizer))
  if fixed > budget_tokens:
    raise ValueError(f"The proposer context budget of {budget_tokens} tokens cannot hold the "
                     f"instructions, the task description and the current harness ({fixed} "
                     f"tokens); raise context_budget_tokens to at least {fixed + 1000}.")
  remaining = budget_tokens - fixed
  sections = []
  for part in optional:
    if not part or remaining - separator_tokens < MIN_SECTION_TOKENS:
      continue
    part = _cut_to_tokens(part, remaining - separator_tokens, tokenizer)
    if part:
      sections.append(part)
      remaining -= count_tokens(part, tokenizer) + separator_tokens

  def assemble():
    user = "\n\n".join(required + sections + [closing])
    return ({"role": "system", "content": system}, {"role": "user", "content": user})

  messages = assemble()
  while count_message_tokens(messages, tokenizer) > budget_tokens:
    if not sections:
      raise AssertionError("the required context parts were measured to fit")
    excess = count_message_tokens(messages, tokenizer) - budget_tokens
    last = sections.pop()
    shorter = _cut_to_tokens(last, count_tokens(last, tokenizer) - excess - 1, tokenizer)
    if shorter and len(shorter) < len(last):
      sections.append(shorter)
    messages = assemble()
  recent = [c.mechanism for c in candidates if c.origin != "incoming" and c.mechanism]
  return ProposerContext(
      domain_name=domain_name, incumbent=incumbent, incumbent_id=incumbent_id,
      iteration=iteration, messages=messages,
      num_tokens=count_message_tokens(messages, tokenizer), budget_tokens=budget_tokens,
      instruction_version=INSTRUCTIONS_VERSION, instruction_hash=instruction_hash(system),
      known_hashes=archive.known_hashes(), recent_mechanisms=tuple(recent[-num_recent:]),
      session=session, prompt_only=prompt_only, edit_scope=edit_scope,
      allowed_imports=tuple(allowed_imports),
      max_lines=max_lines)
