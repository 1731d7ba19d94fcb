"""Multi-host splitting of host-side work, with P simulated hosts as threads in one process:
each host runs and verifies whole groups of episodes, the hosts exchange only numbers, and
every host gets the scores, costs and outcomes one host gets."""
import json
import threading
import types

import pytest

from whale_jax.algorithms import hosts
from whale_jax.harness import Harness
from whale_jax.harness import runtime as runtime_lib
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import collector
from whale_jax.rollouts import sharding
from whale_jax.sampling import SamplingParams
from whale_jax.search import proposal as proposal_lib

HARNESS = Harness("def run(task, llm, tools):\n  return 'x'\n")


class FakeRuntime:
  """Answers each episode with a text made of its id and seed; records what it ran."""

  def __init__(self):
    self.ran = []
    self.trajectories = []

  def run_episodes(self, harness, episodes):
    self.ran.extend(e.episode_id for e in episodes)
    trajectories = self._run(harness, episodes)
    self.trajectories += trajectories
    return trajectories

  def _run(self, harness, episodes):
    return [trajectory_lib.Trajectory(
        episode_id=e.episode_id, task_id=e.task_id, harness_hash=harness.hash, outcome="ok",
        answer=f"{e.episode_id}/{e.sampling.seed}",
        calls=[trajectory_lib.LLMCall("chat", [{"role": "user", "content": "q"}], None,
                                      [1, 2], {"seed": e.sampling.seed},
                                      [trajectory_lib.RecordedCompletion(
                                          [3, 4], [-0.25, -1.5], "ab", "stop")], 0.0, 0.1)])
            for e in episodes]


class ThreadGroup:
  """P threads that exchange texts like jax processes do (allgather, broadcast from 0)."""

  def __init__(self, num_hosts):
    self.num_hosts = num_hosts
    self.barrier = threading.Barrier(num_hosts, timeout=30)
    self.slots = [None] * num_hosts

  def allgather(self, index):
    def gather(text):
      self.slots[index] = text
      self.barrier.wait()
      result = list(self.slots)
      self.barrier.wait()  # nobody overwrites a slot before everyone has read it
      return result
    return gather

  def broadcast(self, index):
    gather = self.allgather(index)
    return lambda text: gather(text)[0]

  def run(self, function):
    results, errors = [None] * self.num_hosts, []

    def target(index):
      try:
        results[index] = function(index)
      except Exception as error:  # pylint: disable=broad-except
        errors.append((index, error))

    threads = [threading.Thread(target=target, args=(i,)) for i in range(self.num_hosts)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    return results, errors


def _episodes(count):
  return [runtime_lib.Episode(task_id=f"t{i // 2}", task={"q": i}, episode_id=f"t{i // 2}#{i % 2}",
                              sampling=SamplingParams(seed=100 + i)) for i in range(count)]


class CountingDomain:
  """Scores an answer by its seed's parity; counts the episodes it verified."""

  def __init__(self):
    self.verified = []

  def tools(self, instance):
    return {}

  def verify(self, instance, answer, trajectory):
    self.verified.append(trajectory.episode_id)
    return float(int(answer.split("/")[1]) % 2)


def _jobs(num_instances, num_samples):
  """Two jobs (an incumbent and a candidate) of num_samples episodes per instance, as a
  grouped training batch lists them (samples of an instance next to each other)."""
  instances = [types.SimpleNamespace(id=f"t{i}", public={"q": i}) for i in range(num_instances)]
  repeated = [instance for instance in instances for _ in range(num_samples)]
  names = [f"{instance.id}#{g}" for instance in instances for g in range(num_samples)]
  other = Harness("def run(task, llm, tools):\n  return 'y'\n")
  return [(harness, repeated, [100 + i + 7 * n for i in range(len(repeated))], names)
          for n, harness in enumerate((HARNESS, other))]


def _collect(runtime, domain, num_instances, num_samples):
  return collector.collect_many(runtime, domain, _jobs(num_instances, num_samples),
                                SamplingParams(max_tokens=4))


@pytest.mark.parametrize("num_hosts,num_instances,num_samples",
                         [(2, 7, 2), (3, 8, 3), (4, 2, 4), (2, 0, 2), (2, 5, 1)])
def test_hosts_run_whole_groups_and_exchange_numbers_only(num_hosts, num_instances,
                                                          num_samples):
  reference = _collect(FakeRuntime(), CountingDomain(), num_instances, num_samples)
  group = ThreadGroup(num_hosts)
  runtimes = [FakeRuntime() for _ in range(num_hosts)]
  domains = [CountingDomain() for _ in range(num_hosts)]
  payloads = [[] for _ in range(num_hosts)]

  def host(index):
    gather = group.allgather(index)

    def watched(text):
      payloads[index].append(len(text.encode()))
      return gather(text)

    sharded = hosts.ShardedRuntime(runtimes[index], index, num_hosts, watched)
    return _collect(sharded, domains[index], num_instances, num_samples)

  results, errors = group.run(host)
  assert not errors
  everything = [e for job in _jobs(num_instances, num_samples) for e in job[3]]
  ran = sorted(e for runtime in runtimes for e in runtime.ran)
  assert ran == sorted(everything)  # each episode exactly once
  for index, runtime in enumerate(runtimes):  # each host verified exactly its own episodes
    assert sorted(domains[index].verified) == sorted(
        t.episode_id for t in runtime.trajectories if t.ok)
  for evaluations in results:
    for evaluation, expected in zip(evaluations, reference):
      assert evaluation.scores == expected.scores
      assert evaluation.rollouts == expected.rollouts
      assert evaluation.generated_tokens == expected.generated_tokens
      assert evaluation.outcome_counts() == expected.outcome_counts()
      assert evaluation.mean_turns == expected.mean_turns
  for job in range(2):
    hosts_of_group = {}
    for index, evaluations in enumerate(results):
      for trajectory in evaluations[job].trajectories:
        if not sharding.is_remote(trajectory):
          hosts_of_group.setdefault(trajectory.task_id, set()).add(index)
          expected = reference[job].trajectories[
              [t.episode_id for t in reference[job].trajectories].index(trajectory.episode_id)]
          assert trajectory.to_json() == expected.to_json()
    assert all(len(owners) == 1 for owners in hosts_of_group.values())  # groups stay whole
    assert len(hosts_of_group) == num_instances
  # The gathered payload: numbers, a few dozen bytes per episode (plus a fixed header).
  for sizes in payloads:
    assert len(sizes) == 1
    assert sizes[0] <= 120 + 40 * len(everything) // num_hosts + 40 * num_samples


def test_a_remote_episode_refuses_its_trajectory_fields():
  group = ThreadGroup(2)

  def host(index):
    return _collect(hosts.ShardedRuntime(FakeRuntime(), index, 2, group.allgather(index)),
                    CountingDomain(), 2, 2)

  results, errors = group.run(host)
  assert not errors
  remote = [t for t in results[0][0].trajectories if sharding.is_remote(t)]
  assert remote and all(t.host == 1 for t in remote)
  record = remote[0]
  assert record.ok and record.num_turns == 1 and record.num_completion_tokens == 2
  assert record.task_id == "t1" and not record.cut_off
  for name in ("calls", "answer", "tool_events", "error"):
    with pytest.raises(sharding.RemoteEpisodeError, match="ran on host 1"):
      getattr(record, name)
  assert sharding.trajectory_from_json(record.to_json()) == record
  assert not hasattr(record, "__array__")  # dunder probes stay AttributeErrors


def test_a_host_asked_for_other_episodes_fails_on_every_host():
  group = ThreadGroup(2)

  def host(index):
    return _collect(hosts.ShardedRuntime(FakeRuntime(), index, 2, group.allgather(index)),
                    CountingDomain(), 3 if index == 0 else 4, 2)

  _, errors = group.run(host)
  assert sorted(index for index, _ in errors) == [0, 1]
  for _, error in errors:
    assert "Hosts [1] were asked to run other episodes" in str(error)


def test_groups_go_round_robin_by_first_appearance():
  assert sharding.group_owners(["a", "a", "b", "b", "c", "a", "d"], 2) == [0, 0, 1, 1, 0, 0, 1]
  assert sharding.group_owners([], 3) == []


def test_numbers_round_trip_through_json():
  trajectory = FakeRuntime().run_episodes(HARNESS, _episodes(1))[0]
  numbers = json.loads(json.dumps(sharding.encode_numbers(1 / 3, trajectory)))
  score, record = sharding.decode_numbers(numbers, trajectory.episode_id, trajectory.task_id, 1)
  assert score == 1 / 3
  assert record == sharding.EpisodeRecord.of(trajectory, 1)


class CountingProposer:
  name = "counting"

  def __init__(self, fail=False):
    self.calls = 0
    self.fail = fail

  def propose(self, context, n):
    self.calls += 1
    if self.fail:
      raise TimeoutError("endpoint timed out")
    return [proposal_lib.Proposal(kind="patch", text=f"{context} #{i}", hypothesis="h",
                                  mechanism="m") for i in range(n)]


def test_only_host_zero_proposes_and_every_host_gets_its_proposals():
  group = ThreadGroup(3)
  proposers = [CountingProposer() for _ in range(3)]

  def host(index):
    wrapped = hosts.HostZeroProposer(proposers[index], index, group.broadcast(index))
    assert wrapped.name == "counting"
    return [p.to_json() for p in wrapped.propose(f"context of host {index}", 2)]

  results, errors = group.run(host)
  assert not errors
  assert [p.calls for p in proposers] == [1, 0, 0]
  expected = [p.to_json() for p in CountingProposer().propose("context of host 0", 2)]
  assert results == [expected] * 3


def test_host_zero_proposer_failure_raises_on_every_host():
  group = ThreadGroup(2)

  def host(index):
    hosts.HostZeroProposer(CountingProposer(fail=True), index,
                           group.broadcast(index)).propose("c", 1)

  _, errors = group.run(host)
  assert sorted((index, type(error).__name__) for index, error in errors) == [
      (0, "TimeoutError"), (1, "RuntimeError")]
  assert "endpoint timed out" in str(dict(errors)[1])


class IndexedProposer(CountingProposer):
  """A proposer that can be asked for single slots (as ModelProposer.propose_at)."""

  def propose_at(self, context, indices):
    self.calls += 1
    return [proposal_lib.Proposal(kind="patch", text=f"{context} #{i}") for i in indices]


def test_a_retried_slot_is_proposed_on_host_zero_only():
  group = ThreadGroup(2)
  proposers = [IndexedProposer() for _ in range(2)]

  def host(index):
    wrapped = hosts.HostZeroProposer(proposers[index], index, group.broadcast(index))
    return [p.text for p in proposal_lib.safe_propose(wrapped, "c", 3, indices=[2])]

  results, errors = group.run(host)
  assert not errors and results == [["c #2"], ["c #2"]]
  assert [p.calls for p in proposers] == [1, 0]
  # Without propose_at on the wrapped proposer, the wrapper has none either.
  assert getattr(hosts.HostZeroProposer(CountingProposer(), 0), "propose_at", None) is None


def test_the_agents_run_tool_evaluates_on_host_zeros_own_runtime():
  """On a multi-host run the coding agent and its `run` drafts stay on host 0: the evaluate
  it is bound with runs on host 0's own runtime, with no exchange with the other hosts."""
  from whale_jax.algorithms import loop  # pylint: disable=g-import-not-at-top

  class Binding:
    def for_search(self, archive_dir, evaluate, instances, seed=0):
      self.evaluate = evaluate
      return self

  inner = FakeRuntime()
  sharded = hosts.ShardedRuntime(inner, 0, 2, lambda text: [text, text])
  run = types.SimpleNamespace(
      proposer=Binding(), runtime=sharded, domain=CountingDomain(),
      sampling=SamplingParams(), policy=types.SimpleNamespace(weights_id="w"),
      splits={"harness": []}, loop=types.SimpleNamespace(seed=0))
  bound = loop.bind_proposer(run, "/archive", evaluate="shared")
  assert bound.evaluate.runtime is inner and hosts.local_runtime(sharded) is inner
  evaluation = bound.evaluate(HARNESS, [types.SimpleNamespace(id="t0", public={})], [3])
  assert inner.ran == [""] and not sharding.is_remote(evaluation.trajectories[0])
