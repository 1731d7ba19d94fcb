"""What one harness episode did: the model calls the host served, the tool calls, the outcome.

  trajectory.outcome              # "ok", "harness_error", "timeout" or "infra_error"
  trajectory.calls[i].prompt_token_ids, .completions[j].token_ids, .completions[j].logprobs
  write_jsonl(path, trajectories); read_jsonl(path) == trajectories
  write_records(path, [{"score": 1.0, "trajectory": trajectory}])   # a trajectory with fields
  read_records(path)[0]["trajectory"] == trajectory
  write_records(shard_path(path, host, num_hosts), records); read_shards(path)   # multi-host

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

Trace files: every file of trajectories whale_jax writes (archive candidates, test episodes,
VACE blocks, the evaluation cache) goes through write_records and is read by read_records.
It is gzip-compressed JSON lines, one record per line: a dict holding the compact form of a
trajectory (Trajectory.to_compact_json) under "trajectory", beside the record's own fields.
The compact form stores each call's prompt ids as the longest prefix they share with an
earlier call's prompt, alone or followed by one of its completions ("prompt_token_prefix":
[call, completion or -1, length]), and the ids past it; the same for the messages
("messages_prefix": [call, length]) and the raw prompt text ("prompt_prefix"), so a growing
context is stored once, not again per call. Token ids are stored as little-endian int32 and
logprobs as float32 when every value is a float32 exactly (float64 otherwise), in base64 of
the array's byte planes; values these do not hold exactly stay JSON lists. Reading gives back
an equal Trajectory, floats bit for bit. Readers also take the files written before (plain
JSON lines of Trajectory.to_json(), a bare trajectory or a record per line), and
Trajectory.from_json takes either form. Appending adds one gzip member; a member or a line
torn by a crash mid-write is skipped when read.

Shards: on a multi-host run each host writes the episodes it ran, once, to its own shard of
a trace file (shard_path: name.host_<i>.jsonl.gz beside name.jsonl.gz); read_shards(path)
reads path, or all its shards, so host 0's proposer sees every host's episodes.
"""
import base64
import copy
import dataclasses
import gzip
import json
import os
import zlib

import numpy as np

from whale_jax import atomic_files

OUTCOMES = ("ok", "harness_error", "timeout", "infra_error")


@dataclasses.dataclass
class RecordedCompletion:
  """One sample as the backend returned it; text is what the harness got (its token ids
  decoded on the host, less a final end-of-generation token: harness/host_calls.py)."""
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

  def to_compact_json(self):
    """The compact JSON form trace files store (module docstring); from_json reads it."""
    data = {name: getattr(self, name) for name in (
        "episode_id", "task_id", "harness_hash", "outcome", "answer", "error", "stdout",
        "wall_seconds", "sandbox_seconds")}
    data.update(format=COMPACT_FORMAT, num_prompt_tokens=self.num_prompt_tokens,
                num_completion_tokens=self.num_completion_tokens,
                calls=_encode_calls(self.calls),
                tool_events=[dataclasses.asdict(event) for event in self.tool_events])
    return data

  @classmethod
  def from_json(cls, data):
    """The Trajectory of a to_json() or to_compact_json() dict."""
    form = data.get("format")
    if form is not None and form != COMPACT_FORMAT:
      raise ValueError(f"Trajectory JSON in format {form!r}; this whale_jax reads the plain "
                       f"form and {COMPACT_FORMAT!r}. Read it with the whale_jax that wrote it.")
    fields = {field.name for field in dataclasses.fields(cls)}
    values = {name: value for name, value in data.items() if name in fields}
    if form is None:
      values["calls"] = [
          LLMCall(**{**call, "completions": [RecordedCompletion(**c) for c in call["completions"]]})
          for call in values.get("calls", [])]
    else:
      values["calls"] = _decode_calls(values.get("calls", []))
    values["tool_events"] = [ToolEvent(**event) for event in values.get("tool_events", [])]
    return cls(**values)


COMPACT_FORMAT = "compact/1"
_GZIP_MAGIC = b"\x1f\x8b\x08"   # gzip header: magic number, deflate


def _int32_array(values):
  """values as an int64 array when every one is an integer in the int32 range, else None."""
  if not len(values):
    return np.zeros(0, np.int64)
  try:
    array = np.array(values)
  except (OverflowError, ValueError):  # ragged nesting
    return None
  if array.dtype.kind not in "iu" or array.ndim != 1:  # floats, str, bools, huge ints
    return None
  return array.astype(np.int64) if -2**31 <= array.min() <= array.max() < 2**31 else None


def _pack(array):
  """{dtype name: base64 of array's bytes in planes}: every value's first byte, then every
  value's second byte, and so on (gzip compresses the planes of token ids and logprobs about
  a quarter better than the values' bytes in order)."""
  planes = array.view(np.uint8).reshape(len(array), array.itemsize).T
  return {array.dtype.name: base64.b64encode(planes.tobytes()).decode("ascii")}


def _pack_ints(values, array=None):
  """int32 planes when every value is an int32 (array: _int32_array(values) if known), else
  the list as it is."""
  array = _int32_array(values) if array is None else array
  return list(values) if array is None else _pack(array.astype("<i4"))


def _pack_floats(values):
  """float32 planes when every value is a float32 exactly, float64 planes when every value is
  a float, else the list as it is."""
  if not all(type(value) is float for value in values):
    return list(values)
  wide = np.array(values, "<f8")
  with np.errstate(over="ignore"):
    narrow = wide.astype("<f4")
  return _pack(narrow if narrow.astype("<f8").tobytes() == wide.tobytes() else wide)


_PACKED_TYPES = {"int32": "<i4", "float32": "<f4", "float64": "<f8"}


def _unpack(packed):
  """The list _pack_ints or _pack_floats packed."""
  if isinstance(packed, list):
    return packed
  (name, text), = packed.items()
  dtype = np.dtype(_PACKED_TYPES[name])
  planes = np.frombuffer(base64.b64decode(text), np.uint8).reshape(dtype.itemsize, -1)
  return planes.T.copy().view(dtype).ravel().tolist()


def _common_prefix_length(value, base):
  """How many leading items (ids, messages, characters) value and base share."""
  if isinstance(value, np.ndarray):
    length = min(len(value), len(base))
    differ = np.flatnonzero(value[:length] != base[:length])
    return int(differ[0]) if differ.size else length
  low, high = 0, min(len(value), len(base))
  while low < high:  # the largest length whose prefixes are equal (equality is monotone)
    middle = (low + high + 1) // 2
    if value[:middle] == base[:middle]:
      low = middle
    else:
      high = middle - 1
  return low


def _longest_prefix(value, bases):
  """[*reference, length] of the base sharing the longest prefix with value (the later one on
  a tie), or None when none shares a first item. bases: [(reference, base)]."""
  best = None
  for reference, base in bases:
    length = _common_prefix_length(value, base)
    if length and (best is None or length >= best[-1]):
      best = [*reference, length]
  return best


def _base_token_ids(call, completion):
  """A later call's prompt ids may extend: call's prompt, then completion's ids (unless -1)."""
  ids = list(call.prompt_token_ids)
  return ids if completion < 0 else ids + list(call.completions[completion].token_ids)


def _base_prompt(call, completion):
  return call.prompt if completion < 0 else call.prompt + call.completions[completion].text


def _encode_calls(calls):
  """[call dicts] with each prompt's ids, messages and text stored past its longest shared
  prefix with an earlier call (module docstring)."""
  encoded, token_bases, message_bases, prompt_bases = [], [], [], []
  for index, call in enumerate(calls):
    completion_arrays = [_int32_array(c.token_ids) for c in call.completions]
    data = {"method": call.method, "sampling": call.sampling,
            "started_seconds": call.started_seconds, "duration_seconds": call.duration_seconds,
            "completions": [{"token_ids": _pack_ints(c.token_ids, array),
                             "logprobs": _pack_floats(c.logprobs), "text": c.text,
                             "finish_reason": c.finish_reason}
                            for c, array in zip(call.completions, completion_arrays)]}
    ids, messages, prompt = call.prompt_token_ids, call.messages, call.prompt
    prompt_array = _int32_array(ids)
    ids_array = prompt_array
    if prompt_array is not None:
      prefix = _longest_prefix(prompt_array, token_bases)
      if prefix:
        data["prompt_token_prefix"] = prefix
        ids, ids_array = ids[prefix[-1]:], prompt_array[prefix[-1]:]
    if isinstance(messages, list):
      prefix = _longest_prefix(messages, message_bases)
      if prefix:
        data["messages_prefix"], messages = prefix, messages[prefix[-1]:]
    if isinstance(prompt, str):
      prefix = _longest_prefix(prompt, prompt_bases)
      if prefix:
        data["prompt_prefix"], prompt = prefix, prompt[prefix[-1]:]
    data.update(prompt_token_ids=_pack_ints(ids, ids_array), messages=messages, prompt=prompt)
    encoded.append(data)
    if prompt_array is not None:
      token_bases.append(((index, -1), prompt_array))
      token_bases += [((index, j), np.concatenate([prompt_array, array]))
                      for j, array in enumerate(completion_arrays) if array is not None]
    if isinstance(call.prompt, str):
      prompt_bases += [((index, j), _base_prompt(call, j))
                       for j in range(-1, len(call.completions))]
    if isinstance(call.messages, list):
      message_bases.append(((index,), call.messages))
  return encoded


def _decode_calls(encoded):
  calls = []
  for data in encoded:
    ids, messages, prompt = _unpack(data["prompt_token_ids"]), data["messages"], data["prompt"]
    if "prompt_token_prefix" in data:
      index, completion, length = data["prompt_token_prefix"]
      ids = _base_token_ids(calls[index], completion)[:length] + ids
    if "messages_prefix" in data:
      index, length = data["messages_prefix"]
      messages = copy.deepcopy(calls[index].messages[:length]) + messages
    if "prompt_prefix" in data:
      index, completion, length = data["prompt_prefix"]
      prompt = _base_prompt(calls[index], completion)[:length] + prompt
    completions = [RecordedCompletion(_unpack(c["token_ids"]), _unpack(c["logprobs"]), c["text"],
                                      c["finish_reason"]) for c in data["completions"]]
    calls.append(LLMCall(data["method"], messages, prompt, ids, data["sampling"], completions,
                         data["started_seconds"], data["duration_seconds"]))
  return calls


def write_records(path, records, append=False):
  """Writes records to a trace file: gzip-compressed JSON lines (module docstring).

  Args:
    path: the file; by convention its name ends in .jsonl.gz.
    records: dicts of JSON values (str() of anything else), each with a Trajectory under
      "trajectory", stored in its compact form (a dict there is stored as it is).
    append: False replaces path atomically (atomic_files); True adds the records as one more
      gzip member at the end of path and syncs it to disk.
  """
  lines = []
  for record in records:
    trajectory = record["trajectory"]
    if isinstance(trajectory, Trajectory):
      record = {**record, "trajectory": trajectory.to_compact_json()}
    lines.append(json.dumps(record, default=str) + "\n")
  data = gzip.compress("".join(lines).encode("utf-8"), compresslevel=6, mtime=0)
  path = os.fspath(path)
  if not append:
    atomic_files.write_with(path, lambda temporary: _write_bytes(temporary, data, "wb"))
    return
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  _write_bytes(path, data, "ab")


def _write_bytes(path, data, mode):
  with open(path, mode) as file:
    file.write(data)
    file.flush()
    os.fsync(file.fileno())


def _gzip_members(data):
  """The text of each whole gzip member of data; a torn or corrupt one is skipped up to the
  next member's header."""
  position = 0
  while position < len(data):
    decompressor = zlib.decompressobj(zlib.MAX_WBITS | 16)
    try:
      text = decompressor.decompress(data[position:])
    except zlib.error:
      text = None
    if text is not None and decompressor.eof:
      yield text
      position = len(data) - len(decompressor.unused_data)
    else:
      position = data.find(_GZIP_MAGIC, position + 1)
      if position < 0:
        return


def read_records(path, decode=True):
  """The records of a trace file (write_records), or of a plain JSONL file written before
  (a line holding a bare trajectory becomes {"trajectory": it}). Lines torn by a crash
  mid-write are skipped.

  Args:
    decode: True gives a Trajectory under "trajectory"; False leaves its JSON dict there (either
      form), for Trajectory.from_json later.
  """
  with open(os.fspath(path), "rb") as file:
    data = file.read()
  if data.startswith(_GZIP_MAGIC):
    data = b"".join(_gzip_members(data))
  records = []
  for line in data.split(b"\n"):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except ValueError:  # a torn line (UnicodeDecodeError is a ValueError too)
      continue
    if "trajectory" not in record:
      record = {"trajectory": record}
    if decode:
      record["trajectory"] = Trajectory.from_json(record["trajectory"])
    records.append(record)
  return records


def shard_path(path, process_index=0, process_count=1):
  """The trace file host process_index writes for path: path itself on a single host, else
  path with ".host_<i>" before ".jsonl.gz" (every host, host 0 included, writes its own
  shard, so a reader of path alone fails instead of seeing one host's part)."""
  path = os.fspath(path)
  if process_count <= 1:
    return path
  stem, suffix = (path[:-len(".jsonl.gz")], ".jsonl.gz") if path.endswith(".jsonl.gz") else (
      os.path.splitext(path))
  return f"{stem}.host_{process_index:03d}{suffix}"


def shard_paths(path):
  """path's trace files that exist: path itself, else its hosts' shards in host order."""
  path = os.fspath(path)
  if os.path.exists(path):
    return [path]
  found, index = [], 0
  while True:  # shards are numbered 0, 1, ... without gaps (every host writes one)
    shard = shard_path(path, index, 2)
    if not os.path.exists(shard):
      return found
    found.append(shard)
    index += 1


def read_shards(path, decode=True):
  """The records of path, or of all its hosts' shards (shard_path) one after another."""
  return [record for shard in shard_paths(path) for record in read_records(shard, decode)]


def write_jsonl(path, trajectories):
  """Writes trajectories to a trace file (overwriting path): write_records without fields."""
  write_records(path, [{"trajectory": trajectory} for trajectory in trajectories])


def read_jsonl(path):
  """The trajectories of a trace file, or of a JSONL file of Trajectory.to_json() lines."""
  return [record["trajectory"] for record in read_records(path)]
