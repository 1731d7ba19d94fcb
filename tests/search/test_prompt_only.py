"""The FST prompt-only check: only the prompt strings' text may change."""
from whale_jax.search import prompt_only
from whale_jax.tasks import seed_harnesses

SEED = seed_harnesses.source("searchqa")
SYSTEM = 'SYSTEM_PROMPT = "Answer factual questions using search when needed."\n'


def test_seed_prompt_names():
  assert prompt_only.prompt_names(SEED) == ["SYSTEM_PROMPT", "USER_PROMPT_TEMPLATE"]
  assert prompt_only.prompt_names(seed_harnesses.source("chess")) == ["SYSTEM_PROMPT",
                                                                        "USER_PROMPT"]


def test_changing_prompt_text_and_docstrings_is_allowed():
  candidate = SEED.replace(SYSTEM, 'SYSTEM_PROMPT = ("Search, then answer. "\n'
                           '                 "Be brief.")\n')
  candidate = candidate.replace("SearchQA seed harness", "A rewritten docstring")
  assert prompt_only.check_prompt_only(SEED, candidate) is None


def test_changing_code_is_refused_with_what_may_change():
  problem = prompt_only.check_prompt_only(SEED, SEED.replace("TOPK = 1\n", "TOPK = 3\n"))
  assert problem is not None and "SYSTEM_PROMPT, USER_PROMPT_TEMPLATE" in problem
  appended = SEED + "\nEXTRA_PROMPT = 'x'\n"   # a new prompt constant is new code
  assert prompt_only.check_prompt_only(SEED, appended) is not None


def test_a_prompt_must_stay_a_string_literal():
  candidate = SEED.replace(SYSTEM, "SYSTEM_PROMPT = TOOL_CALL.pattern\n")
  assert "string literal" in prompt_only.check_prompt_only(SEED, candidate)


def test_a_candidate_that_does_not_parse_is_refused():
  assert "SyntaxError" in prompt_only.check_prompt_only(SEED, SEED + "\ndef (:\n")
