"""One candidate from one proposal: the harness step of recipes that gate single candidates.

  candidate, record = propose_one(incumbent, proposer, domain, archive_dir,
                                  episodes=[(trajectory, score), ...])
  candidate        # a checked Harness, or None when the proposal was refused
  record           # its archive entry (status, reasons, apply report, hypothesis)

VACE proposes from the trajectories of the weight-update block that just ran: they are shown
to the proposer in place of archived episodes, and the incumbent's score in the context is
their mean. The archive directory holds the incumbent (c0000) and the proposal (c0001), so
every decision can be read later; calling again with the same directory returns the same
candidate without asking the proposer again (a resumed run makes the same choice). A call that
got no reply (Proposal.call_failed) is logged and returned as an unsaved "rejected" record
with reason proposer_error: nothing is archived for it, so calling again asks again.
"""
from absl import logging

from whale_jax.harness import program
from whale_jax.harness import static_checks
from whale_jax.rollouts import collector
from whale_jax.rollouts import sharding
from whale_jax.search import archive as archive_lib
from whale_jax.search import candidate_check
from whale_jax.search import context as context_lib
from whale_jax.search import proposal as proposal_lib

PROPOSAL_FILE = "proposal.json"


def _block_evaluation(episodes):
  """An Evaluation of the incumbent made of already-run episodes (costing no rollouts)."""
  trajectories = tuple(trajectory for trajectory, _ in episodes)
  return collector.Evaluation(
      task_ids=tuple(t.task_id for t in trajectories), sample_keys=tuple(range(len(episodes))),
      scores=tuple(float(score) for _, score in episodes), trajectories=trajectories,
      rollouts=0)


def propose_one(incumbent, proposer, domain, archive_dir, episodes=(), iteration=2,
                context_budget_tokens=16_000, tokenizer=None,
                max_lines=static_checks.DEFAULT_MAX_LINES, prompt_only=False, edit_scope="any",
                hosts=None):
  """Asks the proposer for one candidate derived from incumbent; returns (Harness|None, record).
  edit_scope: what a candidate may change (search/edit_scope.py); one out of scope is refused
  (archived as rejected, reason edit_scope) like one that fails a static check.
  hosts: as meta_harness.search's (host 0 writes the archive; the hosts meet at a barrier
  before the context is built, so host 0 reads every host's trace shards)."""
  hosts = hosts or sharding.SINGLE
  archive = archive_lib.Archive(archive_dir, hosts.index, hosts.count)
  episodes = list(episodes)
  if not archive.candidates:
    archive.add(archive_lib.Candidate(
        id=archive.next_id(), iteration=1, index=0, hash=incumbent.hash, parent=None,
        origin="incoming", status="evaluated"), source=incumbent.source,
        evaluation=_block_evaluation(episodes) if episodes else None)
  parent = archive.candidates[0]
  if len(archive.candidates) > 1:
    record = archive.candidates[1]
  else:
    saved = archive_lib.read_json(archive.path(PROPOSAL_FILE))
    if saved is not None:
      proposal = proposal_lib.Proposal.from_json(saved["proposal"])
      meta = saved
    else:
      sharding.barrier(hosts)
      context = context_lib.build_context(
          archive, parent.id, domain.name, domain.description, iteration,
          context_budget_tokens, tokenizer=tokenizer, prompt_only=prompt_only,
          allowed_imports=domain.allowed_imports, max_lines=max_lines,
          episodes=episodes or None, edit_scope=edit_scope)
      proposals = proposal_lib.safe_propose(proposer, context, 1)
      proposal = proposals[0] if proposals else proposal_lib.failed(
          "The proposer returned no proposal.")
      meta = {"proposal": proposal.to_json(), "instruction_version": context.instruction_version,
              "instruction_hash": context.instruction_hash}
      if not proposal.call_failed:
        archive.write_json(archive.path(PROPOSAL_FILE), meta)
    prepared = candidate_check.prepare_candidate(
        proposal, incumbent.source, domain.allowed_imports, max_lines,
        prompt_only_reference=incumbent.source if prompt_only else None,
        edit_scope=edit_scope)
    record = candidate_check.archive_record(
        archive, proposal, prepared, iteration=iteration, index=0, parent=parent.id,
        proposer=getattr(proposer, "name", ""), instruction_version=meta["instruction_version"],
        instruction_hash=meta["instruction_hash"])
    # "evaluated" marks a runnable candidate here; the caller's gate does the evaluating.
    record.status = "evaluated" if prepared.ok else "rejected"
    if proposal.call_failed:
      logging.warning("The proposer call for %s got no reply (%s); nothing is archived, and "
                      "calling again with the same archive asks again.", archive_dir,
                      proposal.error)
      return None, record
    archive.add(record, source=prepared.source, raw_output=proposal.raw_output)
  if record.status != "evaluated":
    return None, record
  return program.Harness(archive.source(record.id), parent=incumbent.hash,
                         origin=record.origin), record
