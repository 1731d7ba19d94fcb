"""Episodes split over the hosts of a multi-host run; what crosses hosts is numbers.

  hosts = HostGroup(index=jax.process_index(), count=jax.process_count(),
                    allgather=distributed.allgather_texts)     # algorithms/hosts.py builds it
  owners = group_owners(group_keys, hosts.count)               # the host of each episode
  record = EpisodeRecord.of(trajectory, host=1)                # what other hosts see of it

The collector (rollouts/collector.py) runs on each host only the episodes it owns, verifies
and judges only those, and all-gathers one compact text of numbers per episode (encode_numbers
/ decode_numbers: score, outcome, turns, token counts, whether a completion hit a length
limit). The Evaluation it returns holds the full Trajectory of each episode this host ran and
an EpisodeRecord for each episode another host ran. An EpisodeRecord answers outcome, ok,
num_turns, num_completion_tokens, num_prompt_tokens, cut_off, episode_id, task_id and host;
any other attribute (calls, answer, tool_events, ...) raises RemoteEpisodeError, so a consumer
that needs a trajectory fails loudly instead of reading half of a batch. The trajectory itself
is in the trace shard its host wrote (harness/trajectory.py's shard files).

Ownership: whole groups. Episodes of one job that share a task id form a group (the G samples
of a training prompt; one episode per instance for evaluations), so GRPO advantages, RSFT's
keep filter and DAPO's constant-group test are computed on the host that holds the samples.
Groups are numbered in order over all jobs of one collect_many call and group k runs on host
k mod P. Which host runs an episode never changes its seed, so P hosts produce the episodes
one host would.
"""
import dataclasses
import hashlib
import json

from whale_jax.harness import trajectory as trajectory_lib

_OUTCOME_CODES = {outcome: code for code, outcome in enumerate(trajectory_lib.OUTCOMES)}


@dataclasses.dataclass(frozen=True)
class HostGroup:
  """This host (index), the number of hosts (count) and allgather(text) -> [text of host i]."""
  index: int
  count: int
  allgather: object


def _alone(text):
  return [text]


SINGLE = HostGroup(0, 1, _alone)


def hosts_of(runtime):
  """runtime.hosts (a HostGroup) when the runtime is shared by several hosts, else SINGLE."""
  return getattr(runtime, "hosts", None) or SINGLE


def barrier(hosts):
  """Returns once every host got here (a no-op on one host): e.g. after each host wrote its
  trace shard, before host 0 reads them all."""
  if hosts.count > 1:
    hosts.allgather("")


class RemoteEpisodeError(RuntimeError):
  """A field of an episode another host ran was asked for (EpisodeRecord)."""


@dataclasses.dataclass(frozen=True)
class EpisodeRecord:
  """The numbers of an episode that another host ran (module docstring).

  Attributes:
    episode_id, task_id: as the episode's Trajectory.
    outcome: one of harness.trajectory.OUTCOMES.
    num_turns, num_completion_tokens, num_prompt_tokens: as the Trajectory's properties.
    cut_off: whether a completion stopped at a generation limit (finish_reason "length").
    host: the process index of the host that ran it (and holds its trajectory).
  """
  episode_id: str
  task_id: str
  outcome: str
  num_turns: int
  num_completion_tokens: int
  num_prompt_tokens: int
  cut_off: bool
  host: int

  @property
  def ok(self):
    return self.outcome == "ok"

  def __getattr__(self, name):  # only reached for names the record does not have
    if name.startswith("__"):
      raise AttributeError(name)
    raise RemoteEpisodeError(
        f"Episode {self.episode_id or self.task_id!r} ran on host {self.host}; this host holds "
        f"only its numbers (outcome, ok, num_turns, num_completion_tokens, num_prompt_tokens, "
        f"cut_off), not its {name!r}. Use the trajectories this host ran (collector.local) or "
        "read the trace shards the hosts wrote (harness.trajectory.read_shards).")

  def to_json(self):
    return {"remote_episode": dataclasses.asdict(self)}

  @classmethod
  def from_json(cls, data):
    return cls(**data["remote_episode"])

  @classmethod
  def of(cls, trajectory, host):
    """The record of trajectory (a Trajectory, or a record) as run on host."""
    return cls(trajectory.episode_id, trajectory.task_id, trajectory.outcome,
               trajectory.num_turns, trajectory.num_completion_tokens,
               trajectory.num_prompt_tokens, cut_off(trajectory), host)


def is_remote(trajectory):
  return isinstance(trajectory, EpisodeRecord)


def local(trajectories):
  """The trajectories this host ran (every one on a single host), in order."""
  return [t for t in trajectories if not is_remote(t)]


def cut_off(trajectory):
  """Whether a completion of the trajectory stopped at a generation limit."""
  if is_remote(trajectory):
    return trajectory.cut_off
  return any(c.finish_reason == "length" for call in trajectory.calls for c in call.completions)


def trajectory_json(trajectory):
  """The JSON a trace or cache file stores: the compact trajectory, or a record's numbers."""
  return trajectory.to_json() if is_remote(trajectory) else trajectory.to_compact_json()


def trajectory_from_json(data):
  """The Trajectory (or EpisodeRecord) of trajectory_json's output."""
  if "remote_episode" in data:
    return EpisodeRecord.from_json(data)
  return trajectory_lib.Trajectory.from_json(data)


def group_owners(group_keys, count):
  """The host of each episode: episodes with equal keys (consecutive or not) form one group,
  groups are numbered by first appearance and group k goes to host k mod count."""
  numbers = {}
  for key in group_keys:
    numbers.setdefault(key, len(numbers))
  return [numbers[key] % count for key in group_keys]


def digest(parts):
  """A short hash of a JSON-able value (the episodes each host was asked to run)."""
  return hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()[:16]


def encode_numbers(score, trajectory):
  """[score, outcome code, turns, completion tokens, prompt tokens, cut off] of one episode:
  a few dozen bytes of JSON."""
  return [score, _OUTCOME_CODES[trajectory.outcome], trajectory.num_turns,
          trajectory.num_completion_tokens, trajectory.num_prompt_tokens,
          int(cut_off(trajectory))]


def decode_numbers(numbers, episode_id, task_id, host):
  """(score, EpisodeRecord) of encode_numbers' list."""
  score, outcome, turns, completion_tokens, prompt_tokens, cut = numbers
  return float(score), EpisodeRecord(episode_id, task_id, trajectory_lib.OUTCOMES[outcome],
                                     int(turns), int(completion_tokens), int(prompt_tokens),
                                     bool(cut), host)
