"""atomic_files.write_directory: a folder appears with all its files or not at all."""
import pytest

from whale_jax import atomic_files


def _write_two(temporary):
  with open(f"{temporary}/a.txt", "w") as file:
    file.write("first")
  with open(f"{temporary}/b.txt", "w") as file:
    file.write("second")


def test_the_folder_appears_whole(tmp_path):
  atomic_files.write_directory(str(tmp_path / "parent" / "c0000"), _write_two)
  folder = tmp_path / "parent" / "c0000"
  assert sorted(p.name for p in folder.iterdir()) == ["a.txt", "b.txt"]
  assert (folder / "b.txt").read_text() == "second"
  assert [p.name for p in (tmp_path / "parent").iterdir()] == ["c0000"]


def test_a_failed_write_leaves_nothing(tmp_path):
  def fail_halfway(temporary):
    with open(f"{temporary}/a.txt", "w") as file:
      file.write("first")
    raise RuntimeError("killed")
  with pytest.raises(RuntimeError, match="killed"):
    atomic_files.write_directory(str(tmp_path / "c0000"), fail_halfway)
  assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_is_not_replaced(tmp_path):
  (tmp_path / "c0000").mkdir()
  (tmp_path / "c0000" / "old.txt").write_text("old")
  with pytest.raises(OSError):
    atomic_files.write_directory(str(tmp_path / "c0000"), _write_two)
  assert [p.name for p in tmp_path.iterdir()] == ["c0000"]
  assert [p.name for p in (tmp_path / "c0000").iterdir()] == ["old.txt"]
