"""Behaviour metrics over episodes, shared by every domain.

  metrics = episode_metrics(trajectories, scores, answer_format_ok=has_answer_tag)

success_rate          mean verifier score
answer_format_rate    episodes whose returned answer has the domain's answer format
tool_use_rate         episodes that called at least one tool
tool_calls_per_episode, tool_error_rate (tool calls that raised)
token_limit_rate      episodes with a model call cut off by max_tokens (finish "length")
mean_turns            model calls per episode; mean_completion_tokens likewise
<outcome>_rate        ok, harness_error, timeout and infra_error episodes
Domains add their own (retrieval_accuracy for SearchQA, legal_move_rate for chess).
"""
from whale_jax.harness import trajectory as trajectory_lib


def _mean(values):
  values = list(values)
  return sum(values) / len(values) if values else 0.0


def completion_texts(trajectory):
  """The text of every sample the model produced in an episode, in call order."""
  return [completion.text for call in trajectory.calls for completion in call.completions]


def tool_events(trajectory, name):
  """The episode's calls of one tool, in order."""
  return [event for event in trajectory.tool_events if event.name == name]


def hit_token_limit(trajectory):
  return any(completion.finish_reason == "length"
             for call in trajectory.calls for completion in call.completions)


def episode_metrics(trajectories, scores, answer_format_ok):
  """The shared metrics (module docstring) for parallel lists of trajectories and scores.

  Args:
    answer_format_ok: answer (str or None) -> bool, the domain's format check.
  """
  if len(trajectories) != len(scores):
    raise ValueError(f"episode_metrics got {len(trajectories)} trajectories but "
                     f"{len(scores)} scores; pass one score per trajectory.")
  num_tool_calls = sum(len(t.tool_events) for t in trajectories)
  metrics = {
      "num_episodes": float(len(trajectories)),
      "success_rate": _mean(scores),
      "answer_format_rate": _mean(bool(answer_format_ok(t.answer)) for t in trajectories),
      "tool_use_rate": _mean(bool(t.tool_events) for t in trajectories),
      "tool_calls_per_episode": _mean(len(t.tool_events) for t in trajectories),
      "tool_error_rate": (sum(bool(e.error) for t in trajectories for e in t.tool_events) /
                          num_tool_calls if num_tool_calls else 0.0),
      "token_limit_rate": _mean(hit_token_limit(t) for t in trajectories),
      "mean_turns": _mean(t.num_turns for t in trajectories),
      "mean_completion_tokens": _mean(t.num_completion_tokens for t in trajectories),
  }
  for outcome in trajectory_lib.OUTCOMES:
    metrics[f"{outcome}_rate"] = _mean(t.outcome == outcome for t in trajectories)
  return metrics
