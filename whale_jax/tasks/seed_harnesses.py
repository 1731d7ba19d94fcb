"""The seed harnesses h0, read as text by `source(name)`.

Each domain folder keeps its own in <family>/seed_harnesses/<name>.py (qa/seed_harnesses/
searchqa.py, math/seed_harnesses/math.py, ...); names are unique across families. Each file is
a complete harness: it defines `run(task, llm, tools) -> str` and imports only modules a harness
may import. They are never imported by the package; they run in a sandbox.
"""
import importlib.resources

FOLDER = "seed_harnesses"


def _files():
  """{name: file} over the seed_harnesses folders of every domain folder under tasks/."""
  files = {}
  for family in sorted(importlib.resources.files(__package__).iterdir(), key=lambda p: p.name):
    folder = family.joinpath(FOLDER)
    if family.is_dir() and folder.is_dir():
      for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".py"):
          files[entry.name[:-len(".py")]] = entry
  return files


NAMES = tuple(_files())


def source(name):
  """The source text of seed harness `name` (one of NAMES)."""
  files = _files()
  if name not in files:
    raise ValueError(f"No seed harness named {name!r}; available: {', '.join(files)}.")
  return files[name].read_text(encoding="utf-8")
