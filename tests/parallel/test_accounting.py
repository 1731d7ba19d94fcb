"""The per-process counters: counts, seconds, snapshots and their differences."""
import threading

from whale_jax.parallel import accounting


def test_counts_and_seconds_add_up_and_snapshots_are_copies():
  counters = accounting.Counters()
  counters.add("episodes", 3)
  counters.add("episodes")
  counters.add_seconds("train", 1.5)
  with counters.timed("verify"):
    pass
  snapshot = counters.snapshot()
  assert snapshot["counts"] == {"episodes": 4}
  assert snapshot["seconds"]["train"] == 1.5 and snapshot["seconds"]["verify"] >= 0
  counters.add("episodes")
  assert snapshot["counts"] == {"episodes": 4}  # unchanged by later counts
  counters.reset()
  assert counters.snapshot() == {"counts": {}, "seconds": {}}


def test_timed_counts_a_block_that_raises():
  counters = accounting.Counters()
  try:
    with counters.timed("search"):
      raise KeyError("x")
  except KeyError:
    pass
  assert "search" in counters.snapshot()["seconds"]


def test_counts_from_several_threads_are_not_lost():
  counters = accounting.Counters()
  threads = [threading.Thread(target=lambda: [counters.add("episodes") for _ in range(1000)])
             for _ in range(4)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert counters.snapshot()["counts"] == {"episodes": 4000}


def test_difference_is_nested_and_leaves_out_what_did_not_change():
  before = {"counts": {"episodes": 2, "verify_calls": 1}, "traffic": {"bytes_sent": 10,
                                                                      "by_label": {}}}
  after = {"counts": {"episodes": 5, "verify_calls": 1, "verified_episodes": 3},
           "traffic": {"bytes_sent": 24, "by_label": {"hosts.run_many": {"gathers": 2}}}}
  assert accounting.difference(after, before) == {
      "counts": {"episodes": 3, "verified_episodes": 3},
      "traffic": {"bytes_sent": 14, "by_label": {"hosts.run_many": {"gathers": 2}}}}
