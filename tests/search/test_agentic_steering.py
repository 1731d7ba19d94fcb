"""Steering text as data: per-domain instruction files, versioned and hashed."""
import hashlib
import os

import pytest

from whale_jax import tasks
from whale_jax.search import steering

INSTRUCTIONS = os.path.join(os.path.dirname(os.path.abspath(tasks.__file__)), "{}",
                            "instructions", "{}.md")
SHIPPED = {"searchqa": INSTRUCTIONS.format("qa", "searchqa"),
           "synthetic_qa": INSTRUCTIONS.format("qa", "synthetic_qa"),
           "math": INSTRUCTIONS.format("math", "math"),
           "chess": INSTRUCTIONS.format("chess", "chess")}


def test_each_domain_family_gets_its_file_and_others_the_default():
  assert os.listdir(os.path.dirname(steering.DEFAULT_PATH)) == ["default.md"]
  for name, path in SHIPPED.items():
    with open(path, "rb") as file:
      data = file.read()
    loaded = (steering.load_file(path) if name == "searchqa"  # needs a corpus to build
              else steering.load_instructions(tasks.get_domain(name)))
    assert loaded.path == path and loaded.text == data.decode("utf-8")
    assert loaded.hash == hashlib.sha256(data).hexdigest()[:16]
    assert loaded.version == "agentic-1"
  assert steering.load_instructions(tasks.get_domain("docqa")).name == "default"
  assert steering.load_instructions(
      tasks.get_domain("reasoning_gym:chain_sum")).name == "default"
  assert steering.load_file(steering.DEFAULT_PATH).version == "agentic-1"


def test_a_run_may_bring_its_own_file_and_its_hash_follows_the_text(tmp_path):
  path = tmp_path / "mine.md"
  path.write_text("# Mine (version v7)\nDo it.\n")
  first = steering.load_file(str(path))
  path.write_text("# Mine (version v7)\nDo it better.\n")
  second = steering.load_file(str(path))
  assert (first.version, second.version) == ("v7", "v7") and first.hash != second.hash
  with pytest.raises(ValueError, match="does not exist"):
    steering.load_file(str(tmp_path / "missing.md"))
