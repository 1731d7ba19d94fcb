"""The agentic proposer's instructions as data: one Markdown file per domain, hashed.

  steering = load_instructions(domain)    # domain.instructions, or default.md
  steering.text, steering.version, steering.hash, steering.path

A domain's file lives in its folder (whale_jax/tasks/qa/instructions/synthetic_qa.md, named by
Domain.instructions); search/instructions/default.md serves domains without one (all are
installed as package data). The first line names the version ("... (..., version agentic-1)").
The hash (sha256 of the text, 16 hex digits) goes into every candidate's record and the run's
config, so a change of steering text is visible in the results it produced.
"""
import dataclasses
import hashlib
import os
import re

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "instructions",
                            "default.md")
_VERSION = re.compile(r"version\s+([\w.\-]+)")


@dataclasses.dataclass(frozen=True)
class Instructions:
  """One instruction file: name (file stem), text, version, hash (16 hex), path."""
  name: str
  text: str
  version: str
  hash: str
  path: str

  def to_json(self):
    return {"name": self.name, "version": self.version, "hash": self.hash, "path": self.path}


def text_hash(text):
  return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def load_file(path):
  """The Instructions in a file (any path: a run may bring its own)."""
  if not os.path.isfile(path):
    raise ValueError(f"Instruction file {path} does not exist; give an existing Markdown file "
                     "(the shipped ones are whale_jax/tasks/<family>/instructions/*.md and "
                     f"{DEFAULT_PATH}).")
  with open(path, encoding="utf-8") as file:
    text = file.read()
  first_line = text.splitlines()[0] if text else ""
  match = _VERSION.search(first_line)
  name = os.path.splitext(os.path.basename(path))[0]
  return Instructions(name, text, match.group(1) if match else "unversioned", text_hash(text),
                      os.path.abspath(path))


def load_instructions(domain):
  """The instructions of a tasks.Domain: its instructions file, else default.md."""
  return load_file(getattr(domain, "instructions", None) or DEFAULT_PATH)
