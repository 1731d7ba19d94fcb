"""The config checks that look at the filesystem: the paths the typed sections name (a
checkpoint, a tokenizer, a proposer's files) and the workdir. Each raises ConfigError, one line
naming the full key path and the fix; experiment_config.parse calls them once, before jax
starts, after typed_config has read the sections (their keys, types and values are checked by
the sections' classes: sections.ModelSection, SearchSection, MeshSection,
tasks/registry.DomainSection and the rest).

  config_check.check_model_path(experiment.model, "config.model")
  config_check.check_search_paths(experiment.search, "config.search")

aot.py reads the same sections on a host without the checkpoints; these checks are not theirs.
"""
import os

from whale_jax import typed_config

ConfigError = typed_config.ConfigError
did_you_mean = typed_config.did_you_mean
check_keys = typed_config.check_keys
check_choice = typed_config.check_choice

NAMED_TOKENIZERS = ("byte", "embedded")


def _check_path(path, key_path, what):
  if not isinstance(path, str) or not path:
    raise ConfigError(f"{key_path}={path!r}; it must be the path of {what}.")
  if not os.path.exists(path):
    raise ConfigError(f"{key_path}={path!r} does not exist (looked in {os.getcwd()}); "
                      f"download {what} there or point {key_path} at it.")


def check_model_path(model, key_path="config.model"):
  """An "hf" model section's checkpoint directory exists."""
  if model.source == "hf":
    _check_path(model.path, f"{key_path}.path", "the checkpoint directory")


def check_tokenizer(name, key_path="config.tokenizer"):
  if not isinstance(name, str):
    raise ConfigError(f"{key_path}={name!r}; use 'byte', 'embedded', a tokenizer path, or '' "
                      "for the model directory's own.")
  if name and name not in NAMED_TOKENIZERS:
    _check_path(name, key_path, "the tokenizer")


def check_search_paths(search, key_path="config.search"):
  """The files a search section names exist: in_process's model_path, a coding agent's
  instructions and read_only_paths."""
  if search.model_path:
    _check_path(search.model_path, f"{key_path}.model_path", "the proposer checkpoint")
  if search.instructions:
    _check_path(search.instructions, f"{key_path}.instructions",
                "the steering text file (e.g. whale_jax/tasks/qa/instructions/searchqa.md)")
  for index, path in enumerate(search.read_only_paths):
    _check_path(path, f"{key_path}.read_only_paths[{index}]", "a path the agent program needs")


def check_workdir(workdir):
  if not workdir or not isinstance(workdir, str):
    raise ConfigError(f"--workdir={workdir!r}; give the directory the run writes to.")
  if "://" in workdir:
    raise ConfigError(f"--workdir={workdir!r} is a URL, but the run directory is written with "
                      "ordinary file calls; mount the bucket on every host (e.g. "
                      "launch/tpu_pod.sh mount) and pass the mounted path.")
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise ConfigError(f"--workdir={workdir!r} is a file, not a directory; pass a new or "
                      "existing directory (a restart with the same directory resumes).")
  parent = os.path.dirname(os.path.abspath(workdir))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise ConfigError(f"--workdir={workdir!r} lies under {parent!r}, which is a file; pass "
                      "a directory path.")
