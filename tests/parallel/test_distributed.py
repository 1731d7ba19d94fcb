"""Two local processes with jax.distributed: preflight, broadcast and a sharded computation."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np

WORKER = pathlib.Path(__file__).with_name("multihost_worker.py")


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run_two_processes(tmp_path, extras=("", "")):
  port = _free_port()
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
  procs, outputs = [], []
  for process_id in range(2):
    out = tmp_path / f"out{process_id}.json"
    outputs.append(out)
    procs.append(subprocess.Popen(
        [sys.executable, str(WORKER), str(port), str(process_id), "2", str(out),
         extras[process_id]], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
  logs = [p.communicate(timeout=120)[0].decode(errors="replace") for p in procs]
  for p, log in zip(procs, logs):
    assert p.returncode == 0, log[-3000:]
  return [json.loads(out.read_text()) for out in outputs]


def test_two_processes_agree_and_compute_like_one(tmp_path):
  results = run_two_processes(tmp_path)
  expected = float((np.arange(24, dtype=np.float32) ** 2).sum())
  for index, result in enumerate(results):
    assert result["process_index"] == index
    assert result["process_count"] == 2 and result["device_count"] == 4
    assert result["preflight"] == "ok"
    assert result["broadcast"] == "harness from host 0"
    assert result["sum_of_squares"] == expected


def test_preflight_names_hosts_with_other_versions(tmp_path):
  results = run_two_processes(tmp_path, extras=("config=a", "config=b"))
  for result in results:
    assert result["preflight"].startswith("Hosts [1] run different package versions")
