"""The Harness value: content hash, metadata, JSON round trip."""
import hashlib

import pytest

from whale_jax.harness import Harness

SOURCE = "def run(task, llm, tools):\n    return 'x'\n"


def test_hash_is_sha256_prefix_of_the_source():
  assert Harness(SOURCE).hash == hashlib.sha256(SOURCE.encode()).hexdigest()[:16]


def test_hash_ignores_metadata_and_follows_the_source():
  assert Harness(SOURCE, parent="abc", origin="patch").hash == Harness(SOURCE).hash
  assert Harness(SOURCE + "\n").hash != Harness(SOURCE).hash


def test_json_round_trip_and_tamper_detection():
  harness = Harness(SOURCE, parent="0123456789abcdef", origin="seed")
  assert Harness.from_json(harness.to_json()) == harness
  with pytest.raises(ValueError, match="edited after it was saved"):
    Harness.from_json(dict(harness.to_json(), source=SOURCE + "# changed\n"))


def test_from_file_reads_the_source(tmp_path):
  path = tmp_path / "harness.py"
  path.write_text(SOURCE)
  harness = Harness.from_file(path)
  assert (harness.source, harness.origin) == (SOURCE, "file")


def test_non_text_source_is_refused():
  with pytest.raises(TypeError, match="program text as a str"):
    Harness(b"def run(): pass")
