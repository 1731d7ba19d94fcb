"""Trajectory records: token counts, outcome validation, JSONL round trip."""
import json

import pytest

from whale_jax.harness import trajectory as trajectory_lib


def make_trajectory():
  completion = trajectory_lib.RecordedCompletion(token_ids=[5, 6, 260], logprobs=[-0.5, -1.0, -0.25],
                                                 text="hi<|im_end|>", finish_reason="stop")
  call = trajectory_lib.LLMCall(
      method="chat", messages=[{"role": "user", "content": "héllo"}], prompt=None,
      prompt_token_ids=[1, 2, 3, 4], sampling={"max_tokens": 8, "stop": ["\n"], "seed": 3},
      completions=[completion, completion], started_seconds=0.001, duration_seconds=0.25)
  event = trajectory_lib.ToolEvent(name="search", arguments={"query": "q", "topk": 2},
                                   result="Doc 1 (Title: \"T\") text", error="",
                                   started_seconds=0.3, duration_seconds=0.01)
  return trajectory_lib.Trajectory(
      episode_id="task-1#0", task_id="task-1", harness_hash="0123456789abcdef", outcome="ok",
      answer="Paris", calls=[call], tool_events=[event], stdout="log\n", wall_seconds=0.5,
      sandbox_seconds=0.2)


def test_token_counts_sum_over_calls_and_samples():
  trajectory = make_trajectory()
  assert trajectory.num_prompt_tokens == 4
  assert trajectory.num_completion_tokens == 6  # two samples of three tokens
  assert trajectory.num_turns == 1


def test_jsonl_round_trip_is_exact(tmp_path):
  trajectories = [make_trajectory(),
                  trajectory_lib.Trajectory("e2", "t2", "ffff", "timeout", error="killed")]
  path = tmp_path / "trajectories.jsonl"
  trajectory_lib.write_jsonl(path, trajectories)
  assert trajectory_lib.read_jsonl(path) == trajectories
  first_row = json.loads(path.read_text().splitlines()[0])
  assert (first_row["num_prompt_tokens"], first_row["num_completion_tokens"]) == (4, 6)


def test_unknown_outcome_is_refused():
  with pytest.raises(ValueError, match="expected one of"):
    trajectory_lib.Trajectory("e", "t", "h", "crashed")
