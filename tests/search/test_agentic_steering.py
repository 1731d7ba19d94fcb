"""Steering text as data: per-domain instruction files, versioned and hashed."""
import hashlib
import os

import pytest

from whale_jax.search import steering

SHIPPED = ("chess", "default", "math", "searchqa", "synthetic_qa")


def test_each_domain_family_gets_its_file_and_others_the_default():
  assert sorted(os.path.splitext(name)[0] for name in os.listdir(steering.INSTRUCTIONS_DIR)
                ) == sorted(SHIPPED)
  for name in SHIPPED:
    path = os.path.join(steering.INSTRUCTIONS_DIR, f"{name}.md")
    with open(path, "rb") as file:
      data = file.read()
    loaded = steering.load_instructions(name)
    assert loaded.path == path and loaded.text == data.decode("utf-8")
    assert loaded.hash == hashlib.sha256(data).hexdigest()[:16]
    assert loaded.version == "agentic-1"
  assert steering.load_instructions("docqa").name == "default"
  assert steering.load_instructions("reasoning_gym:chain_sum").name == "default"


def test_a_run_may_bring_its_own_file_and_its_hash_follows_the_text(tmp_path):
  path = tmp_path / "mine.md"
  path.write_text("# Mine (version v7)\nDo it.\n")
  first = steering.load_file(str(path))
  path.write_text("# Mine (version v7)\nDo it better.\n")
  second = steering.load_file(str(path))
  assert (first.version, second.version) == ("v7", "v7") and first.hash != second.hash
  with pytest.raises(ValueError, match="does not exist"):
    steering.load_file(str(tmp_path / "missing.md"))
