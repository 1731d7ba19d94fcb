r"""Runs one experiment from a config file.

  python -m whale_jax.main --config=configs/demo.py --workdir=runs/demo
  python -m whale_jax.main --config=configs/whale.py:searchqa --workdir=gs://BUCKET/whale/run1
  python -m whale_jax.main --config=configs/whale.py:smoke --config.loop.seed=3 --workdir=/tmp/w

Restarting with the same --workdir resumes the run from its last checkpoint.
"""
import logging

from whale_jax import quiet  # pylint: disable=unused-import  # before jax and transformers

from absl import app
from absl import flags
from absl import logging as absl_logging
from ml_collections import config_flags

from whale_jax.algorithms import experiment

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory the run writes to (and resumes "
                               "from).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")
flags.mark_flags_as_required(["config", "workdir"])


class _QuietLibraries(logging.Filter):
  """Drops INFO records of checkpointing libraries (orbax logs every step of every save)."""

  def filter(self, record):
    return record.levelno > logging.INFO or "/orbax/" not in record.pathname


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  absl_logging.get_absl_handler().addFilter(_QuietLibraries())
  experiment.run(_CONFIG.value, _WORKDIR.value, show_progress=_PROGRESS.value)


if __name__ == "__main__":
  app.run(main)
