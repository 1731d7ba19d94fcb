"""One revision step of Harness Learning: the proposer's context, replies judged, their reward.

  context, archive, report = revision_context(archive_dir, domain, current_source, diagnostic,
                                              evaluate, seed, iteration, budget_tokens,
                                              tokenizer, kind="patch")
  revisions, rollouts = judge_replies(replies, "patch", current_source, domain, scoring,
                                      evaluate, seed, archive)
  revisions[i].parsed, .applied, .completed_fraction, .score, .reward, .source

A revision (SPEC 3.1): the current harness runs on diagnostic tasks, whose episodes are the
execution report (wrong answers, errors, model calls, tool calls with their results, and,
with search_answers, the gold answers or whole references of the diagnostic tasks outside
the held-out splits: SPEC 3.4's reports with gold answers and supporting documents; the
held-out splits' gold answers are withheld). The proposer's context is
whale_jax.search.context.build_context over an archive that holds only the current harness
(c0000, scored on the diagnostic tasks) — the task description, the current code with its
score, failing and succeeding episodes — under this module's system message (INSTRUCTIONS,
asking for one reply format: SEARCH/REPLACE blocks or a whole program). Each reply is applied
to the current harness and checked (whale_jax.search.candidate_check); one that may run is
evaluated on the scoring tasks with the sample keys of (seed, task id), the same for every
reply of the context (common random numbers); identical programs are evaluated once. Every
judged reply is added to the archive (c0001, ...), so the directory is the record of the
revision.

On a multi-host run (hosts: a rollouts.sharding.HostGroup, from the evaluate function's
runtime) the episodes are split over the hosts by the collector; host 0 writes the archive
and every host writes the trace shard of the episodes it ran (archive.Archive); the hosts
meet at a barrier before a context is read from the shards, so each builds the same context.

Each judged reply gets its reward from whale_jax.search.reward (SPEC 3.3: the score plus an
executability bonus). A reply is `runnable` when it ran and completed (completed_fraction >=
min_completed_fraction).

What a revision feeds (SPEC 3.3-3.4):
  select(rule, revisions, current_score)   the version a test-time round carries forward:
      "strict" keeps its one candidate only on strict improvement, "best_of" the
      highest-scoring runnable candidate even when worse (None: keep the current harness).
  teacher_demonstrations(...)   teacher proposals judged; those that raised the score become
      (context messages -> reply) rows (algorithms/samples.py makes the training samples of
      rows and of sampled replies; search/ does not import train/).
  prompt_ids(tokenizer, messages)   the proposer's prompt for a context.
"""
import ast
import dataclasses
import re
import shutil
import textwrap

from absl import logging

from whale_jax.harness import patches
from whale_jax.harness import program
from whale_jax.harness import static_checks
from whale_jax.rollouts import collector
from whale_jax.rollouts import sharding
from whale_jax.search import archive as archive_lib
from whale_jax.search import archive_view
from whale_jax.search import candidate_check
from whale_jax.search import context as context_lib
from whale_jax.search import evaluation as evaluation_lib
from whale_jax.search import proposal as proposal_lib
from whale_jax.search import reward as reward_lib

KINDS = reward_lib.KINDS
SELECTION_RULES = ("strict", "best_of")
INSTRUCTIONS_VERSION = "harness-learning-1"
INSTRUCTIONS = """\
You revise a harness: a Python program `run(task, llm, tools) -> str` that drives a fixed
language model on a task and returns its final answer. You see the task, the current harness
and an execution report: its mean score on problems of the task and episodes it failed and
solved (model calls, tool calls, answers, errors). Propose ONE revision that should make the
harness score higher on new problems of the same task.

Rules:
- Change how the harness works (prompting, parsing, checking, retrying, computing with
  Python, tool use); no hard-coded answers and no branches on particular problems.
- Scores come from a verifier outside the harness; do not try to read or guess references.
- Keep `def run(task, llm, tools):`, at most {max_lines} lines, and import only these modules:
  {allowed_imports}.
- llm.chat(messages, **sampling) and llm.generate(prompt, **sampling) return text (a list of
  texts when n > 1); sampling keywords: max_tokens, temperature, top_p, top_k, n, stop, seed.

Reply in this format and nothing else:
HYPOTHESIS: <one sentence: what fails now, what you change, why it helps>
{reply_format}"""
REPLY_FORMATS = {
    "patch": """then one or more SEARCH/REPLACE blocks against the current harness:
<<<<<<< SEARCH
<lines copied exactly from the current harness>
=======
<the lines to put there instead>
>>>>>>> REPLACE""",
    "program": "then the complete revised harness in a single ```python code fence.",
}
FORMAT_FAILURES = {
    "patch": "The reply has no SEARCH/REPLACE blocks, or a block is not closed.",
    "program": "The reply holds no whole program (a ```python fence defining run) that parses.",
}
_THINKING = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Revision:
  """One reply, judged.

  Attributes:
    reply: the proposer's whole reply.
    proposer: who wrote it.
    parsed, applied, defines_run, num_lines: the format checks the reward reads.
    ran: it passed every check and was evaluated on the scoring tasks.
    completed_fraction, score: of that evaluation (0 when it did not run).
    reward: reward(...) of the above.
    runnable: it ran and completed the evaluation run.
    source: the candidate program (None when none could be built).
    reasons: why it was refused ([] when it ran).
    candidate_id: its archive id.
    hypothesis: the reply's stated hypothesis.
  """
  reply: str
  proposer: str
  parsed: bool
  applied: bool
  defines_run: bool
  num_lines: int
  ran: bool
  completed_fraction: float
  score: float
  reward: float
  runnable: bool
  source: str | None
  reasons: tuple = ()
  candidate_id: str = ""
  hypothesis: str = ""


def _has_blocks(text):
  try:
    return bool(patches.parse_blocks(text))
  except patches.PatchFormatError:
    return False


def _program_checks(proposal):
  """(parsed, defines_run, num_lines) of a program-mode reply."""
  if proposal.kind != "program" or proposal.error:
    return False, False, 0
  source = proposal.text
  try:
    ast.parse(source)
  except (SyntaxError, ValueError):
    return False, False, len(source.splitlines())
  failures = static_checks.check_harness(source, max_lines=len(source.splitlines()) + 1)
  defines_run = not any(f.code in ("missing_run", "run_signature") for f in failures)
  return True, defines_run, len(source.splitlines())


def check_reply(reply, kind, current_source, allowed_imports, config=reward_lib.RewardConfig()):
  """(format checks dict, PreparedCandidate or None, Proposal) for one reply, no rollouts."""
  proposal = proposal_lib.parse_reply(reply)
  checks = {"parsed": False, "applied": False, "defines_run": False, "num_lines": 0}
  prepared = None
  if kind == "patch":
    checks["parsed"] = proposal.kind == "patch" and _has_blocks(proposal.text)
    if checks["parsed"]:
      prepared = candidate_check.prepare_candidate(proposal, current_source, allowed_imports,
                                                   config.max_lines)
      checks["applied"] = prepared.source is not None
  else:
    parsed, defines_run, num_lines = _program_checks(proposal)
    checks.update(parsed=parsed, defines_run=defines_run, num_lines=num_lines)
    if parsed:
      prepared = candidate_check.prepare_candidate(proposal, current_source, allowed_imports,
                                                   config.max_lines)
      checks["applied"] = prepared.source is not None
  return checks, prepared, proposal


def instructions(kind, allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
                 max_lines=static_checks.DEFAULT_MAX_LINES):
  """The proposer's system message for replies of `kind`."""
  allowed = textwrap.fill(", ".join(allowed_imports), width=88, subsequent_indent="  ")
  return INSTRUCTIONS.format(max_lines=max_lines, allowed_imports=allowed,
                             reply_format=REPLY_FORMATS[kind])


def _gold_strings(instances):
  """The strings of the gold answers of instances (archive_view's "answers" view)."""
  return archive_view.reference_strings(
      [dataclasses.replace(instance, reference=archive_view.shown_reference(instance, "answers"))
       for instance in instances])


def revision_context(archive_dir, domain, current_source, diagnostic, evaluate, seed, iteration,
                     budget_tokens, tokenizer=None, kind="patch", config=reward_lib.RewardConfig(),
                     report=None, search_answers="none", held_out=(), hosts=sharding.SINGLE):
  """The proposer's context for revising current_source; returns (context, archive, report).

  Args:
    archive_dir: the revision's archive; what is there already is removed (an interrupted
      revision is redone whole).
    diagnostic: the instances whose episodes form the execution report.
    evaluate: evaluate(harness, instances, keys) -> Evaluation.
    report: an Evaluation of current_source on `diagnostic` to reuse (costs no rollouts).
    budget_tokens: the context's token budget (counted with tokenizer).
    search_answers: what of the diagnostic tasks' references the report shows (one of
      archive_view.SEARCH_ANSWER_MODES: "none", "answers", "answers_and_documents").
    held_out: the instances of the held-out splits (validation, test): a diagnostic task
      among them never shows its reference, and their gold answers (what "answers" would
      show of their references; not the public question a reference may repeat) are
      withheld wherever an episode would show them (context.build_context's withheld).
    hosts: the HostGroup sharing the archive (module docstring).
  Returns:
    the ProposerContext, the Archive (holding c0000) and the report (its .rollouts were run now).
  """
  archive_view.check_search_answers(search_answers)
  held_out_ids = {instance.id for instance in held_out}
  references = {instance.id: archive_view.shown_reference(instance, search_answers)
                for instance in diagnostic
                if instance.id not in held_out_ids and search_answers != "none"}
  if hosts.index == 0:
    shutil.rmtree(archive_dir, ignore_errors=True)
  sharding.barrier(hosts)  # removed before any host opens it ...
  archive = archive_lib.Archive(archive_dir, hosts.index, hosts.count)
  sharding.barrier(hosts)  # ... and opened, empty, by every host before host 0 writes c0000
  harness = program.Harness(current_source, origin="incoming")
  if report is None:
    report = evaluation_lib.as_evaluation(
        evaluate(harness, diagnostic, evaluation_lib.sample_keys(diagnostic, seed)),
        diagnostic, evaluation_lib.sample_keys(diagnostic, seed))
  archive.add(archive_lib.Candidate(
      id=archive.next_id(), iteration=1, index=0, hash=harness.hash, parent=None,
      origin="incoming", status="evaluated", weights_id=getattr(evaluate, "weights_id", None)),
      source=current_source, evaluation=report)
  sharding.barrier(hosts)  # every host's trace shard of c0000 is on disk before it is read
  system = instructions(kind, domain.allowed_imports, config.max_lines)
  # build_context budgets for its own (longer) system message; the difference goes to the
  # report sections, and the shorter system message then makes the total fit the budget.
  default_system = context_lib.instructions(domain.allowed_imports, config.max_lines)
  context = context_lib.build_context(
      archive, "c0000", domain.name, domain.description, iteration,
      budget_tokens + context_lib.count_tokens(default_system, tokenizer) -
      context_lib.count_tokens(system, tokenizer), tokenizer=tokenizer,
      allowed_imports=domain.allowed_imports, max_lines=config.max_lines,
      references=references, withheld=_gold_strings(held_out))
  messages = ({"role": "system", "content": system}, context.messages[-1])
  context = dataclasses.replace(
      context, messages=messages, budget_tokens=budget_tokens,
      num_tokens=context_lib.count_message_tokens(messages, tokenizer),
      instruction_version=INSTRUCTIONS_VERSION,
      instruction_hash=context_lib.instruction_hash(system))
  return context, archive, report


def archived_evaluation(archive_dir, candidate_id, hosts=sharding.SINGLE):
  """The Evaluation stored with an archived candidate (rollouts 0), or None.

  Its trajectories follow the candidate's examples (the trace shards of a multi-host run
  list them host by host). On a multi-host run host 0 holds them all and the other hosts
  their numbers (sharding.EpisodeRecord), so an archive it is added to again gets each
  episode's trace once.
  """
  archive = archive_lib.Archive(archive_dir, hosts.index, hosts.count)
  examples = archive.examples(candidate_id)
  if not examples:
    return None
  by_task = {}
  for trajectory in archive.trajectories(candidate_id):
    by_task.setdefault(trajectory.task_id, []).append(trajectory)
  trajectories = [by_task[row["task_id"]].pop(0) for row in examples]
  if hosts.index:
    trajectories = [sharding.EpisodeRecord.of(t, host=0) for t in trajectories]
  return collector.Evaluation(
      tuple(row["task_id"] for row in examples), tuple(row["sample_key"] for row in examples),
      tuple(row["score"] for row in examples), tuple(trajectories), rollouts=0)


def judge_replies(replies, kind, current_source, domain, scoring, evaluate, seed, archive,
                  config=reward_lib.RewardConfig(), proposers=None, hosts=sharding.SINGLE):
  """Checks, evaluates and rewards each reply; returns ([Revision], rollouts run).

  Candidates that may run are evaluated together (evaluation.evaluate_many: every episode in
  flight at once, one exchange of numbers on a multi-host run), each distinct program once;
  every reply is added to the archive in order, and the hosts meet once every trace shard
  is on disk.
  """
  proposers = list(proposers or [""] * len(replies))
  keys = evaluation_lib.sample_keys(scoring, seed)
  checked = [check_reply(reply, kind, current_source, domain.allowed_imports, config)
             for reply in replies]
  to_run = {}
  for _, prepared, _ in checked:
    if prepared is not None and prepared.ok:
      to_run.setdefault(program.content_hash(prepared.source), prepared.source)
  parent_hash = program.content_hash(current_source)
  evaluations = dict(zip(to_run, evaluation_lib.evaluate_many(
      evaluate, [(program.Harness(source, parent=parent_hash), scoring, keys)
                 for source in to_run.values()])))
  rollouts = sum(evaluation.rollouts for evaluation in evaluations.values())
  parent = archive.candidates[0]
  revisions = []
  for index, (reply, proposer, (checks, prepared, proposal)) in enumerate(
      zip(replies, proposers, checked)):
    source = prepared.source if prepared is not None else None
    evaluation = None
    if prepared is not None and prepared.ok:
      evaluation = evaluations[program.content_hash(source)]
    completed = score = 0.0
    if evaluation is not None:
      outcomes = [trajectory.outcome for trajectory in evaluation.trajectories]
      completed = outcomes.count("ok") / max(len(outcomes), 1)
      score = evaluation.success_rate
    value = reward_lib.reward(kind, checks["parsed"], checks["applied"], completed, score,
                   checks["defines_run"], checks["num_lines"], config)
    if prepared is None:
      reasons = ({"code": "format", "message": FORMAT_FAILURES[kind]},)
    else:
      reasons = tuple(prepared.reasons)
    record = candidate_check.archive_record(
        archive, proposal, prepared, iteration=2, index=index, parent=parent.id,
        proposer=proposer, weights_id=getattr(evaluate, "weights_id", None), origin=kind)
    record.reasons = list(reasons)
    if evaluation is not None:
      record.status = "evaluated"
    archive.add(record, source=source, raw_output=reply, evaluation=evaluation)
    revisions.append(Revision(
        reply=reply, proposer=proposer, parsed=checks["parsed"], applied=checks["applied"],
        defines_run=checks["defines_run"], num_lines=checks["num_lines"],
        ran=evaluation is not None, completed_fraction=completed, score=score, reward=value,
        runnable=evaluation is not None and completed >= config.min_completed_fraction,
        source=source, reasons=reasons, candidate_id=record.id, hypothesis=proposal.hypothesis))
  sharding.barrier(hosts)  # every host's trace shards are on disk before any is read
  return revisions, rollouts


# ---- Selection, demonstrations and GRPO samples ----------------------------------------

def select(rule, revisions, current_score):
  """The revision a round keeps, or None to keep the current harness.

  strict: the (single) candidate, when it ran and scored strictly above current_score.
  best_of: the highest-scoring runnable candidate (the first of equals), even when worse.
  """
  if rule == "strict":
    first = revisions[0] if revisions else None
    return first if first is not None and first.ran and first.score > current_score else None
  if rule == "best_of":
    runnable = [r for r in revisions if r.runnable]
    return max(runnable, key=lambda r: r.score) if runnable else None
  raise ValueError(f"Selection rule {rule!r}; use one of {SELECTION_RULES}.")


def teacher_reply(proposal, kind, current_source, allowed_imports, max_lines):
  """The reply a teacher's proposal is trained as: its text without thinking; in program
  mode a patch is turned into the whole program it produces."""
  if proposal.error:
    return ""
  reply = without_thinking(
      proposal.raw_output or proposal_lib.format_reply(proposal.hypothesis, proposal.text))
  if kind == "program" and proposal.kind == "patch":
    prepared = candidate_check.prepare_candidate(proposal, current_source, allowed_imports,
                                                 max_lines)
    if prepared.ok:
      reply = proposal_lib.format_reply(proposal.hypothesis,
                                        f"```python\n{prepared.source.rstrip()}\n```\n")
  return reply


def teacher_demonstrations(context, teachers, num_proposals, kind, domain, scoring, evaluate,
                           seed, baseline, archive, rewards=reward_lib.RewardConfig(),
                           hosts=sharding.SINGLE):
  """Teacher proposals for one context, judged; the ones that raised the score as rows.

  Returns:
    (rows, revisions, rollouts): rows are {"domain", "messages", "reply", "proposer",
    "score", "baseline", "candidate"} for each reply that ran and scored strictly above
    baseline (the current harness's scoring mean).
  """
  replies, names = [], []
  current_source = context.incumbent.source
  for teacher in teachers:
    for proposal in proposal_lib.safe_propose(teacher, context, num_proposals):
      if proposal.call_failed:  # no reply: logged, never judged or archived as a result
        logging.warning("Teacher %s got no reply (not archived; a rerun of this phase asks "
                        "again): %s", getattr(teacher, "name", teacher), proposal.error)
        continue
      if proposal.error:  # judged as an empty reply: archived, refused, never a demonstration
        logging.warning("Teacher %s failed: %s", getattr(teacher, "name", teacher),
                        proposal.error)
      replies.append(teacher_reply(proposal, kind, current_source, domain.allowed_imports,
                                   rewards.max_lines))
      names.append(proposal.proposer or getattr(teacher, "name", ""))
  revisions, rollouts = judge_replies(
      replies, kind, current_source, domain, scoring, evaluate, seed, archive, rewards, names,
      hosts)
  rows = [{"domain": domain.name, "messages": [dict(m) for m in context.messages],
           "reply": revision.reply, "proposer": revision.proposer, "score": revision.score,
           "baseline": baseline, "candidate": revision.candidate_id}
          for revision in revisions if revision.ran and revision.score > baseline]
  return rows, revisions, rollouts


# ---- The proposer's prompt ----------------------------------------------------------------

def prompt_ids(tokenizer, messages):
  """The proposer prompt: the context messages through the proposer's chat template."""
  return list(tokenizer.apply_chat_template([dict(m) for m in messages],
                                            add_generation_prompt=True))


def without_thinking(reply):
  return _THINKING.sub("", reply)
