"""A two-process run (jax.distributed over local processes, one shared workdir) with one of
its processes killed in a weight phase and again in a harness phase, both restarted each time,
ends with the same summary, metrics and archive as an uninterrupted two-process run.

On a pod a host dies alone: its peers then block in their next collective (or fail in it) and
the launcher restarts every worker. The test does that: SIGKILL one process, give the other a
few seconds to fail on its own, SIGKILL it if it has not, and start both again on the same
workdir.
"""
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.algorithms.test_resume import _harness_candidate_archived
from tests.algorithms.test_resume import _weight_step_logged

ROOT = pathlib.Path(__file__).resolve().parents[2]
VOLATILE = ("seconds", "duration", "wall", "started", "load", "bytes")


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start_both(workdir):
  port = _free_port()
  processes = []
  for process_id in range(2):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
           "WHALE_JAX_COORDINATOR": f"127.0.0.1:{port}", "WHALE_JAX_NUM_PROCESSES": "2",
           "WHALE_JAX_PROCESS_ID": str(process_id)}
    log = open(os.path.join(os.path.dirname(workdir),
                            f"{os.path.basename(workdir)}_p{process_id}.log"), "ab")
    processes.append(subprocess.Popen(
        [sys.executable, "-m", "whale_jax.main", "--config=tests/algorithms/tiny_config.py:whale",
         "--config.mesh.data=-1", "--config.mesh.num_devices=0", f"--workdir={workdir}",
         "--noprogress"], cwd=ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT))
  return processes


def _run_until(workdir, condition, victim=1, timeout_seconds=1200):
  """Starts both processes; when condition(workdir) holds, SIGKILLs process `victim`, then the
  other unless it exits within 20 s. Returns "killed" or "finished"."""
  processes = _start_both(workdir)
  deadline = time.time() + timeout_seconds
  try:
    while any(p.poll() is None for p in processes) and time.time() < deadline:
      if condition is not None and condition(workdir):
        processes[victim].send_signal(signal.SIGKILL)
        processes[victim].wait()
        survivor = processes[1 - victim]
        try:
          survivor.wait(timeout=20)
        except subprocess.TimeoutExpired:
          survivor.send_signal(signal.SIGKILL)
          survivor.wait()
        return "killed"
      time.sleep(0.05)
    if any(p.poll() is None for p in processes):
      pytest.fail("the two-process run did not finish in time")
    logs = [(pathlib.Path(workdir).parent / f"{pathlib.Path(workdir).name}_p{i}.log")
            for i in range(2)]
    for process, log in zip(processes, logs):
      assert process.returncode == 0, log.read_text(errors="replace")[-3000:]
    return "finished"
  finally:
    for p in processes:
      if p.poll() is None:
        p.kill()


def _strip(value):
  if isinstance(value, dict):
    return {k: _strip(v) for k, v in value.items() if not any(w in k for w in VOLATILE)}
  if isinstance(value, list):
    return [_strip(v) for v in value]
  return value


def _final(workdir):
  summary = json.loads(pathlib.Path(workdir, "summary.json").read_text())
  metrics = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  archive = [json.loads(line) for line in
             open(os.path.join(workdir, "archive", "cycle_000", "summary.jsonl"))]
  return _strip(summary), _strip(metrics), _strip(archive)


@pytest.mark.slow  # five two-process runs of the tiny WHALE recipe: ~4 min on 2 cores
def test_two_processes_killed_twice_and_restarted_equal_an_uninterrupted_run(tmp_path):
  reference, interrupted = str(tmp_path / "reference"), str(tmp_path / "interrupted")
  assert _run_until(reference, None) == "finished"
  # Host 1 dies after the first weight step is logged; then host 0 dies in the harness search.
  assert _run_until(interrupted, _weight_step_logged(1), victim=1) == "killed"
  assert _run_until(interrupted, _harness_candidate_archived, victim=0) == "killed"
  assert _run_until(interrupted, None) == "finished"
  # Each restart resumed from the shared workdir (a fresh start would also end alike, and would
  # append its metrics again): host 0's log names the phase it resumed in, the harness phase
  # after the second kill.
  log = (tmp_path / "interrupted_p0.log").read_text(errors="replace")
  resumed = [line for line in log.splitlines() if "Resumed" in line]
  assert len(resumed) == 2 and "phase harness" in resumed[1], resumed
  expected, actual = _final(reference), _final(interrupted)
  assert actual[0] == expected[0]  # summary.json
  assert actual[1] == expected[1]  # metrics rows
  assert actual[2] == expected[2]  # the archive's summary
