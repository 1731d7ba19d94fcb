"""Host-side work on a multi-host run: each host runs and keeps its own episodes, host 0 proposes.

Every process of a multi-host run executes the same loop. Weight steps are SPMD programs over
the global mesh; the host-side work around them is split like this:

  ShardedRuntime(runtime)     this host's runtime plus the hosts it shares episodes with
                              (`hosts`, a rollouts.sharding.HostGroup). The one collector
                              (rollouts/collector.py) splits every batch by whole groups (the G
                              samples of a prompt, or one instance's episode), runs, retries and
                              verifies this host's groups only, and all-gathers numbers (scores,
                              outcomes, turns, token counts, a digest of what each host was
                              asked to run): other hosts' episodes are EpisodeRecords here, never
                              trajectories. Training batches, search evaluations, gates and test
                              evaluations all go through it; each host trains on the samples of
                              the episodes it ran (Policy.train), placed in a global order.
  local_runtime(runtime)      this host's own runtime: episodes that stay on one host (the
                              coding agent's `run` drafts on host 0).
  HostZeroProposer(proposer)  propose(context, n): host 0 asks the proposer (a model, an
                              endpoint, the edit library, a coding agent) and its proposals are
                              broadcast, so the hosts evaluate the same candidates. Host 0 reads
                              every host's traces from their shard files in the shared workdir.
  agree_on_harness(source)    host 0's accepted harness, broadcast after every search and gate.

Episode seeds depend only on (run seed, phase key, task, sample index), never on the host that
runs an episode, so P hosts make the choices one host would (up to the float summation order
of the train step). A host whose loop has drifted from host 0's (other episodes, another
harness) is caught at the next gather with an error instead of training on mixed batches.

The workdir must be one directory all hosts see (as orbax's multi-host checkpoints need):
trace shards are read there, host 0 writes the archives and logs there, and resuming reads
them there.
"""
import json

import jax

from whale_jax.parallel import distributed
from whale_jax.rollouts import collector
from whale_jax.rollouts import sharding
from whale_jax.search import proposal as proposal_lib


class ShardedRuntime:
  """This host's HarnessRuntime with the hosts it shares episodes with (module docstring).

  run_episodes and run_many run what they are given on this host (the collector has already
  picked this host's episodes); `hosts` tells the collector (rollouts/collector.py) to split
  every batch by groups and to exchange numbers.

  Args:
    runtime: this host's HarnessRuntime (its sandboxes, served by its own sampler).
    process_index, process_count: this host and the number of hosts (default: jax's).
    allgather: text -> [text of each host]; default distributed.allgather_texts.
  """

  def __init__(self, runtime, process_index=None, process_count=None, allgather=None):
    self.runtime = runtime
    self.hosts = sharding.HostGroup(
        jax.process_index() if process_index is None else process_index,
        jax.process_count() if process_count is None else process_count,
        allgather or distributed.allgather_texts)
    self.local_episodes = 0  # episodes this host ran

  @property
  def process_index(self):
    return self.hosts.index

  @property
  def process_count(self):
    return self.hosts.count

  def run_episodes(self, harness, episodes):
    return self.run_many([(harness, episodes)])[0]

  def run_many(self, batches):
    """[[Trajectory]] of batches [(harness, [Episode])], all run on this host."""
    batches = [(harness, list(episodes)) for harness, episodes in batches]
    self.local_episodes += sum(len(episodes) for _, episodes in batches)
    return collector.run_batches(self.runtime, batches)

  def __getattr__(self, name):  # submit, close, worker_pids, ...: this host's runtime
    return getattr(self.runtime, name)


class HostZeroProposer:
  """A proposer whose propose() runs on host 0 only; the other hosts receive its proposals.

  If host 0's proposer raises, every host raises (RuntimeError on the others), so callers
  that record a failed proposal do so on every host.
  """

  def __init__(self, proposer, process_index=None, broadcast=None):
    self.proposer = proposer
    self.process_index = jax.process_index() if process_index is None else process_index
    self.broadcast = broadcast or distributed.broadcast_text

  def propose(self, context, n):
    return self._on_host_zero(lambda: self.proposer.propose(context, n))

  @property
  def propose_at(self):
    """The wrapped proposer's propose_at(context, indices), run on host 0 only (an
    AttributeError when the wrapped proposer has none, as getattr callers expect)."""
    propose_at = self.proposer.propose_at
    return lambda context, indices: self._on_host_zero(lambda: propose_at(context, indices))

  def _on_host_zero(self, call):
    error, proposals = None, []
    if self.process_index == 0:
      try:
        proposals = list(call())
      except Exception as caught:  # pylint: disable=broad-except
        error = caught
    text = self.broadcast(json.dumps(
        {"error": f"{type(error).__name__}: {error}" if error else "",
         "proposals": [proposal.to_json() for proposal in proposals]}))
    message = json.loads(text)
    if error is not None:
      raise error
    if message["error"]:
      raise RuntimeError(f"host 0's proposer raised {message['error']}")
    return [proposal_lib.Proposal.from_json(data) for data in message["proposals"]]

  def __getattr__(self, name):  # name, tokenizer, ...: the wrapped proposer's
    value = getattr(self.proposer, name)   # AttributeError when the proposer has none
    if name == "for_search":   # a proposer bound to one search stays host 0's
      return lambda *args, **kwargs: HostZeroProposer(value(*args, **kwargs),
                                                      self.process_index, self.broadcast)
    return value


def local_runtime(runtime):
  """This host's own HarnessRuntime: the one a ShardedRuntime wraps, else runtime itself.
  Episodes run on it stay on this host, with no exchange with the others."""
  return runtime.runtime if isinstance(runtime, ShardedRuntime) else runtime


def agree_on_harness(source, broadcast=None):
  """Host 0's harness source on every host (the same text, when the hosts agree)."""
  return (broadcast or distributed.broadcast_text)(source)


def for_processes(runtime, proposer):
  """(runtime, proposer) as a multi-host run uses them; unchanged on a single host."""
  if jax.process_count() == 1:
    return runtime, proposer
  return ShardedRuntime(runtime), HostZeroProposer(proposer)


def on_host_zero(proposer):
  """proposer as a multi-host run asks it (HostZeroProposer: on host 0, its proposals
  broadcast, e.g. Harness Learning's teachers); unchanged on a single host."""
  return proposer if jax.process_count() == 1 else HostZeroProposer(proposer)
