"""The tiny test config as a config file, for runs in a subprocess (see test_resume.py).

  python -m whale_jax.main --config=tests/algorithms/tiny_config.py:whale --workdir=...
"""
from tests.algorithms import tiny


def get_config(arg="whale"):
  return tiny.tiny_config(arg or "whale")
