"""Sampling: the jitted sampler, the generation engine and the generate API.

The API types (SamplingParams, Completion, LLMBackend) import no jax; Engine and Sampler are
imported on first use, so reading a config's sampling section never starts jax.
"""
import importlib

from whale_jax.sampling.api import Completion
from whale_jax.sampling.api import LLMBackend
from whale_jax.sampling.api import SamplingParams

_LAZY = {"Engine": "whale_jax.sampling.engine", "Sampler": "whale_jax.sampling.engine"}


def __getattr__(name):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module 'whale_jax.sampling' has no attribute {name!r}")
