"""A `python -m whale_jax.serve` process for the tests: started, awaited, stopped."""
import contextlib
import os
import subprocess
import sys
import threading

import pytest


@contextlib.contextmanager
def started(flags, wait_seconds=600):
  """Yields (base URL ending in /v1, the lines printed so far) of a server started with flags,
  once it listens (it warms every program first: ~1 min on 2 cores); stops it afterwards."""
  process = subprocess.Popen(
      [sys.executable, "-m", "whale_jax.serve", "--port=0", *flags],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      env={**os.environ, "JAX_PLATFORMS": "cpu"})
  lines = []
  found = threading.Event()

  def read():
    for line in process.stdout:
      lines.append(line)
      if "http://" in line:
        found.set()
  threading.Thread(target=read, daemon=True).start()
  if not found.wait(wait_seconds):
    process.kill()
    pytest.fail("whale_jax.serve did not start:\n" + "".join(lines))
  url = next(line for line in lines if "http://" in line).split(" on ")[-1].strip()
  try:
    yield url, list(lines)
  finally:
    process.terminate()
    try:
      process.wait(15)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
