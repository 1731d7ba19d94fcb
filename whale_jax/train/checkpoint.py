"""Orbax checkpoints of the train state, with a JSON record of the loop's own state beside it.

  manager = checkpoint.make_manager(workdir + "/checkpoints", max_to_keep=3, async_save=True)
  checkpoint.save(manager, step, state, extra={"cycle": 2, "data_cursor": 4096})
  state, extra = checkpoint.restore(manager, train_state.abstract(config, optimizer, mesh,
                                                                  rules))
  checkpoint.close(manager)

Each step is written to a temporary directory and renamed into place when complete, so a
killed run never leaves a checkpoint that looks whole but is not; restore() only sees
finished steps. The restore target's shardings decide where arrays land, so a state saved on
one mesh restores onto any other mesh. With async_save the arrays are copied to host memory
and written in the background; wait_until_finished() or close() waits for the writes.
"""
import os

import orbax.checkpoint as ocp

_STATE, _EXTRA = "state", "extra"


def make_manager(directory, max_to_keep=3, async_save=False):
  """An orbax CheckpointManager that keeps the newest max_to_keep steps."""
  if max_to_keep is not None and (not isinstance(max_to_keep, int) or max_to_keep < 1):
    raise ValueError(f"max_to_keep={max_to_keep!r} must be a positive integer, or None to "
                     "keep every checkpoint.")
  options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                         enable_async_checkpointing=async_save, create=True)
  return ocp.CheckpointManager(os.path.abspath(os.fspath(directory)), options=options,
                               item_names=(_STATE, _EXTRA))


def save(manager, step, state, extra=None):
  """Saves state (and the JSON-serializable dict extra) as checkpoint number step."""
  if extra is not None and not isinstance(extra, dict):
    raise TypeError(f"extra must be a JSON-serializable dict, got {type(extra).__name__}.")
  args = {_STATE: ocp.args.StandardSave(state), _EXTRA: ocp.args.JsonSave(extra or {})}
  manager.save(int(step), args=ocp.args.Composite(**args))


def restore(manager, abstract_state, step=None):
  """(state, extra) of checkpoint step (default: the newest), placed like abstract_state.

  Args:
    abstract_state: a tree of jax.ShapeDtypeStruct with shardings, e.g.
      train_state.abstract(model_config, optimizer, mesh, rules) for the mesh to restore on.
  """
  manager.wait_until_finished()
  step = manager.latest_step() if step is None else step
  if step is None:
    raise FileNotFoundError(f"No finished checkpoint in {manager.directory}; save one first "
                            "or start from fresh weights.")
  if step not in manager.all_steps():
    raise ValueError(f"Checkpoint step {step} is not in {manager.directory}; available steps: "
                     f"{sorted(manager.all_steps())}.")
  args = {_STATE: ocp.args.StandardRestore(abstract_state), _EXTRA: ocp.args.JsonRestore()}
  restored = manager.restore(step, args=ocp.args.Composite(**args))
  return restored[_STATE], dict(restored[_EXTRA] or {})


def latest_step(manager):
  """The newest finished step, or None."""
  return manager.latest_step()


def all_steps(manager):
  return sorted(manager.all_steps())


def wait_until_finished(manager):
  manager.wait_until_finished()


def close(manager):
  """Waits for pending writes and releases the manager."""
  manager.wait_until_finished()
  manager.close()
