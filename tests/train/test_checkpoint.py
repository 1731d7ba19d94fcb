"""Orbax checkpoints: bit-exact resume in a new process, another mesh, keep N, async, atomic."""
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.train import random_params
from whale_jax.models import config as config_lib
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.train import checkpoint
from whale_jax.train import optimizer as optimizer_lib
from whale_jax.train import packing
from whale_jax.train import rsft
from whale_jax.train import step as step_lib
from whale_jax.train import train_state

MODEL = config_lib.ModelConfig(vocab_size=40, num_layers=2, embed_dim=24, mlp_dim=40,
                               num_heads=4, num_kv_heads=2, head_dim=6)
OPTIMIZER = optimizer_lib.make(optimizer_lib.OptimizerConfig(learning_rate=1e-2,
                                                             weight_decay=0.1))
MESH_SIZES = dict(data=1, fsdp=4, tensor=2)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_RESUME_IN_NEW_PROCESS = """
import sys
import jax
import numpy as np
from tests.train import test_checkpoint as t
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.train import checkpoint
mesh = mesh_lib.make_mesh(**t.MESH_SIZES)
manager = checkpoint.make_manager(sys.argv[1])
state, extra = checkpoint.restore(manager, t.abstract_state(mesh))
assert extra == {"cycle": 3, "data_cursor": 17}, extra
state, metrics = t.make_step(mesh)(state, t.make_batch())
np.savez(sys.argv[2], loss=metrics["loss"], *[np.asarray(x) for x in jax.tree.leaves(state)])
"""


def make_batch():
  rng = np.random.default_rng(0)
  samples = [packing.Sample(rng.integers(1, MODEL.vocab_size, size=length),
                            np.r_[0, np.ones(length - 1)]) for length in (9, 4, 7, 3, 8, 5)]
  return packing.pack(samples, row_length=10, num_rows=4)[0]


def abstract_state(mesh):
  return train_state.abstract(MODEL, OPTIMIZER, mesh, rules.TRAIN_RULES)


def make_step(mesh):
  return step_lib.make_train_step(MODEL, rsft.loss, OPTIMIZER, mesh, rules.TRAIN_RULES)


def trained_state(mesh, seed=0):
  """A state with every leaf (Adam's moments, step counts) at a random non-initial value,
  placed on mesh without compiling anything."""
  rng = np.random.default_rng(seed)
  abstract = abstract_state(mesh)

  def draw(leaf):
    if np.issubdtype(leaf.dtype, np.integer):
      value = rng.integers(1, 100, size=leaf.shape).astype(leaf.dtype)
    else:
      value = np.abs(rng.normal(size=leaf.shape)).astype(leaf.dtype)  # nu must stay >= 0
    return jax.device_put(value, leaf.sharding)

  return jax.tree.map(draw, abstract)


def assert_trees_equal(actual, expected):
  assert jax.tree.structure(actual) == jax.tree.structure(expected)
  for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


@pytest.mark.slow  # ~10 s: a second Python process compiles the step again
def test_resume_in_a_new_process_gives_a_bit_identical_next_step(tmp_path):
  mesh = mesh_lib.make_mesh(**MESH_SIZES)
  state = trained_state(mesh)
  manager = checkpoint.make_manager(tmp_path / "checkpoints")
  checkpoint.save(manager, 2, state, extra={"cycle": 3, "data_cursor": 17})
  checkpoint.close(manager)
  child = subprocess.Popen([sys.executable, "-c", _RESUME_IN_NEW_PROCESS,
                            str(tmp_path / "checkpoints"), str(tmp_path / "next.npz")],
                           cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  next_state, metrics = make_step(mesh)(state, make_batch())
  output, _ = child.communicate(timeout=120)
  assert child.returncode == 0, output.decode()[-3000:]
  resumed = np.load(tmp_path / "next.npz")
  assert resumed["loss"] == np.asarray(metrics["loss"])
  leaves = jax.tree.leaves(next_state)
  assert len(leaves) == len(resumed.files) - 1
  for index, leaf in enumerate(leaves):
    np.testing.assert_array_equal(resumed[f"arr_{index}"], np.asarray(leaf))


def test_restore_onto_a_different_mesh(tmp_path):
  state = trained_state(mesh_lib.make_mesh(**MESH_SIZES))
  manager = checkpoint.make_manager(tmp_path)
  checkpoint.save(manager, 2, state)
  other_mesh = mesh_lib.make_mesh(data=2, fsdp=2, tensor=2)
  target = abstract_state(other_mesh)
  restored, extra = checkpoint.restore(manager, target)
  checkpoint.close(manager)
  assert extra == {}
  assert_trees_equal(restored, state)
  query = restored["params"]["layers"]["attention"]["query"]
  assert query.sharding == target["params"]["layers"]["attention"]["query"].sharding
  assert query.addressable_shards[0].data.shape == (2, 24 // 2, 4 // 2, 6)


def test_keeps_the_newest_max_to_keep_steps(tmp_path):
  manager = checkpoint.make_manager(tmp_path, max_to_keep=2)
  for step in range(1, 5):
    checkpoint.save(manager, step, {"x": np.full((3,), step, np.float32)})
  checkpoint.wait_until_finished(manager)
  assert checkpoint.all_steps(manager) == [3, 4]
  assert checkpoint.latest_step(manager) == 4
  restored, _ = checkpoint.restore(manager, {"x": jax.ShapeDtypeStruct((3,), np.float32)},
                                   step=3)
  np.testing.assert_array_equal(restored["x"], [3, 3, 3])
  checkpoint.close(manager)


def test_async_save_survives_deleting_the_saved_arrays(tmp_path):
  mesh = mesh_lib.make_mesh(**MESH_SIZES)
  state = trained_state(mesh)
  expected = jax.device_get(state)
  manager = checkpoint.make_manager(tmp_path, async_save=True)
  checkpoint.save(manager, 2, state, extra={"note": "async"})
  for leaf in jax.tree.leaves(state):  # what a donated train step does to its input
    leaf.delete()
  restored, extra = checkpoint.restore(manager, abstract_state(mesh))
  checkpoint.close(manager)
  assert extra == {"note": "async"}
  assert_trees_equal(restored, expected)


def test_unfinished_checkpoints_are_invisible_and_missing_ones_say_so(tmp_path):
  manager = checkpoint.make_manager(tmp_path)
  with pytest.raises(FileNotFoundError, match="No finished checkpoint"):
    checkpoint.restore(manager, {"x": jax.ShapeDtypeStruct((3,), np.float32)})
  checkpoint.save(manager, 1, {"x": np.ones((3,), np.float32)})
  checkpoint.wait_until_finished(manager)
  (tmp_path / "5.orbax-checkpoint-tmp-1700000000").mkdir()  # a save killed midway
  checkpoint.close(manager)
  manager = checkpoint.make_manager(tmp_path)
  assert checkpoint.latest_step(manager) == 1
  with pytest.raises(ValueError, match=r"step 5 is not in .* available steps: \[1\]"):
    checkpoint.restore(manager, {"x": jax.ShapeDtypeStruct((3,), np.float32)}, step=5)
  checkpoint.close(manager)
