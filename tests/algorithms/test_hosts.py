"""Multi-host splitting of host-side work, with P simulated hosts as threads in one process:
each host runs only its share of the episodes and every host gets the result one host gets."""
import threading

import pytest

from whale_jax.algorithms import hosts
from whale_jax.harness import Harness
from whale_jax.harness import runtime as runtime_lib
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.sampling import SamplingParams
from whale_jax.search import proposal as proposal_lib

HARNESS = Harness("def run(task, llm, tools):\n  return 'x'\n")


class FakeRuntime:
  """Answers each episode with a text made of its id and seed; records what it ran."""

  def __init__(self):
    self.ran = []

  def run_episodes(self, harness, episodes):
    self.ran.extend(e.episode_id for e in episodes)
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


@pytest.mark.parametrize("num_hosts,num_episodes", [(2, 7), (3, 8), (4, 2), (2, 0)])
def test_each_host_runs_its_share_and_all_get_every_trajectory(num_hosts, num_episodes):
  reference = FakeRuntime().run_episodes(HARNESS, _episodes(num_episodes))
  group = ThreadGroup(num_hosts)
  runtimes = [FakeRuntime() for _ in range(num_hosts)]

  def host(index):
    sharded = hosts.ShardedRuntime(runtimes[index], index, num_hosts, group.allgather(index))
    return sharded.run_episodes(HARNESS, _episodes(num_episodes)), sharded.local_episodes

  results, errors = group.run(host)
  assert not errors
  ran = sorted(e for runtime in runtimes for e in runtime.ran)
  assert ran == sorted(e.episode_id for e in _episodes(num_episodes))  # each exactly once
  for index, (trajectories, local) in enumerate(results):
    assert local == len(runtimes[index].ran) == len(range(index, num_episodes, num_hosts))
    assert [t.to_json() for t in trajectories] == [t.to_json() for t in reference]


def test_a_host_asked_for_other_episodes_fails_on_every_host():
  group = ThreadGroup(2)

  def host(index):
    episodes = _episodes(4) if index == 0 else _episodes(5)
    return hosts.ShardedRuntime(FakeRuntime(), index, 2, group.allgather(index)).run_episodes(
        HARNESS, episodes)

  _, errors = group.run(host)
  assert sorted(index for index, _ in errors) == [0, 1]
  for _, error in errors:
    assert "Hosts [1] were asked to run other episodes" in str(error)


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
