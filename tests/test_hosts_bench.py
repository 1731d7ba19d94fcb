"""bench/hosts.py: its checks on made-up rows, and a real 2-process run's counters."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bench():
  spec = importlib.util.spec_from_file_location(
      "hosts_bench", os.path.join(ROOT, "bench", "hosts.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _row(host, number, episodes, sent, received, phase="weight"):
  return {"host": host, "row": number, "session": "s", "phase": phase, "label": "rsft",
          "episodes": episodes, "verify_calls": 1, "verified_episodes": 4, "gathers": 2,
          "bytes_sent": sent, "bytes_received": received, "wall_seconds": 1.0,
          "seconds": {"rollouts": 0.5}, "traffic": {}}


def test_checks_find_unbalanced_gathers_and_missing_episodes():
  bench = _bench()
  hosts = {0: [_row(0, 0, 2, 100, 100)], 1: [_row(1, 0, 2, 100, 100)]}
  rows = bench.aligned_rows(hosts)
  summary = {"counts": {"weight": 4, "harness": 0, "evaluation": 0}}
  assert bench.run_checks(summary, rows)[0].startswith("ok")
  hosts[1][0]["bytes_received"] = 90
  summary["counts"]["weight"] = 5
  problems = bench.run_checks(summary, bench.aligned_rows(hosts))
  assert problems == ["the hosts ran 4 episodes, summary.json counts 5",
                      "row 0 (weight rsft): host 1 received 90 bytes, the others sent 100"]


def test_the_fit_recovers_fixed_and_per_episode_bytes():
  bench = _bench()

  def step(processes, shares, per_step, broadcast=0):
    rows = []
    for host, episodes in enumerate(shares):  # every host pads to the largest share
      row = _row(host, 0, episodes, 0, 0)
      row["traffic"] = {"hosts.run_many": {"bytes_sent": per_step}}
      if broadcast:
        row["traffic"]["hosts.agree_on_harness"] = {"bytes_sent": broadcast}
      rows.append(row)
    return rows

  # 30 + 1,000 bytes an episode of the largest share; a 3,800-byte broadcast in one step of
  # each run is not a per-step gather and is left out of the fit.
  measured = {("whale", 2): {"rows": [step(2, [2, 2], 2030), step(2, [2, 2], 2030, 3800)]},
              ("whale", 4): {"rows": [step(4, [2, 2, 0, 0], 2030),
                                      step(4, [1, 1, 1, 1], 1030, 3800)]},
              ("whale", 1): {"rows": [step(1, [4], 0)]}}
  fixed, per_episode, points, apart = bench.fit_bytes(measured)
  assert fixed == pytest.approx(30) and per_episode == pytest.approx(1000)
  assert len(points) == 4 + 8 and apart == {"hosts.agree_on_harness": 2 * 3800}


@pytest.mark.slow  # two processes build, compile and run the tiny WHALE recipe: minutes
def test_two_processes_count_episodes_and_bytes_per_host(tmp_path):
  bench = _bench()
  status, _ = bench.launch("whale", 2, str(tmp_path), timeout_seconds=1500)
  log = (tmp_path / "whale_p2" / "launch.log").read_text()
  assert status == 0, log[-3000:]
  ((summary, rows),) = [(r["summary"], r["rows"])
                        for r in bench.measure(str(tmp_path), ["whale"], [2]).values()]
  counts = summary["counts"]
  assert rows and all(len(row) == 2 for row in rows)
  episodes = [sum(row[host]["episodes"] for row in rows) for host in range(2)]
  assert sum(episodes) == counts["weight"] + counts["harness"] + counts["evaluation"]
  assert all(count > 0 for count in episodes)  # each host ran its share
  for row in rows:  # the all-gather arithmetic: each host gets what the other sent
    assert row[0]["bytes_received"] == row[1]["bytes_sent"]
    assert row[1]["bytes_received"] == row[0]["bytes_sent"]
  assert sum(row[0]["bytes_sent"] for row in rows) > 0
  for host in range(2):  # every host records what it verified
    assert sum(row[host]["verify_calls"] for row in rows) > 0
    assert sum(row[host]["verified_episodes"] for row in rows) > 0
  assert bench.run_checks(summary, rows)[0].startswith("ok")
