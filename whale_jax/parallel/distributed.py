"""Multi-host setup: initialize jax.distributed, preflight checks, and host-0 broadcasts.

On a TPU pod every host runs the same program; `initialize()` discovers the coordinator from
the TPU environment. On CPU (tests, a laptop) pass the coordinator address, the number of
processes and this process's id, or set WHALE_JAX_COORDINATOR, WHALE_JAX_NUM_PROCESSES and
WHALE_JAX_PROCESS_ID (launch/local.sh does).

`preflight()` fails fast, with a sentence saying what to change, when hosts disagree: process
count, devices versus the mesh, or package versions. `broadcast_text()` sends host 0's string
(e.g. the accepted harness source) to every host; `allgather_texts()` gives every host each
host's string (e.g. the trajectories of its share of the episodes).

Every move of host data between processes goes through `_allgather` (texts, digests) or
`allgather_global` (a numpy copy of an array sharded over processes), and each is counted in
TRAFFIC, per label (default: the calling module and function, e.g. "hosts.run_many"):

  TRAFFIC.snapshot() -> {"gathers", "bytes_sent", "bytes_received", "seconds",
                         "by_label": {label: {the same four}}}
  TRAFFIC.reset()

bytes_sent is what this host put into a gather (once, however many hosts receive it; padding
included), bytes_received what the others' parts add up to: in every gather, each host's
bytes_received is the sum of the other hosts' bytes_sent. seconds is the wall time of the
gathers (waiting for the slowest host included). A single process moves nothing and records
nothing. Not counted here: the collectives inside jitted programs (gradient reductions, the
trainer-to-sampler weight handoff), which move device arrays, not host data.
"""
import hashlib
import importlib.metadata
import os
import platform
import sys
import threading
import time

import jax
import numpy as np

PACKAGES = ("jax", "jaxlib", "whale_jax", "optax", "orbax-checkpoint", "transformers", "numpy")


def initialize(coordinator_address=None, num_processes=None, process_id=None,
               timeout_seconds=300):
  """Starts jax.distributed when there is more than one process; returns the process count."""
  coordinator_address = coordinator_address or os.environ.get("WHALE_JAX_COORDINATOR")
  if num_processes is None and "WHALE_JAX_NUM_PROCESSES" in os.environ:
    num_processes = int(os.environ["WHALE_JAX_NUM_PROCESSES"])
  if process_id is None and "WHALE_JAX_PROCESS_ID" in os.environ:
    process_id = int(os.environ["WHALE_JAX_PROCESS_ID"])
  on_tpu_pod = "TPU_WORKER_HOSTNAMES" in os.environ or "MEGASCALE_COORDINATOR_ADDRESS" in os.environ
  if jax.distributed.is_initialized():  # e.g. by the caller, before experiment.run
    return jax.process_count()
  if coordinator_address is None and not on_tpu_pod:
    return 1  # a single process: nothing to coordinate
  if coordinator_address is not None and (num_processes is None or process_id is None):
    raise ValueError(f"coordinator_address={coordinator_address!r} needs num_processes and "
                     "process_id too (or WHALE_JAX_NUM_PROCESSES / WHALE_JAX_PROCESS_ID).")
  if jax.config.jax_platforms in ("cpu",) or os.environ.get("JAX_PLATFORMS") == "cpu":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id,
                             initialization_timeout=timeout_seconds)
  return jax.process_count()


def version_fingerprint(extra="") -> str:
  """A string naming the versions that must agree across hosts."""
  versions = []
  for package in PACKAGES:
    try:
      versions.append(f"{package}=={importlib.metadata.version(package)}")
    except importlib.metadata.PackageNotFoundError:
      versions.append(f"{package}==absent")
  versions.append(f"python=={platform.python_version()}")
  if extra:
    versions.append(extra)
  return ";".join(versions)


class Traffic:
  """Bytes this process sent to and received from the other processes (module docstring)."""

  FIELDS = ("gathers", "bytes_sent", "bytes_received", "seconds")

  def __init__(self):
    self._lock = threading.Lock()
    self.reset()

  def reset(self):
    with self._lock:
      self._by_label = {}

  def record(self, label, bytes_sent, bytes_received, seconds):
    """Adds one gather under label."""
    with self._lock:
      row = self._by_label.setdefault(label, dict.fromkeys(self.FIELDS, 0))
      row["gathers"] += 1
      row["bytes_sent"] += int(bytes_sent)
      row["bytes_received"] += int(bytes_received)
      row["seconds"] += float(seconds)

  def snapshot(self):
    """Totals since the reset, overall and per label (copies)."""
    with self._lock:
      by_label = {label: dict(row) for label, row in self._by_label.items()}
    totals = {name: sum(row[name] for row in by_label.values()) for name in self.FIELDS}
    return {**totals, "by_label": by_label}


TRAFFIC = Traffic()


def _caller_label():
  """"module.function" of the nearest caller outside this module (e.g. "hosts.run_many")."""
  frame = sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None and frame.f_globals.get("__name__") == __name__:
    frame = frame.f_back
  if frame is None:
    return "unknown"
  module = frame.f_globals.get("__name__", "").rpartition(".")[2]
  return f"{module}.{frame.f_code.co_name}"


def _allgather(array, label):
  """[process_count, *array.shape] numpy: every host's array (all hosts pass the same shape
  and dtype), counted in TRAFFIC under label."""
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  started = time.perf_counter()
  gathered = np.asarray(multihost_utils.process_allgather(array))
  count = jax.process_count()
  if count > 1:  # each host's part as it moved (int64 moves as int32 unless jax_enable_x64)
    share = gathered.nbytes // count
    TRAFFIC.record(label, share, gathered.nbytes - share, time.perf_counter() - started)
  return gathered.reshape(count, *array.shape)


def allgather_global(x, label=None):
  """A numpy copy of x, a jax.Array that may span processes (every host must call this
  together); counted in TRAFFIC when it does: this host sends the shards it is the first
  replica of and receives what it does not hold."""
  if not isinstance(x, jax.Array) or x.is_fully_addressable:
    return np.asarray(jax.device_get(x))
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  started = time.perf_counter()
  gathered = np.asarray(multihost_utils.process_allgather(x, tiled=True))
  held = {}
  for shard in x.addressable_shards:
    key = tuple((s.start, s.stop, s.step) for s in shard.index)
    held[key] = shard.data.nbytes
  owned = sum(shard.data.nbytes for shard in x.addressable_shards if shard.replica_id == 0)
  TRAFFIC.record(label or _caller_label(), owned, gathered.nbytes - sum(held.values()),
                 time.perf_counter() - started)
  return gathered


def _allgather_digests(text, label=None):
  """[process_count] int64 digests of each host's text."""
  digest = np.frombuffer(hashlib.sha256(text.encode()).digest()[:8], np.int64)
  return _allgather(digest, label or _caller_label()).reshape(-1)


def preflight(mesh_shape=None, expected_processes=None, extra_fingerprint=""):
  """Checks that the hosts agree before anything is compiled; raises RuntimeError if not.

  Args:
    mesh_shape: {axis: size} of the mesh to be built (sizes already resolved, no -1).
    expected_processes: the number of hosts the launcher started.
    extra_fingerprint: more text that must agree across hosts (e.g. a config hash).
  """
  if expected_processes is not None and jax.process_count() != expected_processes:
    raise RuntimeError(
        f"jax sees {jax.process_count()} processes but {expected_processes} were launched. "
        "Check that every worker ran the command and reached the same coordinator.")
  if mesh_shape is not None:
    size = int(np.prod(list(mesh_shape.values())))
    if size != jax.device_count():
      raise RuntimeError(f"The mesh {dict(mesh_shape)} needs {size} devices but there are "
                         f"{jax.device_count()} ({jax.process_count()} hosts x "
                         f"{jax.local_device_count()}). Change config.mesh.")
  fingerprint = version_fingerprint(extra_fingerprint)
  digests = _allgather_digests(fingerprint, "distributed.preflight")
  if jax.process_count() > 1 and len(set(digests.tolist())) > 1:
    mismatched = [i for i, d in enumerate(digests) if d != digests[0]]
    raise RuntimeError(
        f"Hosts {mismatched} run different package versions or settings than host 0; this host "
        f"has: {fingerprint}. Install the same versions on every worker (launch/tpu_pod.sh "
        "install) and pass the same config.")
  return fingerprint


def broadcast_text(text, label=None):
  """Host 0's text on every host (each host passes its own; only host 0's is kept)."""
  if label is None:  # allgather_texts labels the gather with this function's caller
    return allgather_texts(text or "")[0]
  return allgather_texts(text or "", label)[0]


def allgather_texts(text, label=None):
  """[text of host 0, text of host 1, ...] on every host (each host passes its own).

  Two gathers: the byte lengths (an int64 a host, 4 bytes as jax moves it without x64), then
  every host's UTF-8 bytes padded to the longest (TRAFFIC counts the padding: it moves too)."""
  if jax.process_count() == 1:
    return [text]
  label = label or _caller_label()
  data = np.frombuffer(text.encode("utf-8"), np.uint8)
  lengths = _allgather(np.array([len(data)], np.int64), label).reshape(-1)
  padded = np.zeros(max(int(lengths.max()), 1), np.uint8)
  padded[:len(data)] = data
  rows = _allgather(padded, label).reshape(len(lengths), -1)
  return [bytes(row[:length]).decode("utf-8") for row, length in zip(rows, lengths)]
