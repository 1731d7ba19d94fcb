"""The candidate archive: a directory a person can browse, and the search's only memory.

  archive = Archive(directory)                  # creates it, or reloads what is there
  candidate = archive.add(Candidate(...), source=..., raw_output=..., evaluation=...)
  archive.candidates                            # every candidate, in the order they were made
  archive.find_hash(hash)                       # the first candidate with that source
  archive.source(candidate_id), archive.trajectories(candidate_id), archive.examples(...)

Layout:
  summary.jsonl                  one JSON row per candidate (its candidate.json)
  candidates/c0007/
    candidate.json               id, iteration, parent, proposer, mechanism, hypothesis,
                                 instruction version and hash, status, reasons, apply report,
                                 static-check failures, success, mean turns, rollouts, ...
    harness.py                   the source (absent when no program could be built)
    proposal.txt                 the proposer's raw reply
    examples.jsonl               per task: task_id, sample_key, score, outcome, num_turns
    trajectories.jsonl.gz        the episodes (a whale_jax.harness.trajectory trace file;
                                 trajectories.jsonl in archives written before)
  traces/c0007.host_001.jsonl.gz  on a multi-host run: each host's own episodes of the
                                 candidate (its trace shard), in place of trajectories.jsonl.gz
  iterations/, evaluations/ ...  written by the search (see whale_jax.search.meta_harness)

A candidate folder is written under a temporary name and renamed into place, so it is either
complete or absent. The folders are the record: on opening, summary.jsonl is rewritten from
them if it disagrees (e.g. after a crash between the two writes).

Statuses: "evaluated" (scored on the search instances), "rejected" (its reasons say why:
proposer_error, malformed, no_change, not_found, ambiguous, static_check, prompt_only, ...),
"duplicate" (same content hash as an earlier candidate, duplicate_of; never evaluated again).
"""
import dataclasses
import json
import os
import shutil

from whale_jax import atomic_files
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import sharding

STATUSES = ("evaluated", "rejected", "duplicate")
SUMMARY = "summary.jsonl"
CANDIDATES = "candidates"


write_json_atomically = atomic_files.write_json  # the names callers of the archive use
write_text_atomically = atomic_files.write_text


def read_json(path, default=None):
  if not os.path.exists(path):
    return default
  with open(path, encoding="utf-8") as file:
    return json.load(file)


@dataclasses.dataclass
class Candidate:
  """One archive entry (its candidate.json and summary row).

  Attributes:
    id: "c0000", "c0001", ... in the order candidates were made.
    iteration: the search iteration (the incoming harness is iteration 1).
    index: position among the proposals of its iteration.
    hash: content hash of its source (None when no program could be built).
    parent: id of the candidate it was derived from (None for the incoming harness).
    origin: "incoming", "patch" or "program".
    proposer, mechanism, hypothesis: from the Proposal.
    instruction_version, instruction_hash: the proposer instructions it was made under.
    status: one of STATUSES; reasons: [{"code", "message"}] when rejected.
    apply_report: the per-block report of applying the proposal.
    static_check: the static-check failures ([] when it passed or was not reached).
    duplicate_of: id of the earlier candidate with the same source.
    weights_id: the weights it was evaluated at.
    success, mean_turns: mean score and mean llm calls over the search instances.
    num_examples: instances evaluated; outcomes: {outcome: count}.
    rollouts: episodes run for it (cache hits excluded); generated_tokens: the model's tokens
      in them.
    prompt_tokens, completion_tokens: what proposing it cost.
  """
  id: str
  iteration: int
  index: int
  hash: str | None
  parent: str | None
  origin: str
  proposer: str = ""
  mechanism: str = ""
  hypothesis: str = ""
  instruction_version: str = ""
  instruction_hash: str = ""
  status: str = "rejected"
  reasons: list = dataclasses.field(default_factory=list)
  apply_report: str = ""
  static_check: list = dataclasses.field(default_factory=list)
  duplicate_of: str | None = None
  weights_id: str | None = None
  success: float | None = None
  mean_turns: float | None = None
  num_examples: int = 0
  outcomes: dict = dataclasses.field(default_factory=dict)
  rollouts: int = 0
  generated_tokens: int = 0
  prompt_tokens: int = 0
  completion_tokens: int = 0

  def __post_init__(self):
    if self.status not in STATUSES:
      raise ValueError(f"Candidate.status={self.status!r}; use one of {STATUSES}.")

  @property
  def evaluated(self):
    return self.status == "evaluated"

  def to_json(self):
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, data):
    fields = {field.name for field in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in data.items() if name in fields})


class Archive:
  """The archive directory (see the module docstring).

  Args:
    directory: the archive's folder (created, or reloaded).
    host_index, num_hosts: this host and the hosts of a multi-host run sharing the folder.
      Host 0 writes the archive; every host keeps the candidates it adds in memory and writes
      the trajectories it ran to its trace shard traces/<id>.host_<i>.jsonl.gz (a candidate
      folder then holds no trajectories file; trajectories() reads the shards).
  """

  def __init__(self, directory, host_index=0, num_hosts=1):
    self.directory = os.fspath(directory)
    self.host_index, self.num_hosts = host_index, num_hosts
    self.writer = host_index == 0
    self.candidates_directory = os.path.join(self.directory, CANDIDATES)
    os.makedirs(self.candidates_directory, exist_ok=True)
    self.candidates = []
    self._added = {}  # id -> (source, examples) of candidates added by this process
    for name in sorted(os.listdir(self.candidates_directory)):
      path = os.path.join(self.candidates_directory, name)
      if name.startswith(".tmp-"):
        if self.writer:
          shutil.rmtree(path, ignore_errors=True)  # a folder whose writing was interrupted
        continue
      data = read_json(os.path.join(path, "candidate.json"))
      if data is not None:
        self.candidates.append(Candidate.from_json(data))
    self.candidates.sort(key=lambda candidate: int(candidate.id[1:]))
    self._by_id = {candidate.id: candidate for candidate in self.candidates}
    if self.writer:
      self._repair_summary()

  def path(self, *parts):
    return os.path.join(self.directory, *parts)

  def write_json(self, path, value):
    """Writes a JSON file of the search (host 0 only; a no-op on the other hosts)."""
    if self.writer:
      write_json_atomically(path, value)

  def write_text(self, path, text):
    """Writes a text file of the search (host 0 only; a no-op on the other hosts)."""
    if self.writer:
      write_text_atomically(path, text)

  def _trace_path(self, candidate_id):
    return self.path("traces", f"{candidate_id}.jsonl.gz")

  def _repair_summary(self):
    rows = [json.dumps(c.to_json(), sort_keys=True) for c in self.candidates]
    path = self.path(SUMMARY)
    existing = []
    if os.path.exists(path):
      with open(path, encoding="utf-8") as file:
        existing = [line.rstrip("\n") for line in file if line.strip()]
    if existing != rows:
      write_text_atomically(path, "".join(row + "\n" for row in rows))

  def next_id(self):
    return f"c{len(self.candidates):04d}"

  def get(self, candidate_id):
    return self._by_id[candidate_id]

  def find_hash(self, harness_hash):
    """The first candidate whose source has this hash, or None."""
    if harness_hash is None:
      return None
    return next((c for c in self.candidates if c.hash == harness_hash), None)

  def known_hashes(self):
    return frozenset(c.hash for c in self.candidates if c.hash)

  def evaluated(self):
    return [c for c in self.candidates if c.evaluated]

  def add(self, candidate, source=None, raw_output="", evaluation=None):
    """Writes the candidate's folder and summary row; returns the candidate."""
    if candidate.id != self.next_id():
      raise ValueError(f"Candidate id {candidate.id} is out of order; the next id is "
                       f"{self.next_id()}.")
    if evaluation is not None:
      candidate.num_examples = len(evaluation.scores)
      candidate.success = evaluation.success_rate
      candidate.mean_turns = evaluation.mean_turns
      candidate.outcomes = evaluation.outcome_counts()
      candidate.rollouts = evaluation.rollouts
      candidate.generated_tokens = evaluation.generated_tokens

    examples = []
    if evaluation is not None:
      examples = [{"task_id": task_id, "sample_key": key, "score": score,
                   "outcome": trajectory.outcome, "num_turns": trajectory.num_turns}
                  for task_id, key, score, trajectory in zip(
                      evaluation.task_ids, evaluation.sample_keys, evaluation.scores,
                      evaluation.trajectories)]
      if self.num_hosts > 1:  # each host's own episodes, in its shard
        trajectory_lib.write_jsonl(
            trajectory_lib.shard_path(self._trace_path(candidate.id), self.host_index,
                                      self.num_hosts),
            [t for t in evaluation.trajectories if not sharding.is_remote(t)])

    def write(temporary):
      if source is not None:
        with open(os.path.join(temporary, "harness.py"), "w", encoding="utf-8") as file:
          file.write(source)
      with open(os.path.join(temporary, "proposal.txt"), "w", encoding="utf-8") as file:
        file.write(raw_output or "")
      if evaluation is not None:
        with open(os.path.join(temporary, "examples.jsonl"), "w", encoding="utf-8") as file:
          for row in examples:
            file.write(json.dumps(row) + "\n")
        if self.num_hosts == 1:
          trajectory_lib.write_jsonl(os.path.join(temporary, "trajectories.jsonl.gz"),
                                     evaluation.trajectories)
      with open(os.path.join(temporary, "candidate.json"), "w", encoding="utf-8") as file:
        json.dump(candidate.to_json(), file, indent=2, sort_keys=True)
    if self.writer:
      atomic_files.write_directory(os.path.join(self.candidates_directory, candidate.id), write)
    self.candidates.append(candidate)
    self._by_id[candidate.id] = candidate
    self._added[candidate.id] = (source, examples)
    if self.writer:
      with open(self.path(SUMMARY), "a", encoding="utf-8") as file:
        file.write(json.dumps(candidate.to_json(), sort_keys=True) + "\n")
    return candidate

  def _candidate_file(self, candidate_id, name):
    return os.path.join(self.candidates_directory, candidate_id, name)

  def source(self, candidate_id):
    """The candidate's harness source, or None when it has none."""
    if candidate_id in self._added:  # on every host, whether host 0 has written it yet or not
      return self._added[candidate_id][0]
    path = self._candidate_file(candidate_id, "harness.py")
    if not os.path.exists(path):
      return None
    with open(path, encoding="utf-8") as file:
      return file.read()

  def raw_output(self, candidate_id):
    with open(self._candidate_file(candidate_id, "proposal.txt"), encoding="utf-8") as file:
      return file.read()

  def examples(self, candidate_id):
    """[{"task_id", "sample_key", "score", "outcome", "num_turns"}] ([] if not evaluated)."""
    if candidate_id in self._added:
      return [dict(row) for row in self._added[candidate_id][1]]
    path = self._candidate_file(candidate_id, "examples.jsonl")
    if not os.path.exists(path):
      return []
    with open(path, encoding="utf-8") as file:
      return [json.loads(line) for line in file if line.strip()]

  def trajectories(self, candidate_id):
    """The candidate's episodes: its trajectories file, or every host's trace shard."""
    for name in ("trajectories.jsonl.gz", "trajectories.jsonl"):  # the second: written before
      path = self._candidate_file(candidate_id, name)
      if os.path.exists(path):
        return trajectory_lib.read_jsonl(path)
    return [record["trajectory"]
            for record in trajectory_lib.read_shards(self._trace_path(candidate_id))]

