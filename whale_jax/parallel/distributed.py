"""Multi-host setup: initialize jax.distributed, preflight checks, and host-0 broadcasts.

On a TPU pod every host runs the same program; `initialize()` discovers the coordinator from
the TPU environment. On CPU (tests, a laptop) pass the coordinator address, the number of
processes and this process's id, or set WHALE_JAX_COORDINATOR, WHALE_JAX_NUM_PROCESSES and
WHALE_JAX_PROCESS_ID (launch/local.sh does).

`preflight()` fails fast, with a sentence saying what to change, when hosts disagree: process
count, devices versus the mesh, or package versions. `broadcast_text()` sends host 0's string
(e.g. the accepted harness source) to every host; `allgather_texts()` gives every host each
host's string (e.g. the trajectories of its share of the episodes).
"""
import hashlib
import importlib.metadata
import os
import platform

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


def _allgather_digests(text):
  """[process_count] int64 digests of each host's text."""
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  digest = np.frombuffer(hashlib.sha256(text.encode()).digest()[:8], np.int64)
  return np.asarray(multihost_utils.process_allgather(digest)).reshape(-1)


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
  digests = _allgather_digests(fingerprint)
  if jax.process_count() > 1 and len(set(digests.tolist())) > 1:
    mismatched = [i for i, d in enumerate(digests) if d != digests[0]]
    raise RuntimeError(
        f"Hosts {mismatched} run different package versions or settings than host 0; this host "
        f"has: {fingerprint}. Install the same versions on every worker (launch/tpu_pod.sh "
        "install) and pass the same config.")
  return fingerprint


def broadcast_text(text):
  """Host 0's text on every host (each host passes its own; only host 0's is kept)."""
  return allgather_texts(text or "")[0]


def allgather_texts(text):
  """[text of host 0, text of host 1, ...] on every host (each host passes its own)."""
  if jax.process_count() == 1:
    return [text]
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  data = np.frombuffer(text.encode("utf-8"), np.uint8)
  lengths = np.asarray(multihost_utils.process_allgather(
      np.array([len(data)], np.int64))).reshape(-1)
  padded = np.zeros(max(int(lengths.max()), 1), np.uint8)
  padded[:len(data)] = data
  rows = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(lengths), -1)
  return [bytes(row[:length]).decode("utf-8") for row, length in zip(rows, lengths)]
