"""The agentic proposer's instructions as data: one Markdown file per domain, hashed.

  steering = load_instructions("synthetic_qa")    # instructions/synthetic_qa.md, or default.md
  steering.text, steering.version, steering.hash, steering.path

Files live in whale_jax/search/instructions/ (installed as package data). The domain name's
part before ":" picks the file ("reasoning_gym:chain_sum" -> reasoning_gym.md), and default.md
serves domains without one. The first line names the version ("... (..., version agentic-1)").
The hash (sha256 of the text, 16 hex digits) goes into every candidate's record and the run's
config, so a change of steering text is visible in the results it produced.
"""
import dataclasses
import hashlib
import os
import re

INSTRUCTIONS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "instructions")
DEFAULT_NAME = "default"
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
                     f"(the shipped ones are in {INSTRUCTIONS_DIR}).")
  with open(path, encoding="utf-8") as file:
    text = file.read()
  first_line = text.splitlines()[0] if text else ""
  match = _VERSION.search(first_line)
  name = os.path.splitext(os.path.basename(path))[0]
  return Instructions(name, text, match.group(1) if match else "unversioned", text_hash(text),
                      os.path.abspath(path))


def load_instructions(domain_name, directory=INSTRUCTIONS_DIR):
  """The instructions for domain_name: <directory>/<family>.md, else default.md."""
  family = str(domain_name).split(":", 1)[0]
  path = os.path.join(directory, f"{family}.md")
  if not os.path.isfile(path):
    path = os.path.join(directory, f"{DEFAULT_NAME}.md")
  return load_file(path)
