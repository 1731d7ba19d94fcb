"""The proposer context: within its token budget whatever the archive holds."""
import hashlib
import math

import pytest

from whale_jax.harness import Harness
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import collector
from whale_jax.search import archive as archive_lib
from whale_jax.search import context as context_lib
from whale_jax.tasks import seed_harnesses
from whale_jax.tokenization import load_tokenizer

SEED = seed_harnesses.source("searchqa")
HUGE = 200_000   # characters; any budget below holds far less
DESCRIPTION = "Task: answer questions. run must return <answer>...</answer>."


def _trajectory(task_id, size, marker):
  text = marker + " " + "x" * size
  call = trajectory_lib.LLMCall(
      method="chat", messages=[{"role": "system", "content": text},
                               {"role": "user", "content": text}],
      prompt=None, prompt_token_ids=[1], sampling={"n": 1},
      completions=[trajectory_lib.RecordedCompletion([2], [-1.0], text, "stop")],
      started_seconds=0.0, duration_seconds=0.0)
  event = trajectory_lib.ToolEvent("search", {"query": text}, text, "", 0.0, 0.0)
  return trajectory_lib.Trajectory(f"{task_id}#0", task_id, "h", "ok", answer=text,
                                   error=text, calls=[call, call], tool_events=[event] * 3)


def _archive(directory, size=HUGE, num_candidates=4):
  archive = archive_lib.Archive(directory)
  ids = [f"t{i}" for i in range(6)]
  for index in range(num_candidates):
    source = SEED if index == 0 else SEED.replace("TOPK = 1", f"TOPK = {index + 1}")
    scores = [float((i + index) % 2) for i in range(len(ids))]
    trajectories = [_trajectory(task_id, size, f"MARK-{index}-{task_id}") for task_id in ids]
    result = collector.Evaluation(tuple(ids), tuple(range(6)), tuple(scores),
                                  tuple(trajectories), rollouts=6)
    archive.add(archive_lib.Candidate(
        id=archive.next_id(), iteration=1 if index == 0 else 2, index=max(index - 1, 0),
        hash=Harness(source).hash, parent=None if index == 0 else "c0000",
        origin="incoming" if index == 0 else "patch", status="evaluated",
        mechanism="" if index == 0 else "retrieval_topk", hypothesis="h" * size),
        source=source, evaluation=result)
  archive.add(archive_lib.Candidate(
      id=archive.next_id(), iteration=2, index=3, hash=None, parent="c0000", origin="patch",
      status="rejected", reasons=[{"code": "not_found", "message": "m" * size}],
      apply_report="r" * size), raw_output="z" * size)
  return archive


def _independent_count(messages, tokenizer):
  per_message = [len(tokenizer.encode(m["content"])) if tokenizer else
                 math.ceil(len(m["content"]) / 4) for m in messages]
  return sum(per_message) + context_lib.MESSAGE_OVERHEAD_TOKENS * len(messages)


# (tokenizer, budget, size): "small" holds little beyond the required parts, "cut" must cut
# the failing episodes, "all" holds everything (each episode is rendered compactly).
BUDGETS = [(None, 2_500, "small"), (None, 6_000, "cut"), (None, 30_000, "all"),
           ("byte", 7_000, "small"), ("byte", 12_000, "cut"), ("byte", 60_000, "all")]


@pytest.fixture(scope="module")
def huge_archive(tmp_path_factory):
  return _archive(tmp_path_factory.mktemp("archive"))


@pytest.mark.parametrize("tokenizer_name,budget,size", BUDGETS)
def test_context_never_exceeds_its_budget_with_huge_traces(huge_archive, tokenizer_name,
                                                           budget, size):
  tokenizer = load_tokenizer(tokenizer_name) if tokenizer_name else None
  context = context_lib.build_context(huge_archive, "c0000", "synthetic_qa", DESCRIPTION, 2,
                                      budget, tokenizer=tokenizer)
  assert _independent_count(context.messages, tokenizer) == context.num_tokens <= budget
  assert "TOPK = 1" in context.text and DESCRIPTION in context.text
  if size == "cut":
    assert "Failing episodes" in context.text and "[... cut]" in context.text
    assert context.num_tokens > 0.95 * budget        # the budget is used, not left empty
  if size == "all":
    assert "[... cut]" not in context.text
    assert "MARK-0-t0" in context.text            # a failing episode of the incumbent
    assert "MARK-0-t3" in context.text            # a succeeding one (rotated by iteration)
    assert "+TOPK = 3" in context.text             # a better candidate's diff


def test_a_budget_too_small_for_the_required_parts_says_what_is_needed(tmp_path):
  archive = _archive(tmp_path, size=10)
  with pytest.raises(ValueError, match="raise context_budget_tokens to at least"):
    context_lib.build_context(archive, "c0000", "synthetic_qa", DESCRIPTION, 2, 500)


def test_instructions_are_versioned_and_hashed(tmp_path):
  archive = _archive(tmp_path, size=10)
  context = context_lib.build_context(archive, "c0000", "synthetic_qa", DESCRIPTION, 2, 20_000)
  system = context.messages[0]["content"]
  assert context.instruction_hash == hashlib.sha256(system.encode()).hexdigest()[:16]
  assert context.instruction_version == context_lib.INSTRUCTIONS_VERSION
  for rule in ("One mechanism per candidate", "no hard-coded answers", "Never touch the verifier"):
    assert rule in system
  prompt_only = context_lib.build_context(archive, "c0000", "synthetic_qa", DESCRIPTION, 2,
                                          20_000, prompt_only=True)
  assert "SYSTEM_PROMPT, USER_PROMPT_TEMPLATE" in prompt_only.messages[0]["content"]
  assert prompt_only.instruction_hash != context.instruction_hash


def test_context_lists_scores_reports_and_archive_facts(tmp_path):
  archive = _archive(tmp_path, size=10)
  context = context_lib.build_context(archive, "c0000", "synthetic_qa", DESCRIPTION, 3, 20_000)
  assert "c0004 (iteration 2, patch): rejected" in context.text
  assert "[not_found]" in context.text
  assert "c0001 | c0000 | 0.500" in context.text
  assert context.known_hashes == archive.known_hashes()
  assert context.recent_mechanisms == ("retrieval_topk",) * 3
  assert context.incumbent.source == SEED


def test_render_episode_is_compact():
  text = context_lib.render_episode(_trajectory("t0", HUGE, "MARK"), 0.0)
  assert len(text) <= context_lib.MAX_EPISODE_CHARS + 100
  assert text.startswith("### task t0: score 0, outcome ok, 2 llm call(s)")


def test_episodes_passed_in_replace_the_archived_ones(tmp_path):
  archive = _archive(tmp_path, size=10)
  episodes = [(_trajectory("rl7", 10, "FROM-THE-RL-BLOCK"), 0.0)]
  context = context_lib.build_context(archive, "c0000", "synthetic_qa", DESCRIPTION, 2, 20_000,
                                      episodes=episodes)
  assert "FROM-THE-RL-BLOCK" in context.text and "MARK-0-" not in context.text
