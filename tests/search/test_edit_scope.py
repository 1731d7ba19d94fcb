"""VACE's harness-edit scope, "skills and execution guidance": constants' values only."""
import pytest

from whale_jax.harness import patches
from whale_jax.harness.program import Harness
from whale_jax.search import candidate_check
from whale_jax.search import context as context_lib
from whale_jax.search import edit_library
from whale_jax.search import edit_scope
from whale_jax.search.proposal import Proposal

SEED = '''"""A tiny harness."""
import re

SYSTEM_PROMPT = "Answer with <answer> answer</answer>."
MAX_TURNS = 2
STOP_WORDS = ("a", "the")


def run(task, llm, tools):
  """Asks, then returns the reply."""
  reply = ""
  for _ in range(MAX_TURNS):
    reply = llm.chat([{"role": "system", "content": SYSTEM_PROMPT},
                      {"role": "user", "content": task["question"]}])
  return reply
'''


@pytest.mark.parametrize("old, new", [
    ("MAX_TURNS = 2", "MAX_TURNS = 6"),                                     # execution rule
    ('SYSTEM_PROMPT = "Answer', 'SYSTEM_PROMPT = "Skill: search first. Answer'),  # guidance
    ('STOP_WORDS = ("a", "the")', 'STOP_WORDS = ("a", "an", "the")'),      # a literal tuple
    ('"""A tiny harness."""', '"""A tiny harness, now with six turns."""'),  # a docstring
])
def test_guidance_scope_allows_new_values_of_constants(old, new):
  assert edit_scope.check_scope("guidance", SEED, SEED.replace(old, new)) is None


@pytest.mark.parametrize("old, new", [
    ('  reply = ""\n', '  reply = tools.search(task["question"])\n'),        # calls a tool
    ("  return reply\n", "  return reply.strip()\n"),                         # the answer
    ("MAX_TURNS = 2", 'MAX_TURNS = int("6")'),                                # not a literal
    ("MAX_TURNS = 2\n", "MAX_TURNS = 2\nSKILL = 'Search first.'\n"),          # a new constant
    ("import re\n", "import re\nimport json\n"),                               # an import
])
def test_guidance_scope_refuses_code_changes(old, new):
  candidate = SEED.replace(old, new)
  assert candidate != SEED
  problem = edit_scope.check_scope("guidance", SEED, candidate)
  assert problem and "SYSTEM_PROMPT, MAX_TURNS, STOP_WORDS" in problem
  assert edit_scope.check_scope("any", SEED, candidate) is None


def test_an_out_of_scope_candidate_is_refused_like_a_failed_check():
  code = Proposal("patch", '<<<<<<< SEARCH\n  return reply\n=======\n  return reply[:10]\n'
                  '>>>>>>> REPLACE\n')
  refused = candidate_check.prepare_candidate(code, SEED, edit_scope="guidance")
  assert not refused.ok and [r["code"] for r in refused.reasons] == ["edit_scope"]
  assert candidate_check.prepare_candidate(code, SEED, edit_scope="any").ok
  turns = Proposal("patch", "<<<<<<< SEARCH\nMAX_TURNS = 2\n=======\nMAX_TURNS = 4\n"
                   ">>>>>>> REPLACE\n")
  assert candidate_check.prepare_candidate(turns, SEED, edit_scope="guidance").ok
  with pytest.raises(ValueError, match="use one of any, guidance"):
    edit_scope.check_scope("skills", SEED, SEED)


def test_the_edit_library_proposes_only_in_scope_edits_and_the_rule_is_in_the_prompt():
  from whale_jax.tasks import seed_harnesses
  source = seed_harnesses.source("searchqa_compact")

  def context(scope):
    return context_lib.ProposerContext(
        domain_name="synthetic_qa", incumbent=Harness(source), incumbent_id="c0000",
        iteration=2, messages=({"role": "user", "content": ""},), num_tokens=0,
        budget_tokens=0, instruction_version="", instruction_hash="", edit_scope=scope)

  proposer = edit_library.EditLibraryProposer(seed=0)
  free = {p.mechanism for p in proposer.propose(context("any"), 50)}
  scoped = proposer.propose(context("guidance"), 50)
  # Code edits (a retrieval before the first turn, the question as query, a retry turn)
  # are out of scope; numbers and prompt text are in.
  assert {"retrieve_first", "query_rewrite", "verify_then_retry"} <= free
  assert {p.mechanism for p in scoped} == free - {"retrieve_first", "query_rewrite",
                                                  "verify_then_retry"}
  for proposal in scoped:
    new_source = patches.apply_proposal(source, proposal.text).source
    assert edit_scope.check_scope("guidance", source, new_source) is None
  system = context_lib.instructions(constant_names=edit_scope.constant_names(source))
  assert "Skills and execution guidance only" in system and "MAX_TURNS" in system
