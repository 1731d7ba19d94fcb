"""The offline proposer: a seeded, deterministic catalogue of parameterized harness edits.

  proposer = EditLibraryProposer(seed=0)
  proposals = proposer.propose(context, n=3)       # SEARCH/REPLACE patches, REPLY_FORMAT replies
  options = edit_options(source, "synthetic_qa")   # every applicable (mechanism, blocks, ...)

Each edit is one mechanism with a few parameter values, written as SEARCH/REPLACE blocks
against the harness it is given. Edits are anchored on what the seed harnesses define — named
constants (MAX_TURNS, TOPK, MAX_DOC_TOKENS, the prompt strings, retry budgets), a few
statements of run() and format_observation() — found by parsing the current source, so they
keep applying after earlier edits changed other parts. An edit whose anchor is absent, that
does not apply cleanly, that changes nothing or whose result fails the static checks is not
proposed. Each domain brings its catalogue (Domain.edit_catalogue, in
whale_jax/tasks/<family>/edits.py, built from whale_jax/harness/source_edits.py); per family:

  qa (searchqa, synthetic_qa)  turn_budget, retrieval_topk, passage_length, query_rewrite
                               (question as the query, question appended to the query),
                               retrieve_first (search with the question before turn 1),
                               format_reminder (system prompt), user_prompt (search advice),
                               verify_then_retry (ask again when no <answer> was given)
  math                         turn_budget, format_reminder, interpreter_feedback (empty
                               output, error, answer reminder), nudge, voting (majority of
                               boxed answers), verify_then_retry
  chess                        board_presentation (no ASCII board, no FEN, compact legal
                               moves), format_retry_budget, illegal_move_retry_budget,
                               format_reminder
  reasoning_gym                format_reminder, think_then_answer, voting
  docqa                        turn_budget, calls_per_turn, result_length, format_reminder
                               (system prompt), user_prompt (lookup advice),
                               verify_then_retry (ask again when no <FINAL_ANSWER> was given)
  toolflow                     turn_budget, calls_per_turn, result_length, format_reminder
                               (system prompt: exact ids, near-duplicates, newest policy)

Choosing n of them: options whose result is already in the archive (context.known_hashes) are
dropped; in prompt-only mode only prompt-string edits are kept. Mechanisms the last
candidates did not use (context.recent_mechanisms) come first; within that order the
catalogue is shuffled by a generator seeded with seeds.derive_seed(seed, "edit_choice",
*context.call_site, incumbent hash) (call_site: the iteration, and the search's session when
it is named), and one option per mechanism is taken in turn until n are chosen. The same seed
and context give the same proposals; a later search of the run (another session, e.g. WHALE's
next harness phase) that starts from the same harness shuffles afresh, as a new proposer
session would, instead of repeating the earlier one. Replies are in the format a proposer
model is asked to write (whale_jax.search.proposal.REPLY_FORMAT), so they can serve as its
training targets.
"""
import ast
import random

from whale_jax import seeds as seeds_lib
from whale_jax.harness import patches
from whale_jax.harness import program
from whale_jax.harness import static_checks
from whale_jax.search import edit_mechanisms
from whale_jax.search import edit_scope
from whale_jax.search import prompt_only
from whale_jax.search import proposal as proposal_lib
from whale_jax.tasks import registry

PROPOSER_NAME = "edit_library"


def catalogue(domain_name):
  """The edit catalogue of a registered domain (tasks/<family>/edits.py), without building it."""
  entries = registry.edit_catalogue(domain_name)
  if not entries:
    raise ValueError(f"The edit library has no catalogue for domain {domain_name!r}; the domains "
                     f"with one are {', '.join(registry.domain_names())} (a domain's catalogue "
                     "is its Domain.edit_catalogue). Use a model proposer for other domains.")
  return entries


def edit_options(source, domain_name, allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
                 max_lines=static_checks.DEFAULT_MAX_LINES, edit_catalogue=None):
  """Every applicable edit of source: [(mechanism, blocks, hypothesis, prompt_only_safe,
  new_source)], in catalogue order. The catalogue is edit_catalogue (a Domain's), else the
  registered domain_name's."""
  try:
    tree = ast.parse(source)
  except SyntaxError:
    return []
  options = []
  for mechanism, make in edit_catalogue or catalogue(domain_name):
    for blocks, hypothesis, prompt_safe in make(source, tree):
      if blocks is None:
        continue
      result = patches.apply_proposal(source, blocks)
      if not result.ok or static_checks.check_harness(result.source, allowed_imports,
                                                      max_lines):
        continue
      options.append((mechanism, blocks, hypothesis, prompt_safe, result.source))
  return options


def mechanism_names():
  """Every mechanism name of the registered domains' catalogues, in registry order."""
  names = []
  for entries in registry.edit_catalogues():
    names.extend(name for name, _ in entries if name not in names)
  return tuple(names)


class EditLibraryProposer:
  """The edit library behind the proposer interface (see the module docstring).

  Args:
    seed: seeds the choice among applicable edits.
    mechanisms: optional subset of the catalogue's mechanism names (for every family the
      search may meet); only those are proposed. None = all.
    edit_catalogue: the domain's (Domain.edit_catalogue); None looks it up by the context's
      domain name in the registry.
  """

  def __init__(self, seed=0, mechanisms=None, edit_catalogue=None):
    self.seed = seed
    self.edit_catalogue = edit_catalogue
    self.name = PROPOSER_NAME
    if mechanisms is not None:
      edit_mechanisms.check(mechanisms)
    self.mechanisms = None if mechanisms is None else tuple(mechanisms)

  def propose(self, context, n):
    incumbent = context.incumbent
    options = edit_options(incumbent.source, context.domain_name, context.allowed_imports,
                           context.max_lines, self.edit_catalogue)
    if self.mechanisms is not None:
      options = [option for option in options if option[0] in self.mechanisms]
    seen = set(context.known_hashes)
    usable = []
    for option in options:
      mechanism, blocks, hypothesis, prompt_safe, new_source = option
      new_hash = program.content_hash(new_source)
      if new_hash in seen:
        continue
      if context.prompt_only and (not prompt_safe or prompt_only.check_prompt_only(
          incumbent.source, new_source) is not None):
        continue
      if edit_scope.check_scope(context.edit_scope, incumbent.source, new_source):
        continue
      seen.add(new_hash)
      usable.append(option)
    rng = random.Random(seeds_lib.derive_seed(self.seed, "edit_choice", *context.call_site,
                                              incumbent.hash))
    rng.shuffle(usable)
    recent = list(context.recent_mechanisms)
    mechanisms = []
    for option in usable:
      if option[0] not in mechanisms:
        mechanisms.append(option[0])
    last_used = {mechanism: index for index, mechanism in enumerate(recent)}
    mechanisms.sort(key=lambda m: (m in last_used, last_used.get(m, 0)))
    queues = {m: [o for o in usable if o[0] == m] for m in mechanisms}
    chosen = []
    while len(chosen) < n and any(queues.values()):
      for mechanism in mechanisms:
        if queues[mechanism] and len(chosen) < n:
          chosen.append(queues[mechanism].pop(0))
    return [proposal_lib.Proposal(
        kind="patch", text=blocks, hypothesis=hypothesis,
        raw_output=proposal_lib.format_reply(hypothesis, blocks), proposer=self.name,
        mechanism=mechanism) for mechanism, blocks, hypothesis, _, _ in chosen]
