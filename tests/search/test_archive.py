"""The archive directory: complete folders, a summary row per candidate, reloadable."""
import json
import os

import pytest

from tests.search import fakes
from whale_jax.harness import Harness
from whale_jax.rollouts import collector
from whale_jax.rollouts import sharding
from whale_jax.search import archive as archive_lib


def _candidate(archive, status="evaluated", source="def run(task, llm, tools):\n  return ''\n"):
  return archive_lib.Candidate(id=archive.next_id(), iteration=1, index=0,
                               hash=Harness(source).hash, parent=None, origin="patch",
                               status=status)


def _evaluation(harness, scores):
  ids = tuple(f"t{i}" for i in range(len(scores)))
  return collector.Evaluation(ids, tuple(range(len(ids))), tuple(scores),
                              tuple(fakes.fake_trajectory(harness, i, 2 + n % 2)
                                    for n, i in enumerate(ids)), rollouts=len(ids))


def test_added_candidates_reload_with_their_files(tmp_path):
  archive = archive_lib.Archive(tmp_path)
  source = "def run(task, llm, tools):\n  return 'a'\n"
  harness = Harness(source)
  added = archive.add(_candidate(archive, source=source), source=source, raw_output="raw",
                      evaluation=_evaluation(harness, [1.0, 0.0, 1.0, 1.0]))
  assert (added.success, added.mean_turns, added.rollouts) == (0.75, 2.5, 4)
  assert added.outcomes["ok"] == 4
  archive.add(_candidate(archive, status="rejected"), raw_output="bad")
  reloaded = archive_lib.Archive(tmp_path)
  assert [c.to_json() for c in reloaded.candidates] == [c.to_json() for c in archive.candidates]
  assert reloaded.source("c0000") == source and reloaded.source("c0001") is None
  assert reloaded.raw_output("c0001") == "bad"
  assert [e["score"] for e in reloaded.examples("c0000")] == [1.0, 0.0, 1.0, 1.0]
  assert [t.task_id for t in reloaded.trajectories("c0000")] == ["t0", "t1", "t2", "t3"]
  assert reloaded.find_hash(harness.hash).id == "c0000"
  rows = [json.loads(line) for line in open(tmp_path / "summary.jsonl")]
  assert [row["id"] for row in rows] == ["c0000", "c0001"]
  assert rows[0]["success"] == 0.75


def test_ids_must_come_in_order(tmp_path):
  archive = archive_lib.Archive(tmp_path)
  candidate = _candidate(archive)
  candidate.id = "c0005"
  with pytest.raises(ValueError, match="next id is c0000"):
    archive.add(candidate)


def test_half_written_folders_and_summaries_are_repaired_on_open(tmp_path):
  archive = archive_lib.Archive(tmp_path)
  archive.add(_candidate(archive))
  os.makedirs(tmp_path / "candidates" / ".tmp-c0001-abc")          # interrupted folder write
  with open(tmp_path / "summary.jsonl", "a") as file:
    file.write('{"id": "c0001", "torn')                             # interrupted row append
  reloaded = archive_lib.Archive(tmp_path)
  assert [c.id for c in reloaded.candidates] == ["c0000"]
  assert not os.path.exists(tmp_path / "candidates" / ".tmp-c0001-abc")
  assert len(open(tmp_path / "summary.jsonl").read().splitlines()) == 1


def test_write_json_atomically_leaves_no_temporary_files(tmp_path):
  path = tmp_path / "sub" / "value.json"
  archive_lib.write_json_atomically(path, {"a": 1})
  archive_lib.write_json_atomically(path, {"a": 2})
  assert archive_lib.read_json(path) == {"a": 2}
  assert os.listdir(tmp_path / "sub") == ["value.json"]


def test_two_hosts_share_one_archive_that_host_zero_writes(tmp_path):
  """A multi-host search: both hosts add the same candidate, each holding the trajectories of
  the episodes it ran and the other's numbers. Host 0 writes the folder and summary; each host
  writes only its trace shard; reading the archive gives every host's trajectories."""
  source = "def run(task, llm, tools):\n  return 'a'\n"
  harness = Harness(source)
  full = _evaluation(harness, [1.0, 0.0, 1.0])
  archives = [archive_lib.Archive(tmp_path, index, 2) for index in range(2)]
  for index, archive in enumerate(archives):
    trajectories = tuple(t if n % 2 == index else sharding.EpisodeRecord.of(t, 1 - index)
                         for n, t in enumerate(full.trajectories))
    evaluation = collector.Evaluation(full.task_ids, full.sample_keys, full.scores,
                                      trajectories, rollouts=3)
    archive.add(_candidate(archive, source=source), source=source, raw_output="raw",
                evaluation=evaluation)
  assert archives[0].candidates[0].to_json() == archives[1].candidates[0].to_json()
  assert archives[1].source("c0000") == source   # from memory, on every host
  assert sorted(os.listdir(tmp_path / "traces")) == ["c0000.host_000.jsonl.gz",
                                                     "c0000.host_001.jsonl.gz"]
  folder = sorted(os.listdir(tmp_path / "candidates" / "c0000"))
  assert "trajectories.jsonl.gz" not in folder and "examples.jsonl" in folder
  with open(tmp_path / "summary.jsonl", encoding="utf-8") as file:
    assert len(file.readlines()) == 1
  reloaded = archive_lib.Archive(tmp_path)
  by_task = {t.task_id: t.to_json() for t in reloaded.trajectories("c0000")}
  assert by_task == {t.task_id: t.to_json() for t in full.trajectories}
  assert [row["score"] for row in reloaded.examples("c0000")] == [1.0, 0.0, 1.0]
