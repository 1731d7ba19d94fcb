"""From a proposal to a program that may cost rollouts: apply it, then check it.

  prepared = prepare_candidate(proposal, incumbent.source, domain.allowed_imports,
                               max_lines=200, prompt_only_reference=None)
  if prepared.ok:
    harness = prepared.harness(parent_hash=incumbent.hash)
  else:
    prepared.reasons        # [{"code", "message"}], what to tell the proposer

Steps, each of which may refuse the proposal with a reason code:
  proposer_error   the proposer produced no reply (proposal.error).
  malformed        a SEARCH/REPLACE block is not closed.
  no_blocks        neither blocks nor a program that defines run.
  not_found, ambiguous   a block's SEARCH text matches no place / several places
                   (whale_jax.harness.patches; all blocks must apply).
  no_change        the result is the current program.
  static_check     the result fails whale_jax.harness.static_checks (syntax, run signature,
                   line limit, imports, forbidden names); static_check lists the failures.
  prompt_only      prompt-only mode: it changes more than the prompt strings of the reference
                   (whale_jax.search.prompt_only).
  edit_scope       it changes more than the edit scope allows of the reference
                   (whale_jax.search.edit_scope; VACE's "guidance": constants' values only).
Used by Meta-Harness search and by recipes that gate single candidates (VACE, Harness
Learning). Duplicates of archived programs are the archive's business (meta_harness).

  record = archive_record(archive, proposal, prepared, iteration=2, index=0, parent="c0000")

archive_record is the one place a proposal becomes an archive entry (status "rejected"; the
caller marks it "evaluated" or "duplicate").
"""
import dataclasses

from whale_jax.harness import patches
from whale_jax.harness import program
from whale_jax.harness import static_checks
from whale_jax.search import archive as archive_lib
from whale_jax.search import edit_scope as edit_scope_lib
from whale_jax.search import prompt_only


@dataclasses.dataclass(frozen=True)
class PreparedCandidate:
  """A proposal applied and checked.

  Attributes:
    source: the new program, or None when none could be built.
    origin: "patch" or "program".
    apply_report: the per-block report of applying it (for the proposer).
    reasons: why it is refused ([] when it may be evaluated).
    static_check: the static-check failures, as dicts.
  """
  source: str | None
  origin: str
  apply_report: str = ""
  reasons: tuple = ()
  static_check: tuple = ()

  @property
  def ok(self):
    return self.source is not None and not self.reasons

  def harness(self, parent_hash=None):
    return program.Harness(self.source, parent=parent_hash, origin=self.origin)


def reason(code, message):
  return {"code": code, "message": message}


def _apply(proposal, parent_source):
  """(source or None, origin, apply report, [reasons])."""
  if proposal.error:
    return None, proposal.kind, "", [reason("proposer_error", proposal.error)]
  if proposal.kind == "program":
    source = patches.extract_program(proposal.text) or proposal.text
    if source.strip() == parent_source.strip():
      return None, "program", "", [reason("no_change", "The proposed program is the current "
                                          "program.")]
    return source, "program", "Replaced the whole program.", []
  result = patches.apply_proposal(parent_source, proposal.text)
  origin = "program" if result.kind == "program" else "patch"
  if result.kind == "malformed":
    return None, origin, result.message, [reason("malformed", result.message)]
  if result.kind == "none":
    return None, origin, result.message, [reason("no_blocks", result.message)]
  failed = [report for report in result.reports if report.status != "applied"]
  if failed:
    return None, origin, result.message, [reason(r.status, r.detail) for r in failed]
  if not result.changed:
    return None, origin, result.message, [reason("no_change", result.message)]
  return result.source, origin, result.message, []


def prepare_candidate(proposal, parent_source,
                      allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
                      max_lines=static_checks.DEFAULT_MAX_LINES, prompt_only_reference=None,
                      edit_scope="any"):
  """Applies a Proposal to parent_source and checks the result (see the module docstring).

  Args:
    prompt_only_reference: in prompt-only mode, the source whose code must be kept (the
      incoming harness); None allows any change.
    edit_scope: one of edit_scope.SCOPES, checked against parent_source.
  """
  source, origin, report, reasons = _apply(proposal, parent_source)
  if source is None:
    return PreparedCandidate(None, origin, report, tuple(reasons))
  failures = static_checks.check_harness(source, allowed_imports, max_lines)
  if failures:
    return PreparedCandidate(source, origin, report, (
        reason("static_check", static_checks.describe_failures(failures)),),
        tuple(dataclasses.asdict(f) for f in failures))
  if prompt_only_reference is not None:
    problem = prompt_only.check_prompt_only(prompt_only_reference, source)
    if problem:
      return PreparedCandidate(source, origin, report, (reason("prompt_only", problem),))
  problem = edit_scope_lib.check_scope(edit_scope, parent_source, source)
  if problem:
    return PreparedCandidate(source, origin, report, (reason("edit_scope", problem),))
  return PreparedCandidate(source, origin, report)


def archive_record(archive, proposal, prepared, *, iteration, index, parent, proposer="",
                   weights_id=None, instruction_version="", instruction_hash="", origin=None):
  """The archive Candidate of a proposal and what applying it gave (module docstring).

  Args:
    archive: the Archive the record gets its next id from (it is not added here).
    proposal: the Proposal; its proposer name wins over `proposer`.
    prepared: prepare_candidate's result, or None when the reply was never applied (its
      origin is then `origin`, else proposal.kind, and the caller gives the reasons).
    iteration, index, parent: where it sits in the search.
    weights_id, instruction_version, instruction_hash: what it was made and evaluated under.
  """
  source = prepared.source if prepared is not None else None
  return archive_lib.Candidate(
      id=archive.next_id(), iteration=iteration, index=index,
      hash=program.content_hash(source) if source is not None else None, parent=parent,
      origin=prepared.origin if prepared is not None else (origin or proposal.kind),
      proposer=proposal.proposer or proposer, mechanism=proposal.mechanism,
      hypothesis=proposal.hypothesis, instruction_version=instruction_version,
      instruction_hash=instruction_hash, status="rejected",
      reasons=list(prepared.reasons) if prepared is not None else [],
      apply_report=prepared.apply_report if prepared is not None else "",
      static_check=list(prepared.static_check) if prepared is not None else [],
      weights_id=weights_id, prompt_tokens=proposal.prompt_tokens,
      completion_tokens=proposal.completion_tokens)
