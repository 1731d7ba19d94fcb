"""Files that are either the old version or the whole new one, never half-written.

  atomic_files.write_text(path, text)
  atomic_files.write_json(path, value)            # indent 2, sorted keys, str() for the rest
  atomic_files.write_with(path, lambda temporary: figure.savefig(temporary))
  atomic_files.write_directory(path, lambda temporary: ...)   # a new folder, whole or absent

Each writes a temporary file in the destination's directory (created if missing), flushes it
to disk and renames it over path; on any failure the temporary file is removed and the old
file, if any, is left as it was; write_directory does the same with a folder (which must not
exist yet, and is not synced to disk). The one implementation for the archive's candidate
folders (search/archive.py), the run log, checkpoint notes, the chess puzzle cache and every
other file whale_jax writes whole; it sits at the package's top level, below every layer (it imports nothing from
whale_jax), so that any layer may use it.
"""
import json
import os
import shutil
import tempfile


def write_with(path, write, suffix=""):
  """Calls write(temporary path) and renames the result over path (module docstring)."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  handle, temporary = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=directory)
  os.close(handle)
  try:
    write(temporary)
    with open(temporary, "rb") as file:
      os.fsync(file.fileno())
    os.replace(temporary, path)
  except BaseException:
    if os.path.exists(temporary):
      os.remove(temporary)
    raise


def write_text(path, text):
  """Writes text (UTF-8) to path atomically."""
  def write(temporary):
    with open(temporary, "w", encoding="utf-8") as file:
      file.write(text)
  write_with(path, write)


def write_json(path, value):
  """Writes value as JSON (indent 2, sorted keys, str() of what JSON cannot hold) atomically."""
  write_text(path, json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def write_directory(path, write):
  """Calls write(temporary folder) and renames the folder to path, which must not exist: the
  folder appears with everything in it or not at all. The temporary folder, in path's parent,
  is named .tmp-<name>-*; a reader that finds one left by a killed writer may delete it."""
  parent = os.path.dirname(os.path.abspath(path))
  os.makedirs(parent, exist_ok=True)
  temporary = tempfile.mkdtemp(prefix=f".tmp-{os.path.basename(path)}-", dir=parent)
  try:
    write(temporary)
    os.rename(temporary, path)
  except BaseException:
    shutil.rmtree(temporary, ignore_errors=True)
    raise
