"""Meta-Harness search as WHALE runs it: an archive of every candidate, M proposals per
iteration, the top of the Pareto front (success up, mean turns down) accepted.

  result = meta_harness.search(incoming, evaluate, proposer, archive_dir, domain=domain,
                               instances=splits["harness"], weights_id="step_1200",
                               iterations=6, candidates_per_iteration=3)
  result.accepted          # the Harness to use next (possibly the incoming one)
  result.rollouts          # episodes run by this search, over all its sessions
  result.archive           # whale_jax.search.archive.Archive

  # or with patience: at least 6 iterations, stop after 2 without a new best, at most 16
  meta_harness.search(..., min_iterations=6, patience=2, max_iterations=16)

Iteration 1 evaluates the incoming harness (always: the weights changed since it was last
scored; the evaluation cache answers if they did not). Each later iteration builds the
proposer context from the archive (whale_jax.search.context) around the accepted harness,
asks the proposer for M candidates, and for each: applies and checks it
(whale_jax.search.candidate_check: patch application, static checks and, in prompt-only mode —
the FST control — the prompt-only check), drops it as a duplicate when its source is already
archived, and evaluates what passes with one rollout per instance. Every proposal becomes an archive entry
with its status and reasons; a malformed proposal never stops the search. After each
iteration the accepted harness is the evaluated candidate with the highest success, ties to
fewer mean turns, then to the earlier candidate — the top of the Pareto front over all
candidates of the run; later proposals may refine any candidate. All candidates use the same
sample keys (sample_keys(instances, seed)), so they are compared on the same random streams.

Budgets: `iterations=I` runs I iterations (the incoming evaluation counts as the first), or
patience: after min_iterations, stop once `patience` iterations in a row brought no new best
(WHALE's rule: a success rate above the best so far; an accepted harness that only ties it
with fewer mean turns is adopted but is no new best); never more than max_iterations.

Failed proposer calls: a call that got no reply (Proposal.call_failed: the endpoint failed
after its client's retries, or the proposer raised) is logged and counted
(SearchResult.failed_proposer_calls, and proposals.json's "failed_calls"), but it is no
result: nothing is archived for it and its slot in proposals.json stays null. The search goes
on with the other proposals; calling search again with the same archive_dir asks the
proposer again for exactly the failed slots, with the context the first call had (saved in
iterations/iteration_NNN/context.json), and uses the replies. A reply that came but does not
parse or is refused is a result, archived with its reasons like any other. An endpoint down
for good (openai_client.EndpointUnavailable) stops the search.

Resuming: calling search again with the same archive_dir continues where it stopped. The
proposals of an iteration are saved before any is evaluated (iterations/iteration_NNN/
proposals.json) and reused; candidates already in the archive are not redone; acceptance and
patience are recomputed from the archive. So an interrupted run, resumed, makes the same
candidates and decisions as an uninterrupted one with the same seed (with an edit-library
proposer, or any proposer, given that its saved proposals are reused). Rollouts of an
evaluation interrupted by an exception are not counted.

The proposer is asked once per iteration for all M candidates (propose(context, M)): a model
proposer answers with M calls, the agentic one with M sessions, and the CLI coding agent
(whale_jax.search.cli_agent) with M sessions or, with session_per="iteration", as WHALE runs
Claude Code: one session writes the M reserved candidate files and pending_eval.json (axis,
components, hypothesis per candidate: whale_jax.search.pending_eval); a candidate it did not
write, or wrote without a valid entry, comes back as a failed proposal and is archived as
rejected with the reason, like any refused one.

Parallel evaluation: as in WHALE, the candidates of an iteration are evaluated together: every
proposal is checked first, then all candidates' episodes go to the runtime as one batch
(evaluation.evaluate_many: the runtime's workers and the engine's slots serve them at once),
each candidate with the same sample keys as a serial evaluation, so the scores and traces are
those of one evaluation after another (parallel_candidates=False). They are archived in
proposal order afterwards; an exception in that batch archives none of the iteration's
candidates (the evaluation cache keeps what it stored). An evaluate function without
evaluate_many (a plain callable) evaluates them one after another, archiving those before
an interruption.

Departures from WHALE: the one-shot proposers are function calls on a context rendered from
the archive, cut to context_budget_tokens (config.search.context_tokens); the CLI agent
browses a copy of the archive view, not the archive directory itself; no separate validation
gate (use whale_jax.search.validation_gate where a recipe wants one).
"""
import dataclasses
import glob
import os

from absl import logging

from whale_jax.harness import program
from whale_jax.harness import static_checks
from whale_jax.rollouts import sharding
from whale_jax.search import archive as archive_lib
from whale_jax.search import candidate_check
from whale_jax.search import context as context_lib
from whale_jax.search import evaluation as evaluation_lib
from whale_jax.search import evaluation_cache
from whale_jax.search import proposal as proposal_lib

RUN_FILE = "search.json"
# The one-shot proposers' context budget (config.search.context_tokens): the prompt rendered
# from the archive (whale_jax.search.context) is cut to this many tokens.
DEFAULT_CONTEXT_TOKENS = 16_000
MATCHING_RUN_FIELDS = ("incoming_hash", "weights_id", "task_ids", "seed",
                       "candidates_per_iteration", "prompt_only", "domain")


@dataclasses.dataclass(frozen=True)
class SearchResult:
  """What a search returns.

  Attributes:
    accepted: the accepted Harness (the incoming one when nothing beat it).
    accepted_id: its archive id.
    archive: the Archive.
    rollouts: episodes run by this search, all sessions together (cache hits excluded).
    generated_tokens: the solver's tokens in those episodes.
    iterations: iterations completed, the incoming evaluation included.
    stop_reason: why the search stopped.
    frontier: ids of the Pareto front (success up, mean turns down).
    proposer_prompt_tokens, proposer_completion_tokens: what the proposer spent, all sessions
      (kept apart from rollouts, as WHALE excludes proposer compute from rollout counts).
    failed_proposer_calls: proposer calls that got no reply, all sessions (module docstring).
    missing_proposals: slots whose call failed and was not yet retried successfully.
  """
  accepted: program.Harness
  accepted_id: str
  archive: archive_lib.Archive
  rollouts: int
  iterations: int
  stop_reason: str
  frontier: tuple[str, ...]
  proposer_prompt_tokens: int = 0
  generated_tokens: int = 0
  proposer_completion_tokens: int = 0
  failed_proposer_calls: int = 0
  missing_proposals: int = 0

  @property
  def improved(self):
    return self.accepted_id != "c0000"


def pareto_front(candidates):
  """Evaluated candidates no other candidate beats on success (up) and mean turns (down)."""
  evaluated = [c for c in candidates if c.evaluated]
  return [c for c in evaluated if not any(
      d.success >= c.success and d.mean_turns <= c.mean_turns and
      (d.success > c.success or d.mean_turns < c.mean_turns) for d in evaluated)]


def pick_accepted(candidates):
  """The top of the front: highest success, then fewer mean turns, then the earlier id."""
  front = pareto_front(candidates)
  return min(front, key=lambda c: (-c.success, c.mean_turns, int(c.id[1:])))


def _check_budget(iterations, min_iterations, patience, max_iterations):
  patience_mode = (min_iterations, patience, max_iterations) != (None, None, None)
  if (iterations is None) == (not patience_mode) or (
      patience_mode and None in (min_iterations, patience, max_iterations)):
    raise ValueError("Give the search budget either as iterations=I (the incoming evaluation "
                     "counts as iteration 1) or as min_iterations, patience and "
                     "max_iterations together; got iterations="
                     f"{iterations}, min_iterations={min_iterations}, patience={patience}, "
                     f"max_iterations={max_iterations}.")
  if iterations is not None and iterations < 1:
    raise ValueError(f"iterations={iterations} must be >= 1 (1 only evaluates the incoming "
                     "harness).")
  if patience_mode and not (1 <= min_iterations <= max_iterations and patience >= 1):
    raise ValueError(f"Need 1 <= min_iterations <= max_iterations and patience >= 1; got "
                     f"min_iterations={min_iterations}, max_iterations={max_iterations}, "
                     f"patience={patience}.")


def _stop_reason(iteration, iterations, min_iterations, patience, max_iterations,
                 last_new_best):
  """Why not to run `iteration`, or None to run it."""
  if iterations is not None:
    return f"ran iterations={iterations}" if iteration > iterations else None
  if iteration > max_iterations:
    return f"reached max_iterations={max_iterations}"
  done = iteration - 1
  if done >= min_iterations and done - last_new_best >= patience:
    return (f"no new best in the last {patience} iteration(s) (last new best in iteration "
            f"{last_new_best})")
  return None


def _up_to(archive, iteration):
  return [c for c in archive.candidates if c.iteration <= iteration]


def _iteration_path(archive, iteration, name):
  return archive.path("iterations", f"iteration_{iteration:03d}", name)


def _render_messages(messages):
  return "\n\n".join(f"===== {m['role']} =====\n{m['content']}" for m in messages)


def search(incoming, evaluate, proposer, archive_dir, *, domain, instances, weights_id=None,
           iterations=None, min_iterations=None, patience=None, max_iterations=None,
           candidates_per_iteration=3, prompt_only=False, seed=0,
           context_budget_tokens=DEFAULT_CONTEXT_TOKENS, tokenizer=None,
           max_lines=static_checks.DEFAULT_MAX_LINES, cache_dir=None, context_options=None,
           session="", parallel_candidates=True, hosts=None):
  """Runs (or resumes) a Meta-Harness search; see the module docstring.

  Args:
    incoming: the Harness the search starts from.
    evaluate: (harness, instances, sample_keys) -> Evaluation (see
      whale_jax.search.evaluation.make_evaluate); wrapped here in the evaluation cache.
    proposer: an object with propose(context, n) -> [Proposal] and a name.
    archive_dir: the archive directory (created, or resumed).
    domain: the tasks.Domain: its name, description and allowed imports.
    instances: the harness split; every candidate is evaluated on all of them.
    weights_id: names the evaluated weights (default: evaluate.weights_id).
    iterations | min_iterations, patience, max_iterations: the budget.
    candidates_per_iteration: M, proposals asked for per iteration.
    prompt_only: allow only changes to the prompt strings (FST control).
    seed: seeds the sample keys (common to all candidates).
    context_budget_tokens, tokenizer: the proposer context's budget and token counter.
    max_lines: longest candidate allowed.
    cache_dir: the evaluation cache (default archive_dir/evaluations); share it with the
      validation gate to reuse evaluations at the same weights.
    context_options: extra keyword arguments for context.build_context (num_failing, ...).
    session: names this search among the run's searches (ProposerContext.session: the
      proposer's seeds fold it in, so each harness phase of a recipe draws its own proposals).
    parallel_candidates: evaluate an iteration's candidates together (one batch of all their
      episodes, evaluation.evaluate_many) when evaluate has evaluate_many (an Evaluator);
      False, or a plain evaluate callable: one after another. Same results either way.
    hosts: a rollouts.sharding.HostGroup when the hosts of a multi-host run all run this
      search on one shared archive_dir (default: a single host). Host 0 writes the archive
      and the search's files; each host writes its own episodes' trace shards and keeps its
      own evaluation cache (evaluations.host_<i>); the hosts meet at a barrier before each
      proposer context is built, so host 0 reads every host's shards (search/archive.py).
  """
  _check_budget(iterations, min_iterations, patience, max_iterations)
  if candidates_per_iteration < 1:
    raise ValueError(f"candidates_per_iteration={candidates_per_iteration} must be >= 1.")
  instances = list(instances)
  if not instances:
    raise ValueError("search needs the harness split: a non-empty list of instances.")
  weights_id = weights_id if weights_id is not None else getattr(evaluate, "weights_id", None)
  hosts = hosts or sharding.SINGLE
  archive = archive_lib.Archive(archive_dir, hosts.index, hosts.count)
  run = {"incoming_hash": incoming.hash, "weights_id": weights_id,
         "task_ids": [i.id for i in instances], "seed": seed,
         "candidates_per_iteration": candidates_per_iteration, "prompt_only": prompt_only,
         "session": session,
         "domain": domain.name, "proposer": getattr(proposer, "name", type(proposer).__name__),
         "instruction_version": context_lib.INSTRUCTIONS_VERSION}
  previous = archive_lib.read_json(archive.path(RUN_FILE))
  if previous is not None:
    changed = [field for field in MATCHING_RUN_FIELDS if previous.get(field) != run[field]]
    if changed:
      raise ValueError(f"{archive_dir} holds a search that differs in {', '.join(changed)}; "
                       "resume it with the same arguments, or use a new archive_dir.")
  else:
    archive.write_json(archive.path(RUN_FILE), run)
  cache = evaluation_cache.EvaluationCache(cache_dir or archive.path(
      "evaluations" if hosts.count == 1 else f"evaluations.host_{hosts.index:03d}"))
  evaluate_cached = evaluation_cache.cached(evaluate, cache, weights_id)
  keys = evaluation_lib.sample_keys(instances, seed)

  def record(candidate, source=None, raw_output="", evaluation=None):
    return archive.add(candidate, source=source, raw_output=raw_output, evaluation=evaluation)

  # Iteration 1: the incoming harness.
  if not archive.candidates:
    evaluation = evaluate_cached(incoming, instances, keys)
    failures = incoming.check(domain.allowed_imports, max_lines)
    record(archive_lib.Candidate(
        id=archive.next_id(), iteration=1, index=0, hash=incoming.hash, parent=None,
        origin="incoming", status="evaluated", weights_id=weights_id,
        static_check=[dataclasses.asdict(f) for f in failures]),
        source=incoming.source, evaluation=evaluation)
  accepted = pick_accepted(_up_to(archive, 1))
  last_new_best, iteration = 1, 1
  _write_comparison(archive, 1, accepted, last_new_best)

  while True:
    iteration += 1
    stop_reason = _stop_reason(iteration, iterations, min_iterations, patience,
                               max_iterations, last_new_best)
    if stop_reason:
      break
    sharding.barrier(hosts)  # every host's trace shards are on disk before host 0 reads them
    proposals, meta = _proposals(archive, iteration, accepted, proposer, domain,
                                 candidates_per_iteration, prompt_only,
                                 context_budget_tokens, tokenizer, max_lines,
                                 dict(context_options or {}, session=session))
    done = {c.index for c in archive.candidates if c.iteration == iteration}
    parent = archive.get(meta["incumbent_id"])
    parent_source = archive.source(parent.id)
    # Check every proposal first, then evaluate the ones to evaluate together, then archive
    # all in index order: the archive a serial search would write.
    checked = []      # (index, proposal, prepared, candidate); the id is set when archived
    to_evaluate = {}  # hash -> index of the first proposal with that program
    for index, proposal in enumerate(proposals):
      if index in done or proposal.call_failed:
        continue
      prepared = candidate_check.prepare_candidate(
          proposal, parent_source, domain.allowed_imports, max_lines,
          prompt_only_reference=incoming.source if prompt_only else None)
      candidate = candidate_check.archive_record(
          archive, proposal, prepared, iteration=iteration, index=index, parent=parent.id,
          proposer=run["proposer"], weights_id=weights_id,
          instruction_version=meta["instruction_version"],
          instruction_hash=meta["instruction_hash"])
      if (prepared.ok and archive.find_hash(candidate.hash) is None and
          candidate.hash not in to_evaluate):
        to_evaluate[candidate.hash] = index
      checked.append((index, proposal, prepared, candidate))
    harnesses = {index: program.Harness(prepared.source, parent=parent.hash,
                                        origin=candidate.origin)
                 for index, _, prepared, candidate in checked
                 if to_evaluate.get(candidate.hash) == index}
    evaluations, error = _evaluate_candidates(
        evaluate_cached, harnesses, instances, keys,
        parallel_candidates and hasattr(evaluate, "evaluate_many"))
    for index, proposal, prepared, candidate in checked:
      if index in harnesses and index not in evaluations:
        raise error   # archived up to here, as a serial search stopped by it would have
      candidate.id = archive.next_id()
      original = archive.find_hash(candidate.hash)
      if original is not None:   # archived before, or earlier in this iteration
        candidate.status = "duplicate"
        candidate.duplicate_of = original.duplicate_of or original.id
        candidate.reasons = [candidate_check.reason(
            "duplicate", f"Same program as {candidate.duplicate_of}; it is not evaluated "
            "again.")]
        candidate.static_check = []
      if index not in evaluations:
        record(candidate, source=prepared.source, raw_output=proposal.raw_output)
        continue
      candidate.status = "evaluated"
      record(candidate, source=prepared.source, raw_output=proposal.raw_output,
             evaluation=evaluations[index])
    new_accepted = pick_accepted(_up_to(archive, iteration))
    if new_accepted.success > accepted.success:  # WHALE: a higher best success rate; a tie
      last_new_best = iteration                  # with fewer turns is adopted, not "new best"
    accepted = new_accepted
    _write_comparison(archive, iteration, accepted, last_new_best)

  accepted_harness = incoming
  if accepted.id != "c0000":
    parent_hash = archive.get(accepted.parent).hash if accepted.parent else None
    accepted_harness = program.Harness(archive.source(accepted.id), parent=parent_hash,
                                       origin=accepted.origin)
  archive.write_json(archive.path("accepted.json"), {
      "id": accepted.id, "hash": accepted.hash, "success": accepted.success,
      "mean_turns": accepted.mean_turns, "iterations": iteration - 1,
      "stop_reason": stop_reason})
  return SearchResult(
      accepted=accepted_harness, accepted_id=accepted.id, archive=archive,
      rollouts=sum(c.rollouts for c in archive.candidates), iterations=iteration - 1,
      stop_reason=stop_reason,
      frontier=tuple(c.id for c in pareto_front(_up_to(archive, iteration - 1))),
      proposer_prompt_tokens=sum(c.prompt_tokens for c in archive.candidates),
      proposer_completion_tokens=sum(c.completion_tokens for c in archive.candidates),
      generated_tokens=sum(c.generated_tokens for c in archive.candidates),
      **_failed_call_counts(archive))


def _proposals(archive, iteration, accepted, proposer, domain, count, prompt_only,
               budget_tokens, tokenizer, max_lines, context_options):
  """The iteration's proposals: reloaded when saved, else proposed now and saved first.

  Slots whose call failed are saved as null (never as a result) and asked for again, with
  the saved context, when the iteration is reloaded; a slot still failing is returned as the
  failed_call Proposal, which the caller skips.
  """
  path = _iteration_path(archive, iteration, "proposals.json")
  saved = archive_lib.read_json(path)
  if saved is not None:
    proposals = [None if p is None else proposal_lib.Proposal.from_json(p)
                 for p in saved["proposals"]]
    missing = [index for index, p in enumerate(proposals) if p is None]
    if not missing:
      return proposals, saved
    context = _load_context(archive, iteration)
    retried = proposal_lib.safe_propose(proposer, context, count, indices=missing)
    for index, proposal in zip(missing, retried):
      proposals[index] = proposal
    _save_proposals(archive, path, saved, proposals, context)
    return proposals, saved
  context = context_lib.build_context(
      archive, accepted.id, domain.name, domain.description, iteration, budget_tokens,
      tokenizer=tokenizer, prompt_only=prompt_only, allowed_imports=domain.allowed_imports,
      max_lines=max_lines, **context_options)
  archive.write_text(_iteration_path(archive, iteration, "context.txt"),
                     _render_messages(context.messages))
  proposals = proposal_lib.safe_propose(proposer, context, count)
  meta = {"iteration": iteration, "incumbent_id": accepted.id,
          # a proposer with its own steering text (the agentic one) names its instructions
          "instruction_version": getattr(proposer, "instruction_version", None) or
                                 context.instruction_version,
          "instruction_hash": getattr(proposer, "instruction_hash", None) or
                              context.instruction_hash, "context_tokens": context.num_tokens,
          "context_budget_tokens": context.budget_tokens, "failed_calls": []}
  _save_proposals(archive, path, meta, proposals, context)
  return proposals, meta


def _save_proposals(archive, path, meta, proposals, context):
  """Writes proposals.json: results, null for each failed call (also appended to
  meta["failed_calls"] and logged); with a failed call, the context too (context.json)."""
  failures = [(index, p) for index, p in enumerate(proposals) if p.call_failed]
  meta["failed_calls"] = list(meta.get("failed_calls", [])) + [
      {"index": index, "proposer": p.proposer, "error": p.error} for index, p in failures]
  for index, p in failures:
    logging.warning("Meta-Harness iteration %d: proposer call %d got no reply (%s); it is "
                    "not archived, and a resume with the same archive asks again.",
                    context.iteration, index, p.error)
  if failures:
    _save_context(archive, context)
  meta["proposals"] = [None if p.call_failed else p.to_json() for p in proposals]
  archive.write_json(path, meta)


_CONTEXT_FIELDS = ("domain_name", "incumbent_id", "iteration", "num_tokens", "budget_tokens",
                   "instruction_version", "instruction_hash", "prompt_only", "max_lines",
                   "session")


def _save_context(archive, context):
  path = _iteration_path(archive, context.iteration, "context.json")
  if os.path.exists(path):
    return  # the first call's context: every retry uses it
  data = {name: getattr(context, name) for name in _CONTEXT_FIELDS}
  data.update(messages=[dict(m) for m in context.messages],
              known_hashes=sorted(context.known_hashes),
              recent_mechanisms=list(context.recent_mechanisms),
              allowed_imports=list(context.allowed_imports))
  archive.write_json(path, data)


def _load_context(archive, iteration):
  """The ProposerContext saved for an iteration with failed calls (_save_context)."""
  path = _iteration_path(archive, iteration, "context.json")
  data = archive_lib.read_json(path)
  if data is None:
    raise ValueError(f"{path} is missing, but proposals.json of iteration {iteration} has "
                     "failed calls to retry; the archive is incomplete: use a new archive_dir.")
  record = archive.get(data["incumbent_id"])
  incumbent = program.Harness(archive.source(record.id), parent=None, origin=record.origin)
  return context_lib.ProposerContext(
      incumbent=incumbent, messages=tuple(data["messages"]),
      known_hashes=frozenset(data["known_hashes"]),
      recent_mechanisms=tuple(data["recent_mechanisms"]),
      allowed_imports=tuple(data["allowed_imports"]),
      **{name: data[name] for name in _CONTEXT_FIELDS if name in data})  # older: no session


def _evaluate_candidates(evaluate, harnesses, instances, keys, parallel):
  """({index: Evaluation}, None) of harnesses {index: Harness}, each on instances with the
  same keys: all their episodes in flight together (parallel), or one after another; an
  exception raised by a serial evaluation comes back as ({those done before}, exception)."""
  if parallel:
    jobs = [(harness, instances, keys) for harness in harnesses.values()]
    return dict(zip(harnesses, evaluation_lib.evaluate_many(evaluate, jobs))), None
  evaluations = {}
  for index, harness in harnesses.items():
    try:
      evaluations[index] = evaluation_lib.as_evaluation(evaluate(harness, instances, keys),
                                                        instances, keys)
    except Exception as error:  # pylint: disable=broad-except  (re-raised by the caller)
      return evaluations, error
  return evaluations, None


def _failed_call_counts(archive):
  failed = missing = 0
  for path in glob.glob(archive.path("iterations", "iteration_*", "proposals.json")):
    saved = archive_lib.read_json(path)
    failed += len(saved.get("failed_calls", []))
    missing += sum(p is None for p in saved["proposals"])
  return {"failed_proposer_calls": failed, "missing_proposals": missing}


def _write_comparison(archive, iteration, accepted, last_new_best):
  candidates = [c for c in archive.candidates if c.iteration == iteration]
  archive.write_json(_iteration_path(archive, iteration, "comparison.json"), {
      "iteration": iteration, "accepted": accepted.id, "accepted_success": accepted.success,
      "accepted_mean_turns": accepted.mean_turns, "new_best": last_new_best == iteration,
      "frontier": [c.id for c in pareto_front(_up_to(archive, iteration))],
      "candidates": [{"id": c.id, "status": c.status, "success": c.success,
                      "mean_turns": c.mean_turns, "mechanism": c.mechanism,
                      "reasons": [r["code"] for r in c.reasons]} for c in candidates]})
  archive.write_json(archive.path("accepted.json"), {
      "id": accepted.id, "hash": accepted.hash, "success": accepted.success,
      "mean_turns": accepted.mean_turns, "iterations": iteration})
