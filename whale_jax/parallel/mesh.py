"""The device mesh: build it from axis sizes, check shapes against it, place arrays on it.

One `Mesh` with the named axes ("data", "fsdp", "tensor") serves the trainer and the sampler.
Sizes come from `config.mesh`; a size of -1 takes all remaining devices. Axes are
`AxisType.Auto`, so `with_sharding_constraint` moves data (JAX 0.10 defaults to Explicit axes,
where it only checks).

  mesh = make_mesh(data=-1, fsdp=4, tensor=2)
  validate_model(model_config, mesh, rules.TRAIN_RULES)
  validate_batch_size(batch_size, mesh, rules.TRAIN_RULES, num_microbatches=2)
  params = place(params, decoder.logical_axes(model_config), mesh, rules.TRAIN_RULES)

Every check runs on the host before anything compiles and raises ValueError with a sentence
that says what to change.
"""
import math

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from whale_jax.parallel import rules as rules_lib

AXIS_NAMES = ("data", "fsdp", "tensor")


def resolve_axis_sizes(num_devices, data=-1, fsdp=1, tensor=1):
  """{"data": .., "fsdp": .., "tensor": ..} with a -1 replaced by what fills num_devices."""
  sizes = {"data": data, "fsdp": fsdp, "tensor": tensor}
  for name, size in sizes.items():
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or (
        size < 1 and size != -1):
      raise ValueError(f"config.mesh.{name}={size!r} must be a positive integer or -1 "
                       "(= all remaining devices).")
  fill = [name for name, size in sizes.items() if size == -1]
  if len(fill) > 1:
    raise ValueError(f"config.mesh sets {' and '.join(fill)} to -1; at most one axis may "
                     "be -1. Give the others explicit sizes.")
  known = math.prod(size for size in sizes.values() if size != -1)
  if fill:
    if num_devices % known:
      raise ValueError(
          f"config.mesh={sizes} cannot fill {num_devices} devices: the fixed axes multiply to "
          f"{known}, which does not divide {num_devices}. Choose sizes whose product divides "
          f"{num_devices}.")
    sizes[fill[0]] = num_devices // known
  elif known != num_devices:
    raise ValueError(
        f"config.mesh={sizes} has {known} devices but {num_devices} are available. Make "
        f"data * fsdp * tensor = {num_devices}, or set one axis to -1 to fill the rest.")
  return {name: int(size) for name, size in sizes.items()}


def make_mesh(data=-1, fsdp=1, tensor=1, devices=None):
  """A Mesh over devices (default all) with axes ("data", "fsdp", "tensor"), all Auto."""
  devices = list(jax.devices() if devices is None else devices)
  sizes = resolve_axis_sizes(len(devices), data=data, fsdp=fsdp, tensor=tensor)
  return jax.make_mesh(tuple(sizes[name] for name in AXIS_NAMES), AXIS_NAMES,
                       axis_types=(AxisType.Auto,) * len(AXIS_NAMES), devices=devices)


def spans_processes(mesh):
  """Whether mesh holds devices of more than one process (a multi-host mesh)."""
  return mesh is not None and len({d.process_index for d in mesh.devices.flat}) > 1


def host_local_mesh(mesh, process_index=None):
  """A mesh over one process's devices (default this one's) with mesh's axes: what a host's
  sampler decodes on.

  On a multi-host run each host samples its own episodes, so its sampler must not take part
  in collectives with other hosts. The local mesh keeps mesh's tensor size when this host has
  that many devices (else as many as divide the local count) and puts the rest on data.
  """
  process_index = jax.process_index() if process_index is None else process_index
  local = [d for d in mesh.devices.flat if d.process_index == process_index]
  tensor = math.gcd(mesh.shape["tensor"], len(local))
  return make_mesh(data=len(local) // tensor, fsdp=1, tensor=tensor, devices=local)


def axis_size(mesh, logical_name, rules):
  """How many devices the logical axis is split over under rules (1 if replicated)."""
  target = rules.get(logical_name)
  axes = (target,) if isinstance(target, str) else tuple(target or ())
  return math.prod(mesh.shape[axis] for axis in axes)


def validate_model(model_config, mesh, rules):
  """Raises ValueError when a sharded model dimension does not split evenly over the mesh."""
  fields = (("num_heads", "heads"), ("num_kv_heads", "kv_heads"), ("mlp_dim", "mlp"),
            ("embed_dim", "embed"), ("vocab_size", "vocab"))
  if getattr(model_config, "is_hybrid", False):
    fields += (("linear_num_value_heads", "linear_heads"),)
  for field, logical_name in fields:
    value = getattr(model_config, field)
    devices = axis_size(mesh, logical_name, rules)
    if value % devices:
      target = rules.get(logical_name)
      raise ValueError(
          f"ModelConfig.{field}={value} is not divisible by the {devices} devices that the "
          f"rules put on its {logical_name!r} axis (mesh axes {target!r} of mesh "
          f"{dict(mesh.shape)}). Change config.mesh so that {field} is a multiple of its "
          f"size, or map {logical_name!r} to a smaller mesh axis in the rules.")


def validate_shardable(shapes, logical_tree, mesh, rules, what="parameter"):
  """Raises ValueError naming the first leaf whose sharded axis does not split evenly.

  Args:
    shapes: a tree of arrays or ShapeDtypeStructs.
    logical_tree: the same tree with a tuple of logical axis names at each leaf.
  """
  flat_names, _ = jax.tree_util.tree_flatten_with_path(
      logical_tree, is_leaf=rules_lib.is_logical_names)
  flat_shapes = jax.tree.leaves(shapes)
  if len(flat_names) != len(flat_shapes):
    raise ValueError(f"The logical axes name {len(flat_names)} {what}s but the tree has "
                     f"{len(flat_shapes)}; they must mirror each other.")
  for (path, names), leaf in zip(flat_names, flat_shapes):
    for size, name in zip(leaf.shape, names):
      devices = axis_size(mesh, name, rules) if name is not None else 1
      if size % devices:
        raise ValueError(
            f"{what} {jax.tree_util.keystr(path)} has shape {tuple(leaf.shape)}; its axis "
            f"{name!r} of size {size} is not divisible by the {devices} devices of mesh axes "
            f"{rules.get(name)!r} (mesh {dict(mesh.shape)}). Change config.mesh, or map "
            f"{name!r} to a smaller mesh axis in the rules.")


def validate_batch_size(batch_size, mesh, rules, num_microbatches=1):
  """Raises ValueError unless each of num_microbatches splits evenly over the batch axes."""
  if not isinstance(num_microbatches, int) or num_microbatches < 1:
    raise ValueError(f"num_microbatches={num_microbatches!r} must be a positive integer.")
  devices = axis_size(mesh, "batch", rules)
  multiple = devices * num_microbatches
  if batch_size % multiple:
    raise ValueError(
        f"config.batch_size={batch_size} (rows) is not divisible by {num_microbatches} "
        f"micro-batches x {devices} data-parallel devices (batch axes {rules.get('batch')!r} "
        f"of mesh {dict(mesh.shape)}). Use a multiple of {multiple} (e.g. "
        f"{-(-batch_size // multiple) * multiple}), or change num_microbatches or config.mesh.")


def batch_sharding(mesh, rules, ndim=2):
  """NamedSharding of a batch array: leading axis over the batch axes, the rest replicated."""
  return NamedSharding(mesh, rules_lib.spec(("batch",) + (None,) * (ndim - 1), rules))


def replicated(mesh):
  """NamedSharding that keeps a full copy on every device."""
  return NamedSharding(mesh, PartitionSpec())


def place(tree, logical_tree, mesh, rules):
  """device_put each leaf of tree into the sharding its logical names give on mesh."""
  return jax.device_put(tree, rules_lib.shardings(logical_tree, mesh, rules))


def place_batch(batch, mesh, rules):
  """device_put a dict of [B, ...] arrays with the batch axis split over the batch axes."""
  return {name: jax.device_put(value, batch_sharding(mesh, rules, np.ndim(value)))
          for name, value in batch.items()}
