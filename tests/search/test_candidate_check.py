"""Applying and checking one proposal, as single-candidate recipes (VACE, Harness Learning) do."""
from whale_jax.search import candidate_check
from whale_jax.search.proposal import Proposal
from whale_jax.tasks import seed_harnesses

SEED = seed_harnesses.source("searchqa")


def _patch(search, replace):
  return Proposal("patch", f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n")


def test_a_valid_patch_is_ready_to_evaluate():
  prepared = candidate_check.prepare_candidate(_patch("TOPK = 1\n", "TOPK = 3\n"), SEED)
  assert prepared.ok and prepared.source == SEED.replace("TOPK = 1\n", "TOPK = 3\n")
  harness = prepared.harness(parent_hash="abc")
  assert (harness.parent, harness.origin) == ("abc", "patch")
  assert "applied (exact match)" in prepared.apply_report


def test_blocks_must_all_apply():
  proposal = Proposal("patch", _patch("TOPK = 1\n", "TOPK = 3\n").text +
                      _patch("NOT THERE\n", "x\n").text)
  prepared = candidate_check.prepare_candidate(proposal, SEED)
  assert not prepared.ok and prepared.source is None
  assert [r["code"] for r in prepared.reasons] == ["not_found"]
  assert "Block 2" in prepared.reasons[0]["message"]


def test_whole_programs_are_checked_statically():
  program = "import subprocess\n\ndef run(task, llm, tools):\n  return ''\n"
  prepared = candidate_check.prepare_candidate(Proposal("program", program), SEED)
  assert not prepared.ok and prepared.source == program
  assert [f["code"] for f in prepared.static_check] == ["import_not_allowed"]
  assert "subprocess" in prepared.reasons[0]["message"]


def test_prompt_only_reference_refuses_code_changes():
  proposal = _patch("TOPK = 1\n", "TOPK = 3\n")
  prepared = candidate_check.prepare_candidate(proposal, SEED, prompt_only_reference=SEED)
  assert [r["code"] for r in prepared.reasons] == ["prompt_only"]
  prompt = _patch('SYSTEM_PROMPT = "Answer factual questions using search when needed."\n',
                  'SYSTEM_PROMPT = "Search, then answer."\n')
  assert candidate_check.prepare_candidate(prompt, SEED, prompt_only_reference=SEED).ok
