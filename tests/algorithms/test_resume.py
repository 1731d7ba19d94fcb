"""A run killed with SIGKILL in a weight phase and again in a harness phase, then resumed,
ends in the same state as an uninterrupted run."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from tests.algorithms import tiny
from whale_jax.algorithms import experiment

ROOT = pathlib.Path(__file__).resolve().parents[2]
VOLATILE = ("seconds", "duration", "eval_seconds", "wall", "started")


def _start(workdir):
  env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
  env.pop("XLA_FLAGS", None)
  return subprocess.Popen(
      [sys.executable, "-m", "whale_jax.main", "--config=tests/algorithms/tiny_config.py:whale",
       f"--workdir={workdir}", "--noprogress"], cwd=ROOT, env=env,
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _run_until(workdir, condition, timeout_seconds=600):
  """Starts the run; SIGKILLs it as soon as condition(workdir) holds (or lets it finish)."""
  process = _start(workdir)
  deadline = time.time() + timeout_seconds
  while process.poll() is None and time.time() < deadline:
    if condition is not None and condition(workdir):
      process.send_signal(signal.SIGKILL)
      process.wait()
      return "killed"
    time.sleep(0.05)
  if process.poll() is None:
    process.kill()
    pytest.fail("the run did not finish in time")
  assert process.returncode == 0, process.stderr.read().decode()[-3000:]
  return "finished"


def _weight_step_logged(step):
  def condition(workdir):
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
      return False
    return any(json.loads(line).get("weight_step") == step
               for line in open(path) if line.endswith("\n"))
  return condition


def _harness_candidate_archived(workdir):
  return os.path.isdir(os.path.join(workdir, "archive", "cycle_000", "candidates", "c0000"))


def _final_state(workdir):
  run = experiment.build_run(tiny.tiny_config("whale"), workdir, show_progress=False)
  try:
    params = jax.device_get(run.policy.state["params"])
    archive_rows = [json.loads(line) for line in
                    open(os.path.join(workdir, "archive", "cycle_000", "summary.jsonl"))]
    metrics = [{k: v for k, v in json.loads(line).items()
                if not any(word in k for word in VOLATILE)}
               for line in open(os.path.join(workdir, "metrics.jsonl"))]
    return params, run.state.incumbent, run.counts.to_json(), archive_rows, metrics
  finally:
    run.runtime.close()
    run.policy.close()


@pytest.mark.slow
def test_killed_twice_and_resumed_equals_uninterrupted(tmp_path):
  reference, interrupted = str(tmp_path / "reference"), str(tmp_path / "interrupted")
  assert _run_until(reference, None) == "finished"
  assert _run_until(interrupted, _weight_step_logged(1)) == "killed"
  assert _run_until(interrupted, _harness_candidate_archived) == "killed"
  assert _run_until(interrupted, None) == "finished"
  expected, actual = _final_state(reference), _final_state(interrupted)
  for a, b in zip(jax.tree.leaves(expected[0]), jax.tree.leaves(actual[0])):
    np.testing.assert_array_equal(a, b)
  assert expected[1] == actual[1]  # incumbent harness source
  assert expected[2] == actual[2]  # rollout counters
  strip = lambda rows: [{k: v for k, v in row.items() if "seconds" not in k} for row in rows]
  assert strip(expected[3]) == strip(actual[3])  # archive summary
  assert expected[4] == actual[4]  # metrics rows
