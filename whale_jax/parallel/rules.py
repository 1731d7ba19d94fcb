"""Logical axis rules: the only place where logical axis names meet mesh axes.

Every parameter, activation and cache tensor names its axes logically ("batch", "embed",
"heads", ...). A rules table maps each logical name to a mesh axis, a tuple of mesh axes, or
None (replicated). Names missing from a table are replicated.
"""
import contextlib
import contextvars

import jax
from jax.sharding import NamedSharding, PartitionSpec

TRAIN_RULES = {
    "batch": ("data", "fsdp"),
    "embed": "fsdp",
    "heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
    "vocab": "tensor",
    "linear_heads": "tensor",  # value heads of Qwen3.5's linear-attention layers
}
SAMPLE_RULES = {**TRAIN_RULES, "embed": None}  # weights unsharded over fsdp at decode time

_ACTIVE = contextvars.ContextVar("whale_jax_rules", default=None)


def spec(logical_names, rules) -> PartitionSpec:
  """PartitionSpec for one tensor; a mesh axis is used at most once (first name wins)."""
  used, parts = set(), []
  for name in logical_names:
    target = rules.get(name) if name is not None else None
    axes = (target,) if isinstance(target, str) else tuple(target or ())
    axes = tuple(axis for axis in axes if axis not in used)
    used.update(axes)
    parts.append(None if not axes else axes[0] if len(axes) == 1 else axes)
  return PartitionSpec(*parts)


def is_logical_names(x):
  """True for a leaf of a logical tree: a plain tuple of names (a NamedTuple is a node)."""
  return type(x) is tuple and all(isinstance(n, (str, type(None))) for n in x)


def shardings(logical_tree, mesh, rules):
  """A tree of NamedShardings on mesh mirroring a tree of logical-name tuples."""
  return jax.tree.map(lambda names: NamedSharding(mesh, spec(names, rules)), logical_tree,
                      is_leaf=is_logical_names)


@contextlib.contextmanager
def activate(mesh, rules):
  """Within this block (and the jit traces started in it), constrain() uses mesh and rules."""
  token = _ACTIVE.set((mesh, rules))
  try:
    yield
  finally:
    _ACTIVE.reset(token)


def active():
  """(mesh, rules) set by the innermost activate() block, or None outside one."""
  return _ACTIVE.get()


def active_platform():
  """Platform ("cpu", "tpu", "gpu") of the active mesh's devices, else jax's default backend."""
  current = _ACTIVE.get()
  if current is None:
    return jax.default_backend()
  return current[0].devices.flat[0].platform


def constrain(x, logical_names):
  """with_sharding_constraint by logical names when rules are active; otherwise x unchanged."""
  active = _ACTIVE.get()
  if active is None:
    return x
  mesh, rules = active
  return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec(logical_names, rules)))
