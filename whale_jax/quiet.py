"""Keeps library start-up chatter off the console; imported first by the entry points.

  from whale_jax import quiet  # pylint: disable=unused-import   (before jax / transformers)

  - JAX_PLATFORMS: when unset and no accelerator plugin is installed (no libtpu, no
    jax_plugins entry point such as jax-cuda12-plugin), it is set to "cpu", so that JAX does
    not probe for a TPU and log "Unable to initialize backend 'tpu'". With a plugin installed,
    or with JAX_PLATFORMS set, nothing changes.
  - TRANSFORMERS_NO_ADVISORY_WARNINGS=1 (unless set): transformers does not warn that PyTorch
    is missing; whale_jax uses it only for tokenizers and configs.
  - Records below WARNING from jax's backend probing and from bm25s's index building are
    dropped (a logger filter, which stays when the library later changes the logger's level).
  - JAX's "Some donated buffers were not usable" UserWarning is not shown: it is a note on
    memory reuse of a jitted call (the sampler's slot state), not a problem of the run.
"""
import importlib.metadata
import importlib.util
import logging
import os
import warnings

_QUIET_LOGGERS = ("jax._src.xla_bridge", "bm25s")


def _has_accelerator_plugin():
  if importlib.util.find_spec("libtpu") is not None:
    return True
  try:
    return bool(list(importlib.metadata.entry_points(group="jax_plugins")))
  except Exception:  # pylint: disable=broad-except  # broken metadata: assume there may be one
    return True


def _warnings_and_above(record):
  return record.levelno >= logging.WARNING


def quiet():
  """Applies the module docstring's settings (idempotent)."""
  if "JAX_PLATFORMS" not in os.environ and not _has_accelerator_plugin():
    os.environ["JAX_PLATFORMS"] = "cpu"
  os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
  warnings.filterwarnings("ignore", message="Some donated buffers were not usable",
                          category=UserWarning)
  for name in _QUIET_LOGGERS:
    logger = logging.getLogger(name)
    if _warnings_and_above not in logger.filters:
      logger.addFilter(_warnings_and_above)


quiet()
