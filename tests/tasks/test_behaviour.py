"""Shared behaviour metrics on hand-built trajectories."""
import pytest

from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.tasks import behaviour


def completion(text, finish_reason="stop", num_tokens=3):
  return trajectory_lib.RecordedCompletion(token_ids=[1] * num_tokens,
                                           logprobs=[-1.0] * num_tokens, text=text,
                                           finish_reason=finish_reason)


def call(*completions):
  return trajectory_lib.LLMCall(method="chat", messages=[], prompt=None, prompt_token_ids=[1],
                                sampling={}, completions=list(completions), started_seconds=0.0,
                                duration_seconds=0.0)


def tool(name, error=""):
  return trajectory_lib.ToolEvent(name=name, arguments={}, result="r", error=error,
                                  started_seconds=0.0, duration_seconds=0.0)


TRAJECTORIES = [
    trajectory_lib.Trajectory("e0", "t0", "h", "ok", answer="<answer>x</answer>",
                              calls=[call(completion("a")), call(completion("b"))],
                              tool_events=[tool("search"), tool("search", error="boom")]),
    trajectory_lib.Trajectory("e1", "t1", "h", "ok", answer="no tag",
                              calls=[call(completion("c", "length", num_tokens=5))]),
    trajectory_lib.Trajectory("e2", "t2", "h", "timeout", answer=None, calls=[]),
]


def test_episode_metrics_by_hand():
  metrics = behaviour.episode_metrics(TRAJECTORIES, [1.0, 0.0, 0.0],
                                      lambda answer: answer is not None and "<answer>" in answer)
  assert metrics == {
      "num_episodes": 3.0, "success_rate": pytest.approx(1 / 3),
      "answer_format_rate": pytest.approx(1 / 3), "tool_use_rate": pytest.approx(1 / 3),
      "tool_calls_per_episode": pytest.approx(2 / 3), "tool_error_rate": 0.5,
      "token_limit_rate": pytest.approx(1 / 3), "mean_turns": 1.0,
      "mean_completion_tokens": pytest.approx(11 / 3), "ok_rate": pytest.approx(2 / 3),
      "harness_error_rate": 0.0, "timeout_rate": pytest.approx(1 / 3), "infra_error_rate": 0.0}


def test_helpers():
  assert behaviour.completion_texts(TRAJECTORIES[0]) == ["a", "b"]
  assert [e.error for e in behaviour.tool_events(TRAJECTORIES[0], "search")] == ["", "boom"]
  assert behaviour.hit_token_limit(TRAJECTORIES[1]) and not behaviour.hit_token_limit(
      TRAJECTORIES[0])


def test_mismatched_lengths_are_refused():
  with pytest.raises(ValueError, match="one score per trajectory"):
    behaviour.episode_metrics(TRAJECTORIES, [1.0], lambda answer: True)
