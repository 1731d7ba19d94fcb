"""What one harness episode did: the model calls the host served, the tool calls, the outcome.

  trajectory.outcome              # "ok", "harness_error", "timeout" or "infra_error"
  trajectory.calls[i].prompt_token_ids, .completions[j].token_ids, .completions[j].logprobs
  write_jsonl(path, trajectories); read_jsonl(path) == trajectories

Outcomes:
  ok             run() returned a str.
  harness_error  the harness failed: an exception, a non-str or over-long answer, a syntax
                 error, sys.exit/os._exit, a crash of its process (e.g. a segfault from deep
                 recursion), a refused operation it did not catch, a broken protocol message, or
                 more llm/tools calls than allowed. MemoryError from the address-space limit
                 lands here too.
  timeout        the sandbox ran past its wall-clock time (time spent serving llm and tools
                 calls on the host does not count) or past its CPU-seconds limit.
  infra_error    the runtime failed for reasons not the harness's: the worker process died or
                 could not start, the LLM backend raised, a tool returned a non-JSON value, or
                 the runtime was closed. Not evidence against the harness.

Token ids are exactly what the backend returned; text is only a view of them.
"""
import dataclasses
import json
import os

OUTCOMES = ("ok", "harness_error", "timeout", "infra_error")


@dataclasses.dataclass
class RecordedCompletion:
  """One sample as the backend returned it (text is the backend's decoded view)."""
  token_ids: list[int]
  logprobs: list[float]
  text: str
  finish_reason: str


@dataclasses.dataclass
class LLMCall:
  """One llm.chat or llm.generate call, served by the host.

  Attributes:
    method: "chat" or "generate".
    messages: the chat messages (chat), else None.
    prompt: the raw prompt text (generate), else None.
    prompt_token_ids: the prompt as tokenized once on the host and sent to the backend.
    sampling: the SamplingParams used, as a dict.
    completions: what the backend returned, sampling["n"] of them.
    started_seconds: when the call reached the host, from the episode's start.
    duration_seconds: time the backend took.
  """
  method: str
  messages: list | None
  prompt: str | None
  prompt_token_ids: list[int]
  sampling: dict
  completions: list[RecordedCompletion]
  started_seconds: float
  duration_seconds: float


@dataclasses.dataclass
class ToolEvent:
  """One tools.<name>(...) call: its bound arguments and JSON result, or the error raised."""
  name: str
  arguments: dict
  result: object
  error: str
  started_seconds: float
  duration_seconds: float


@dataclasses.dataclass
class Trajectory:
  """One episode.

  Attributes:
    episode_id, task_id: the episode and the task instance it ran on.
    harness_hash: content hash of the harness that ran.
    outcome: one of OUTCOMES.
    answer: what run() returned (None unless outcome is "ok").
    error: why the episode did not end "ok" (a trimmed traceback for harness errors).
    calls: the llm calls, in order.
    tool_events: the tool calls, in order.
    stdout: what the harness printed (trimmed).
    wall_seconds: from dispatch to the end of the episode.
    sandbox_seconds: the part of wall_seconds not spent serving llm and tools calls.
  """
  episode_id: str
  task_id: str
  harness_hash: str
  outcome: str
  answer: str | None = None
  error: str = ""
  calls: list[LLMCall] = dataclasses.field(default_factory=list)
  tool_events: list[ToolEvent] = dataclasses.field(default_factory=list)
  stdout: str = ""
  wall_seconds: float = 0.0
  sandbox_seconds: float = 0.0

  def __post_init__(self):
    if self.outcome not in OUTCOMES:
      raise ValueError(f"Trajectory.outcome={self.outcome!r}; expected one of {OUTCOMES}.")

  @property
  def ok(self):
    return self.outcome == "ok"

  @property
  def num_prompt_tokens(self):
    return sum(len(call.prompt_token_ids) for call in self.calls)

  @property
  def num_completion_tokens(self):
    return sum(len(c.token_ids) for call in self.calls for c in call.completions)

  @property
  def num_turns(self):
    """Model calls made, the WHALE paper's turn count."""
    return len(self.calls)

  def to_json(self):
    """A JSON-serializable dict (token counts included, for readers of the JSONL)."""
    data = dataclasses.asdict(self)
    data.update(num_prompt_tokens=self.num_prompt_tokens,
                num_completion_tokens=self.num_completion_tokens)
    return data

  @classmethod
  def from_json(cls, data):
    fields = {field.name for field in dataclasses.fields(cls)}
    values = {name: value for name, value in data.items() if name in fields}
    values["calls"] = [
        LLMCall(**{**call, "completions": [RecordedCompletion(**c) for c in call["completions"]]})
        for call in values.get("calls", [])]
    values["tool_events"] = [ToolEvent(**event) for event in values.get("tool_events", [])]
    return cls(**values)


def write_jsonl(path, trajectories):
  """Writes one JSON line per trajectory (overwriting path)."""
  with open(os.fspath(path), "w", encoding="utf-8") as file:
    for trajectory in trajectories:
      file.write(json.dumps(trajectory.to_json()) + "\n")


def read_jsonl(path):
  with open(os.fspath(path), encoding="utf-8") as file:
    return [Trajectory.from_json(json.loads(line)) for line in file if line.strip()]
