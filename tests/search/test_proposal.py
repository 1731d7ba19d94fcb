"""Parsing proposer replies: hypothesis, kind, blocks or program, thinking dropped."""
from whale_jax.harness import patches
from whale_jax.search import proposal as proposal_lib

BLOCK = "<<<<<<< SEARCH\nTOPK = 1\n=======\nTOPK = 3\n>>>>>>> REPLACE\n"
PROGRAM = "def run(task, llm, tools):\n  return 'x'\n"


def test_a_reply_with_blocks_is_a_patch_with_its_hypothesis():
  reply = f"HYPOTHESIS: More passages help.\n{BLOCK}"
  proposal = proposal_lib.parse_reply(reply, "model", prompt_tokens=10, completion_tokens=4)
  assert proposal.kind == "patch" and proposal.hypothesis == "More passages help."
  assert proposal.raw_output == reply and (proposal.prompt_tokens, proposal.completion_tokens) == (10, 4)
  assert patches.apply_proposal("TOPK = 1\n", proposal.text).source == "TOPK = 3\n"
  assert "HYPOTHESIS" not in proposal.text


def test_a_fenced_program_is_a_program_proposal():
  reply = f"**Hypothesis:** answer directly.\n```python\n{PROGRAM}```\n"
  proposal = proposal_lib.parse_reply(reply)
  assert proposal.kind == "program" and proposal.text == PROGRAM
  assert proposal.hypothesis == "answer directly."


def test_thinking_is_dropped_before_parsing():
  reply = ("<think>HYPOTHESIS: wrong idea\n<<<<<<< SEARCH\nnothing\n</think>"
           f"HYPOTHESIS: right idea\n{BLOCK}")
  proposal = proposal_lib.parse_reply(reply)
  assert proposal.hypothesis == "right idea"
  assert patches.parse_blocks(proposal.text)[0].search == "TOPK = 1\n"


def test_a_reply_with_neither_is_a_patch_that_applies_nothing():
  proposal = proposal_lib.parse_reply("I think the harness is fine.")
  assert proposal.kind == "patch" and proposal.hypothesis == ""
  assert patches.apply_proposal(PROGRAM, proposal.text).kind == "none"


def test_format_reply_round_trips_through_parse_reply():
  reply = proposal_lib.format_reply("Three   passages\nhelp.", BLOCK)
  assert reply.splitlines()[0] == "HYPOTHESIS: Three passages help."
  parsed = proposal_lib.parse_reply(reply)
  assert parsed.hypothesis == "Three passages help." and parsed.text.strip() == BLOCK.strip()
  assert proposal_lib.Proposal.from_json(parsed.to_json()) == parsed
