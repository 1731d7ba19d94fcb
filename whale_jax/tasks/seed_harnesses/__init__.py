"""The seed harnesses h0, one program file per domain, read as text by `source(name)`.

Each file is a complete harness: it defines `run(task, llm, tools) -> str` and imports only
modules a harness may import. They are never imported by the package; they run in a sandbox.
"""
import importlib.resources

NAMES = ("searchqa", "searchqa_compact", "searchqa_two_hop", "math", "chess", "reasoning_gym",
         "docqa", "docqa_compact", "toolflow", "toolflow_compact")


def source(name):
  """The source text of seed harness `name` (one of NAMES)."""
  if name not in NAMES:
    raise ValueError(f"No seed harness named {name!r}; available: {', '.join(NAMES)}.")
  return importlib.resources.files(__name__).joinpath(f"{name}.py").read_text(encoding="utf-8")
