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


# The server the serve tests share (tests/serve/conftest.py): the embedded solver with 64 slots
# and a 2,048-token context (the judge's prompt is ~1,300 tokens of the solver's vocabulary),
# 4 decode steps per device call (a streamed chunk after each), at most 64 queued requests,
# and the default --bucket_ratio=8: a warmed grid of 3 slot batches x 3 cache lengths.
SHARED_MODEL = "embedded"
SHARED_MAX_PENDING = 64
SHARED_MAX_SLOTS = 64
SHARED_CONTEXT = 2048
SHARED_STEPS_PER_CALL = 4


def shared_flags(compilation_cache_dir):
  return [f"--model={SHARED_MODEL}", f"--max_pending_requests={SHARED_MAX_PENDING}",
          f"--max_slots={SHARED_MAX_SLOTS}", f"--steps_per_call={SHARED_STEPS_PER_CALL}",
          f"--max_cache_length={SHARED_CONTEXT}",
          f"--compilation_cache_dir={compilation_cache_dir}"]
