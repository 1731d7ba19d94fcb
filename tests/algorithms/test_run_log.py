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
