"""Test setup: eight fake CPU devices, so mesh and sharding code runs on any machine."""
import os
import shutil
import tempfile

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8").strip()
# One persistent XLA compilation cache for the whole test run and every process it starts
# (pytest-xdist workers, jax.distributed workers, served models), so a program that several
# tests build (a tiny model's train step, its sampler's buckets) compiles once; removed at the
# end of the run by the process that made it. WHALE_JAX_TEST_COMPILATION_CACHE=0 turns it off.
if (os.environ.get("WHALE_JAX_TEST_COMPILATION_CACHE", "1") != "0"
    and "JAX_COMPILATION_CACHE_DIR" not in os.environ):
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="whale_jax_tests_xla_")
  os.environ["WHALE_JAX_TEST_COMPILATION_CACHE_OWNER"] = str(os.getpid())
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")



from tests import tolerance_audit  # noqa: E402  (after the environment above)

tolerance_audit.install()


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  tolerance_audit.write()
  if os.environ.get("WHALE_JAX_TEST_COMPILATION_CACHE_OWNER") == str(os.getpid()):
    shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def pytest_itemcollected(item):
  """Under pytest-xdist (`--dist loadgroup`, pytest.ini), each test file runs on one worker, so
  a module fixture (a compiled sampler, a sandbox, a tokenizer) is built once, and the files
  that share tests/serve's one served model run on one worker, which starts it once. The mark
  goes on as each test is collected, before any collection_modifyitems hook (xdist reads it
  in its own)."""
  path = item.nodeid.split("::", 1)[0]
  item.add_marker(pytest.mark.xdist_group("tests/serve" if path.startswith("tests/serve/")
                                          else path))


def pytest_xdist_node_collection_finished(node, ids):
  """Under --dist loadgroup every test id a worker collected must carry its group
  ("...@group"): xdist schedules by that suffix, and with a pytest whose ids it cannot rewrite
  (9.x with xdist 3.8) each file would spread over the workers silently."""
  ungrouped = [nodeid for nodeid in ids if "@" not in nodeid]
  if node.config.getvalue("dist") == "loadgroup" and ungrouped:
    raise pytest.UsageError(
        f"pytest-xdist did not group {ungrouped[0]} (pytest {pytest.__version__}): install "
        "the test extra's pytest (setup.py: pytest>=8.4,<9) or run with -n 0.")
