"""The edit library: anchored, applicable, deterministic edits that change what episodes do."""
import ast
import re

import pytest

from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.harness import patches
from whale_jax.harness import static_checks
from whale_jax.sampling import SamplingParams
from whale_jax.search import context as context_lib
from whale_jax.search import edit_library
from whale_jax.search import edit_mechanisms
from whale_jax.search import prompt_only
from whale_jax.search import proposal as proposal_lib
from whale_jax.tasks import seed_harnesses
from whale_jax.tokenization import load_tokenizer

SEEDS = {"synthetic_qa": "searchqa", "math": "math", "chess": "chess",
         "reasoning_gym:chain_sum": "reasoning_gym"}
EXPECTED_MECHANISMS = {
    "synthetic_qa": {"turn_budget", "retrieval_topk", "passage_length", "query_rewrite",
                     "retrieve_first", "format_reminder", "user_prompt", "verify_then_retry"},
    "math": {"turn_budget", "format_reminder", "interpreter_feedback", "nudge", "voting",
             "verify_then_retry"},
    "chess": {"board_presentation", "format_retry_budget", "illegal_move_retry_budget",
              "format_reminder"},
    "reasoning_gym:chain_sum": {"format_reminder", "think_then_answer", "voting"},
}
SMALL_SPLITS = {"weight": 2, "harness": 2, "validation": 2, "test": 2}


def _context(source, domain_name="synthetic_qa", iteration=2, known=(), recent=(),
             prompt_only_mode=False, session=""):
  return context_lib.ProposerContext(
      domain_name=domain_name, incumbent=Harness(source), incumbent_id="c0000",
      iteration=iteration, messages=({"role": "user", "content": ""},), num_tokens=0,
      budget_tokens=0, instruction_version="", instruction_hash="",
      known_hashes=frozenset(known), recent_mechanisms=tuple(recent),
      prompt_only=prompt_only_mode, session=session)


def _constant(source, name):
  for node in ast.parse(source).body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
      return ast.literal_eval(node.value)
  return None


@pytest.mark.parametrize("domain_name", sorted(SEEDS))
def test_every_edit_applies_to_its_seed_and_passes_static_checks(domain_name):
  source = seed_harnesses.source(SEEDS[domain_name])
  options = edit_library.edit_options(source, domain_name)
  assert {option[0] for option in options} == EXPECTED_MECHANISMS[domain_name]
  for mechanism, blocks, hypothesis, _, new_source in options:
    result = patches.apply_proposal(source, blocks)
    assert result.ok and result.source == new_source, mechanism
    assert all(report.match == "exact" for report in result.reports), mechanism
    assert static_checks.check_harness(new_source) == [], mechanism
    assert hypothesis.strip()
  assert len({option[4] for option in options}) == len(options)   # no two edits coincide


def test_constant_edits_set_the_constant_and_nothing_else():
  source = seed_harnesses.source("searchqa")
  options = edit_library.edit_options(source, "synthetic_qa")
  topks = sorted(_constant(o[4], "TOPK") for o in options if o[0] == "retrieval_topk")
  assert topks == [2, 3, 5]
  for option in options:
    if option[0] == "retrieval_topk":
      assert option[4].replace(f"TOPK = {_constant(option[4], 'TOPK')}\n", "TOPK = 1\n") == source


def test_integer_edits_go_the_way_their_hypothesis_argues_until_no_value_is_left_there():
  source = seed_harnesses.source("searchqa")
  assert _constant(source, "MAX_TURNS") == 2

  def turns(source):
    return sorted(_constant(o[4], "MAX_TURNS") for o in
                  edit_library.edit_options(source, "synthetic_qa") if o[0] == "turn_budget")

  assert turns(source) == [3, 4, 6]  # the catalogue's 1, 3, 4, 6: not 1 while more is left
  assert turns(source.replace("MAX_TURNS = 2\n", "MAX_TURNS = 4\n")) == [6]
  assert turns(source.replace("MAX_TURNS = 2\n", "MAX_TURNS = 6\n")) == [1, 3, 4]
  assert turns(source.replace("MAX_TURNS = 2\n", "MAX_TURNS = 20\n")) == [1, 3, 4, 6]


def test_an_edit_whose_anchor_is_absent_is_not_proposed():
  source = seed_harnesses.source("searchqa")
  without_topk = source.replace("TOPK = 1\n", "").replace("topk=TOPK", "topk=1")
  mechanisms = {o[0] for o in edit_library.edit_options(without_topk, "synthetic_qa")}
  assert "retrieval_topk" not in mechanisms and "retrieve_first" not in mechanisms
  assert "turn_budget" in mechanisms
  bare = "def run(task, llm, tools):\n  return llm.chat([{'role': 'user', 'content': 'hi'}])\n"
  assert edit_library.edit_options(bare, "synthetic_qa") == []
  assert edit_library.edit_options("def run(:\n", "synthetic_qa") == []


def test_edits_keep_applying_after_earlier_edits():
  source = seed_harnesses.source("searchqa")
  for mechanism in ("retrieval_topk", "query_rewrite", "format_reminder", "verify_then_retry"):
    option = next(o for o in edit_library.edit_options(source, "synthetic_qa")
                  if o[0] == mechanism)
    source = option[4]
  remaining = {o[0] for o in edit_library.edit_options(source, "synthetic_qa")}
  assert {"turn_budget", "passage_length", "retrieve_first", "retrieval_topk"} <= remaining
  assert "query_rewrite" not in remaining and "verify_then_retry" not in remaining


def test_proposals_are_deterministic_and_distinct_mechanisms_come_first():
  source = seed_harnesses.source("searchqa")
  first = edit_library.EditLibraryProposer(seed=7).propose(_context(source), 4)
  again = edit_library.EditLibraryProposer(seed=7).propose(_context(source), 4)
  assert first == again
  assert len({p.mechanism for p in first}) == 4
  orders = {tuple(p.mechanism for p in edit_library.EditLibraryProposer(seed).propose(
      _context(source), 4)) for seed in range(6)}
  assert len(orders) > 1
  for proposal in first:
    assert proposal.kind == "patch" and proposal.proposer == "edit_library"
    assert proposal_lib.parse_reply(proposal.raw_output).text.strip() == proposal.text.strip()
    assert proposal_lib.parse_reply(proposal.raw_output).hypothesis == proposal.hypothesis


def test_each_search_session_draws_its_own_proposals_from_the_same_harness():
  # WHALE runs one search per harness phase, each from the incumbent at iteration 2: a phase
  # whose incumbent did not change must not repeat the last phase's candidates.
  source = seed_harnesses.source("searchqa")
  proposer = edit_library.EditLibraryProposer(seed=1, mechanisms=("turn_budget",))
  turns = {}
  for cycle in range(8):
    session = f"cycle_{cycle:03d}"
    first = proposer.propose(_context(source, session=session), 1)
    assert first == proposer.propose(_context(source, session=session), 1)  # reproducible
    turns[session] = _constant(patches.apply_proposal(source, first[0].text).source,
                               "MAX_TURNS")
  options = {_constant(o[4], "MAX_TURNS") for o in edit_library.edit_options(source,
                                                                            "synthetic_qa")
             if o[0] == "turn_budget"}
  assert len(options) >= 3
  # 8 draws of one option among >= 3: all equal has probability <= 3 * (1/3)**8 < 1e-3.
  assert set(turns.values()) <= options and len(set(turns.values())) >= 2


def test_known_results_and_recent_mechanisms_are_avoided():
  source = seed_harnesses.source("searchqa")
  options = edit_library.edit_options(source, "synthetic_qa")
  known = {Harness(o[4]).hash for o in options if o[0] != "verify_then_retry"}
  proposals = edit_library.EditLibraryProposer(seed=0).propose(_context(source, known=known), 3)
  assert [p.mechanism for p in proposals] == ["verify_then_retry"]
  all_but_two = [m for m in sorted(EXPECTED_MECHANISMS["synthetic_qa"])
                 if m not in ("passage_length", "user_prompt")]
  proposals = edit_library.EditLibraryProposer(seed=0).propose(
      _context(source, recent=all_but_two), 2)
  assert {p.mechanism for p in proposals} == {"passage_length", "user_prompt"}


def test_a_mechanism_subset_proposes_only_those_edits_and_names_a_typo():
  source = seed_harnesses.source("searchqa")
  subset = ("passage_length", "turn_budget")
  proposals = edit_library.EditLibraryProposer(seed=0, mechanisms=subset).propose(
      _context(source), 50)
  expected = [o for o in edit_library.edit_options(source, "synthetic_qa") if o[0] in subset]
  assert len(proposals) == len(expected) == 4  # MAX_DOC_TOKENS 400 (from 200); MAX_TURNS 3, 4, 6
  changed = set()
  for proposal in proposals:
    new_source = patches.apply_proposal(source, proposal.text).source
    changed |= {name for name in ("MAX_DOC_TOKENS", "MAX_TURNS", "TOPK", "SYSTEM_PROMPT")
                if _constant(new_source, name) != _constant(source, name)}
    assert new_source.count("def run(") == 1 and "tools.search(task" not in new_source
  assert changed == {"MAX_DOC_TOKENS", "MAX_TURNS"}
  assert edit_mechanisms.NAMES == edit_library.mechanism_names()
  with pytest.raises(ValueError, match=r"config.search.mechanisms names 'passage_lenght'"):
    edit_library.EditLibraryProposer(mechanisms=("passage_lenght",))
  with pytest.raises(ValueError, match="non-empty list"):
    edit_library.EditLibraryProposer(mechanisms="turn_budget")


@pytest.mark.parametrize("domain_name", sorted(SEEDS))
def test_prompt_only_proposals_change_only_prompt_strings(domain_name):
  source = seed_harnesses.source(SEEDS[domain_name])
  proposals = edit_library.EditLibraryProposer(seed=0).propose(
      _context(source, domain_name, prompt_only_mode=True), 20)
  assert proposals
  for proposal in proposals:
    new_source = patches.apply_proposal(source, proposal.text).source
    assert prompt_only.check_prompt_only(source, new_source) is None


def test_unknown_domain_is_refused_with_the_known_ones():
  with pytest.raises(ValueError, match="synthetic_qa"):
    edit_library.catalogue("webshop")


def test_the_catalogue_is_the_domains_and_found_by_name_without_building_it():
  domain = tasks.get_domain("chess", split_sizes={"weight": 0, "harness": 1, "validation": 1,
                                                   "test": 1})
  assert domain.edit_catalogue and edit_library.catalogue("chess") is domain.edit_catalogue
  assert edit_library.catalogue("searchqa") is edit_library.catalogue("synthetic_qa")
  source = seed_harnesses.source("chess")
  assert (edit_library.edit_options(source, "unregistered", edit_catalogue=domain.edit_catalogue)
          == edit_library.edit_options(source, "chess"))


# ---- Edits change what episodes do ------------------------------------------------------


def _qa_search_forever(prompt):
  return '<tool_call><function=search><parameter=query_list>["Talvek"]</parameter></function></tool_call>'


def _math_model(code):
  def reply(prompt):
    if "State only the final answer" in prompt:
      return "\\boxed{3}"
    if code is None:
      return "I believe the answer is 3."
    return f"<tool_call><function=code_interpreter><parameter=code>{code}</parameter></function></tool_call>"
  return reply


def _chess_model(move):
  def reply(prompt):
    if move == "first_legal":
      listed = re.findall(r"\[([a-h][1-8][a-h][1-8][qrbn]?)\]", prompt)
      compact = re.findall(r"Legal moves:\n([a-h][1-8][a-h][1-8][qrbn]?)", prompt)
      return f"<move>{(listed or compact)[0]}</move>"
    return move
  return reply


BEHAVIOURS = {
    "synthetic_qa": [_qa_search_forever],
    "math": [_math_model("pass"), _math_model("1/0"), _math_model(None)],
    "chess": [_chess_model("first_legal"), _chess_model("no move here"),
              _chess_model("<move>a1a1</move>")],
    "reasoning_gym:chain_sum": [lambda prompt: "7"],
}


def _signature(trajectory):
  """What an episode did that a harness edit can change."""
  calls = [(repr(call.messages), call.prompt, call.sampling["n"]) for call in trajectory.calls]
  events = [(event.name, repr(event.arguments)) for event in trajectory.tool_events]
  return calls, events, trajectory.answer


@pytest.mark.parametrize("domain_name", [
    "synthetic_qa", "reasoning_gym:chain_sum",
    "chess", pytest.param("math", marks=pytest.mark.slow)])
def test_every_edit_changes_what_an_episode_does(domain_name):
  domain = tasks.get_domain(domain_name, split_sizes=SMALL_SPLITS)
  instance = domain.splits()["harness"][0]
  seed = Harness(seed_harnesses.source(SEEDS[domain_name]))
  options = edit_library.edit_options(seed.source, domain_name)
  tokenizer = load_tokenizer("byte")
  changed = set()
  for behaviour in BEHAVIOURS[domain_name]:
    backend = ScriptedBackend(tokenizer, behaviour)
    with HarnessRuntime(backend, tokenizer, num_workers=2, timeout_seconds=30) as runtime:
      harnesses = [seed] + [Harness(o[4]) for o in options]
      futures = [runtime.submit(h, tasks.make_episode(domain, instance,
                                                      SamplingParams(max_tokens=256, seed=1)))
                 for h in harnesses]
      trajectories = [future.result() for future in futures]
    assert [t.outcome for t in trajectories] == ["ok"] * len(harnesses), [
        t.error for t in trajectories if not t.ok]
    reference = _signature(trajectories[0])
    changed |= {i for i, t in enumerate(trajectories[1:]) if _signature(t) != reference}
  unchanged = [options[i][0] for i in range(len(options)) if i not in changed]
  assert unchanged == []
