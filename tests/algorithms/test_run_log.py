"""Run directory files: metrics rows, summary, rollout counts and the best-so-far plot."""
import json

import pytest

from whale_jax import atomic_files
from whale_jax.algorithms import run_log


def test_metrics_rows_and_tensorboard_events(tmp_path):
  log = run_log.RunLog(str(tmp_path))
  log.write_config({"seed": 3})
  log.log("weight", 16, reward=0.25, accepted=4)
  log.log("evaluation", 16, test_mean=0.5)
  log.close()
  rows = run_log.read_metrics(str(tmp_path))
  assert rows == [{"phase": "weight", "rollouts": 16, "reward": 0.25, "accepted": 4},
                  {"phase": "evaluation", "rollouts": 16, "test_mean": 0.5}]
  assert json.loads((tmp_path / "config.json").read_text()) == {"seed": 3}
  assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_partial_last_line_is_skipped(tmp_path):
  (tmp_path / "metrics.jsonl").write_text('{"phase": "weight", "rollouts": 1}\n{"phase": "we')
  assert run_log.read_metrics(str(tmp_path)) == [{"phase": "weight", "rollouts": 1}]


def test_rollout_counts_by_phase():
  counts = run_log.RolloutCounts()
  counts.add("weight", 32, tokens=1000)
  counts.add("harness", 12)
  counts.add("evaluation", 8)
  assert (counts.weight, counts.harness, counts.evaluation, counts.training) == (32, 12, 8, 44)
  assert run_log.RolloutCounts.from_json(counts.to_json()) == counts
  with pytest.raises(ValueError, match="phase='test'"):
    counts.add("test", 1)


def test_best_so_far_is_a_running_maximum():
  assert run_log.best_so_far([(30, 0.2), (10, 0.4), (20, 0.1)]) == [(10, 0.4), (20, 0.4),
                                                                    (30, 0.4)]


def test_plot_writes_a_png(tmp_path):
  path = tmp_path / "plot.png"
  run_log.plot_best_so_far({"whale": [(0, 0.1), (10, 0.3)], "weight_only": [(0, 0.1)]},
                           str(path))
  assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_atomic_json_write_leaves_old_file_on_failure(tmp_path):
  path = tmp_path / "summary.json"
  atomic_files.write_json(str(path), {"a": 1})
  with pytest.raises(TypeError):
    atomic_files.write_json(str(path), {"a": object.__new__(type("X", (), {"__str__": None}))})
  assert json.loads(path.read_text()) == {"a": 1}
  assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_every_host_writes_what_it_did_since_its_previous_row(tmp_path, monkeypatch):
  from whale_jax.parallel import accounting  # pylint: disable=g-import-not-at-top
  from whale_jax.parallel import distributed  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(accounting, "COUNTERS", accounting.Counters())
  monkeypatch.setattr(distributed, "TRAFFIC", distributed.Traffic())
  log = run_log.RunLog(str(tmp_path), tensorboard=False, enabled=False, process_index=1)
  accounting.COUNTERS.add("episodes", 4)
  accounting.COUNTERS.add("verify_calls")
  accounting.COUNTERS.add("verified_episodes", 8)
  accounting.COUNTERS.add_seconds("train", 2.0)
  distributed.TRAFFIC.record("hosts.run_many", 100, 300, 0.5)
  log.log("weight", 8, kind="rsft", reward=0.5)
  accounting.COUNTERS.add("episodes", 2)
  distributed.TRAFFIC.record("hosts.agree_on_harness", 10, 30, 0.25)
  log.log("harness", 12, label="search_000")
  log.write_summary({"training_rollouts": 12})
  assert not (tmp_path / "metrics.jsonl").exists()  # host 1: no metrics rows, its own file
  rows = run_log.read_host_metrics(str(tmp_path))[1]
  assert [(r["phase"], r["label"], r["rollouts"], r["row"]) for r in rows] == [
      ("weight", "rsft", 8, 0), ("harness", "search_000", 12, 1), ("end", "summary", 12, 2)]
  first, second, end = rows
  assert (first["episodes"], first["verify_calls"], first["verified_episodes"]) == (4, 1, 8)
  assert (first["gathers"], first["bytes_sent"], first["bytes_received"]) == (1, 100, 300)
  assert first["seconds"] == {"train": 2.0, "gather": 0.5}
  assert first["traffic"] == {"hosts.run_many": {"gathers": 1, "bytes_sent": 100,
                                                 "bytes_received": 300, "seconds": 0.5}}
  assert (second["episodes"], second["verify_calls"], second["bytes_sent"]) == (2, 0, 10)
  assert list(second["traffic"]) == ["hosts.agree_on_harness"]
  assert end["episodes"] == 0 and end["process_totals"]["counts"]["episodes"] == 6
  assert end["process_totals"]["traffic"]["bytes_received"] == 330
  assert all(r["host"] == 1 and r["wall_seconds"] >= 0 for r in rows)
