"""What this process did, counted where it happens: one set of counters per process.

  accounting.COUNTERS.add("episodes", 4)             # a count
  with accounting.COUNTERS.timed("verify"): ...      # seconds spent in a phase
  accounting.COUNTERS.add_seconds("search", 12.5)
  before = accounting.COUNTERS.snapshot()            # {"counts": {name: int},
  ...                                                #  "seconds": {name: float}}
  accounting.difference(accounting.COUNTERS.snapshot(), before)   # what happened in between

Counted (on every host of a multi-host run, each its own):
  episodes            episodes submitted to this process's harness runtime (harness/runtime.py)
  verify_calls        calls of tasks.domain.verify_episodes on this process, and
  verified_episodes   the episodes they scored (a judge's requests among them)
  seconds             rollouts (this runtime's run_many), verify (verify_episodes), train (the
                      loop's policy.train calls), search and gate (a harness search and a
                      validation gate, their episodes included), evaluation (test mean@k)

The bytes that cross processes are counted beside the transfers, in distributed.TRAFFIC.
algorithms/run_log.py writes both, per host, with every metrics row
(workdir/host_metrics/host_<i>.jsonl). The counters are a few dict updates under a
lock (episodes finish on the runtime's worker threads); they never change what a run does.
"""
import contextlib
import threading
import time


class Counters:
  """Named counts and seconds of one process (module docstring)."""

  def __init__(self):
    self._lock = threading.Lock()
    self.reset()

  def reset(self):
    with self._lock:
      self._counts, self._seconds = {}, {}

  def add(self, name, amount=1):
    with self._lock:
      self._counts[name] = self._counts.get(name, 0) + int(amount)

  def add_seconds(self, name, seconds):
    with self._lock:
      self._seconds[name] = self._seconds.get(name, 0.0) + float(seconds)

  @contextlib.contextmanager
  def timed(self, name):
    """Adds the seconds the block takes (also when it raises) to seconds[name]."""
    started = time.perf_counter()
    try:
      yield
    finally:
      self.add_seconds(name, time.perf_counter() - started)

  def snapshot(self):
    """{"counts": {name: int}, "seconds": {name: float}}: copies, totals since the reset."""
    with self._lock:
      return {"counts": dict(self._counts), "seconds": dict(self._seconds)}


def difference(after, before):
  """after - before, key by key, for nested dicts of numbers (two snapshots); a key missing
  from before counts as 0, and keys whose difference is 0 are left out."""
  result = {}
  for key, value in after.items():
    if isinstance(value, dict):
      nested = difference(value, before.get(key, {}))
      if nested:
        result[key] = nested
    else:
      change = value - before.get(key, 0)
      if change:
        result[key] = change
  return result


COUNTERS = Counters()
