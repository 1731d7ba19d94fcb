"""One `python -m whale_jax.serve` process for all the serve tests (its start-up compiles and
runs every program it can need: about a minute on 2 cores), with an empty compilation cache of
its own, so its start-up compiles every program and its warm-up report counts them all."""
import pytest

from tests.serve import server_process


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory):
  """(base URL ending in /v1, the lines it printed while starting, its compilation cache dir)."""
  cache_dir = tmp_path_factory.mktemp("compilation_cache")
  with server_process.started(server_process.shared_flags(cache_dir)) as (url, lines):
    yield url, lines, cache_dir
