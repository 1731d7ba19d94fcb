r"""Runs one experiment from a config file.

  python -m whale_jax.main --config=configs/demo.py --workdir=runs/demo
  python -m whale_jax.main --config=configs/whale.py:searchqa --workdir=gs://BUCKET/whale/run1
  python -m whale_jax.main --config=configs/whale.py:smoke --config.loop.seed=3 --workdir=/tmp/w

Restarting with the same --workdir resumes the run from its last checkpoint. A bad config (an
unknown get_config argument, key or flag, a wrong type, a value out of range, a missing
checkpoint, a split size, mismatched temperatures, a workdir that is a file) is refused in one
line before jax starts (whale_jax/algorithms/experiment_config.py builds the typed config once),
with exit status 2; a domain whose data cannot make its splits, just before the model loads. Then the machine's cheap checks
(whale_jax/check.py: the sandbox, free disk, the config's data files) run, exit status 1 with
the fix when one fails, still before a model loads.
"""
import importlib.util
import logging
import sys

from whale_jax import quiet  # pylint: disable=unused-import  # before jax and transformers

from absl import app
from absl import flags
from absl import logging as absl_logging
from ml_collections import config_flags

from whale_jax.algorithms import config_check
from whale_jax.algorithms import experiment_config

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory the run writes to (and resumes "
                               "from).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")
flags.mark_flags_as_required(["config", "workdir"])
USAGE_ERROR = 2


class _QuietLibraries(logging.Filter):
  """Drops INFO records of checkpointing libraries (orbax logs every step of every save)."""

  def filter(self, record):
    return record.levelno > logging.INFO or "/orbax/" not in record.pathname


def _refuse(message):
  lines = [line.strip() for line in str(message).splitlines() if line.strip()]
  if any(line.startswith("Traceback") for line in lines):  # an error raised by get_config
    lines = [lines[-1].split(": ", 1)[-1]]
  sys.stderr.write(f"FATAL config error: {' '.join(lines)}\n")
  sys.exit(USAGE_ERROR)


def _overrides(argv):
  """[(flag name, ("loop", "seed"), value text)] of the --config.<path>=<value> in argv."""
  overrides = []
  for argument in argv[1:]:
    if argument.startswith("--config."):
      name, _, value = argument.partition("=")
      overrides.append((name, tuple(name[len("--config."):].split(".")), value))
  return overrides


def _load_config(argv):
  """The config of argv's --config=<file>[:<argument>], without the overrides."""
  spec = next(argument.split("=", 1)[1] for argument in argv if argument.startswith("--config="))
  path, _, argument = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location("_whale_jax_config", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(argument) if argument else module.get_config()


def _bad_override(config, argv):
  """One line on the first --config.<path> override that names a missing key or gives a
  value of the wrong type, or None."""
  for name, path, value in _overrides(argv):
    node, walked = config, "config"
    for key in path:
      keys = list(node.keys()) if hasattr(node, "keys") else []
      if key not in keys:
        return (f"{name}: {walked} has no key {key!r}{config_check.did_you_mean(key, keys)}; "
                f"{walked} has {', '.join(sorted(map(str, keys))) or 'no keys'}.")
      node, walked = node[key], f"{walked}.{key}"
    if not hasattr(node, "keys"):
      kind = {"int": "an int", "float": "a number", "str": "a string",
              "bool": "True or False"}.get(type(node).__name__, type(node).__name__)
      return (f"{name}={value}: {walked} takes {kind} (the config file sets {node!r}); give "
              f"it {kind}.")
  return None


def parse_flags(argv):
  """absl's flag parsing, with every user error (a bad get_config argument, an override of
  a key the config lacks, a bad flag value) reported in one line instead of a traceback."""
  try:
    return flags.FLAGS(argv)
  except Exception as error:  # pylint: disable=broad-except  # flags.Error or from the file
    message = None
    if _overrides(argv):
      try:
        message = _bad_override(_load_config(argv), argv)
      except Exception:  # pylint: disable=broad-except
        message = None
    _refuse(message or error)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  config = _CONFIG.value
  try:
    config.to_dict()
  except OSError as error:  # the config file could not be loaded (e.g. there is none)
    _refuse(error)
  try:  # before jax: the typed config, built and checked once; refuses a bad one in ~2 s
    experiment = experiment_config.parse(config, _WORKDIR.value)
  except config_check.ConfigError as error:
    _refuse(error)
  from whale_jax import check  # pylint: disable=g-import-not-at-top
  try:  # the sandbox, free disk and data files, before a model loads
    check.cheap_checks(config.to_dict(), _WORKDIR.value)
  except check.CheckFailed as error:
    sys.stderr.write(f"FATAL machine check failed: {error}\n")
    sys.exit(1)
  absl_logging.get_absl_handler().addFilter(_QuietLibraries())
  from whale_jax.algorithms import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  try:
    experiment_lib.run(experiment, _WORKDIR.value, show_progress=_PROGRESS.value)
  except config_check.ConfigError as error:
    _refuse(error)


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
