"""A harness program as a value: its source, its content hash and where it came from.

  harness = Harness(source, parent=incumbent.hash, origin="proposer")
  harness.hash          # 16 hex digits of sha256(source); names archives and evaluation caches
  harness.check()       # static checks (whale_jax.harness.static_checks), [] when it passes

The program contract (what the source must define):

  def run(task: dict, llm, tools) -> str:
    task: the public fields of one instance (never the reference answer).
    llm.chat(messages, **sampling) -> str and llm.generate(prompt, **sampling) -> str.
    tools: what the domain offers, e.g. tools.search(query, topk), tools.python(code).
    Returns the final answer that the domain's verifier scores.
"""
import dataclasses
import hashlib
import os

from whale_jax.harness import static_checks

HASH_HEX_DIGITS = 16


def content_hash(source):
  """The first HASH_HEX_DIGITS hex digits of sha256 of the UTF-8 source."""
  return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_HEX_DIGITS]


@dataclasses.dataclass(frozen=True)
class Harness:
  """One harness program.

  Attributes:
    source: the Python source defining run(task, llm, tools).
    parent: the hash of the harness it was derived from (None for a seed).
    origin: how it was made, e.g. "seed", "patch", "program", "file".
    hash: content hash of source (computed).
  """
  source: str
  parent: str | None = None
  origin: str = ""
  hash: str = dataclasses.field(init=False)

  def __post_init__(self):
    if not isinstance(self.source, str):
      raise TypeError(f"Harness.source must be the program text as a str; got "
                      f"{type(self.source).__name__}.")
    object.__setattr__(self, "hash", content_hash(self.source))

  @classmethod
  def from_file(cls, path, parent=None, origin="file"):
    with open(os.fspath(path), encoding="utf-8") as file:
      return cls(file.read(), parent=parent, origin=origin)

  def check(self, allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
            max_lines=static_checks.DEFAULT_MAX_LINES):
    """Static check failures (empty when the program may be run)."""
    return static_checks.check_harness(self.source, allowed_imports, max_lines)

  def to_json(self):
    return {"hash": self.hash, "parent": self.parent, "origin": self.origin,
            "source": self.source}

  @classmethod
  def from_json(cls, data):
    harness = cls(data["source"], parent=data.get("parent"), origin=data.get("origin", ""))
    if "hash" in data and data["hash"] != harness.hash:
      raise ValueError(f"Harness record says hash {data['hash']} but its source hashes to "
                       f"{harness.hash}; the source was edited after it was saved.")
    return harness
