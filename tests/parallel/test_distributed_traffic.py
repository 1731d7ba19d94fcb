"""distributed.TRAFFIC: the bytes that cross processes, counted in one place (one process, with
multihost_utils.process_allgather faked as the other hosts would answer it)."""
import jax
from jax.experimental import multihost_utils
import numpy as np
import pytest

from whale_jax.parallel import distributed


class FakeHosts:
  """multihost_utils.process_allgather as host `index` of len(texts) hosts would see it, each
  host passing allgather_texts its text: the others' arrays are what their allgather_texts
  builds (the byte length, then the UTF-8 bytes padded to the longest). Like jax without x64,
  it gives int64 lengths back as int32."""

  def __init__(self, texts, index):
    self.encoded, self.index = [text.encode("utf-8") for text in texts], index

  def __call__(self, array, tiled=False):
    assert not tiled
    if array.dtype == np.int64:  # the lengths, moved as int32
      rows = [np.array([len(data)], np.int32) for data in self.encoded]
      rows[self.index] = array.astype(np.int32)  # this host's own
    else:
      rows = [np.frombuffer(data.ljust(array.shape[0], b"\0"), np.uint8)
              for data in self.encoded]
      rows[self.index] = array
    return np.stack(rows)


TEXTS = ["héllo", "ab", ""]  # 6, 2 and 0 UTF-8 bytes


def _gather_as(monkeypatch, index, label="test"):
  monkeypatch.setattr(jax, "process_count", lambda: len(TEXTS))
  monkeypatch.setattr(multihost_utils, "process_allgather", FakeHosts(TEXTS, index))
  distributed.TRAFFIC.reset()
  assert distributed.allgather_texts(TEXTS[index], label=label) == TEXTS
  return distributed.TRAFFIC.snapshot()


@pytest.mark.parametrize("index", [0, 1, 2])
def test_allgather_texts_counts_what_each_host_sends_and_receives(monkeypatch, index):
  # Two gathers: a length (an int64, moved as int32: 4 bytes) from every host, then every
  # host's text padded to the longest, "héllo" (6 bytes): each host sends 4 + 6 bytes,
  # whatever its own text, and receives the other two hosts' 2 x (4 + 6).
  counted = {"gathers": 2, "bytes_sent": 4 + 6, "bytes_received": 2 * (4 + 6)}
  snapshot = _gather_as(monkeypatch, index)
  assert {name: snapshot[name] for name in counted} == counted
  assert {name: snapshot["by_label"]["test"][name] for name in counted} == counted
  assert snapshot["seconds"] >= 0 and set(snapshot["by_label"]) == {"test"}


def test_each_host_receives_what_the_others_sent(monkeypatch):
  snapshots = [_gather_as(monkeypatch, index) for index in range(len(TEXTS))]
  for index, snapshot in enumerate(snapshots):
    others = sum(s["bytes_sent"] for i, s in enumerate(snapshots) if i != index)
    assert snapshot["bytes_received"] == others


def test_the_label_defaults_to_the_calling_function(monkeypatch):
  _gather_as(monkeypatch, 0)
  distributed.TRAFFIC.reset()
  assert distributed.broadcast_text(TEXTS[0]) == TEXTS[0]
  (label,) = distributed.TRAFFIC.snapshot()["by_label"]
  assert label == "test_distributed_traffic.test_the_label_defaults_to_the_calling_function"


def test_one_process_moves_and_records_nothing():
  distributed.TRAFFIC.reset()
  assert distributed.allgather_texts("héllo") == ["héllo"]
  assert distributed.broadcast_text("ab") == "ab"
  assert distributed.TRAFFIC.snapshot() == {"gathers": 0, "bytes_sent": 0, "bytes_received": 0,
                                            "seconds": 0, "by_label": {}}
