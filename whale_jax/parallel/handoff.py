"""Trainer-to-sampler weights on a multi-host mesh, device to device.

On a mesh that spans several processes the trainer's params are sharded over every host's
devices, while each host's sampler decodes on a mesh of its own devices
(mesh.host_local_mesh), so it never joins a collective with another host. After a weight step
each host needs the full weights again, laid out for its sampler. That is one resharding:

  handoff = make_handoff(decoder.logical_axes(config), mesh, rules.SAMPLE_RULES)
  local_params = handoff(state["params"])    # on host_local_mesh(mesh), SAMPLE_RULES layout

The target is a sharding on the *global* mesh viewed as [hosts, data, fsdp, tensor], where
row p is exactly process p's local mesh: the sampler's partition spec on that mesh is
replicated over "hosts" and sharded within each host as the local mesh shards it. The
resharding (jax.device_put between two shardings of the same devices) moves every byte
between devices (XLA collectives: ICI/DCN on a pod); no byte passes through host memory,
which tests/parallel/test_distributed.py checks under jax.transfer_guard. Each host then
wraps its addressable shards, without a copy, as an array on its local mesh.

handoff_bytes_per_chip says what a chip receives per handoff, from the shardings alone.
"""
import math

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules as rules_lib

HOSTS_AXIS = "hosts"


def hosts_mesh(mesh):
  """mesh's devices as [hosts, data, fsdp, tensor]: row p is process p's host_local_mesh."""
  rows = [mesh_lib.host_local_mesh(mesh, process_index).devices
          for process_index in sorted({d.process_index for d in mesh.devices.flat})]
  return Mesh(np.stack(rows), (HOSTS_AXIS,) + tuple(mesh.axis_names),
              axis_types=(jax.sharding.AxisType.Auto,) * (1 + len(mesh.axis_names)))


def make_handoff(logical_tree, mesh, rules):
  """A function from params sharded on mesh to this host's full copy on its local mesh, laid
  out by rules (see the module docstring). Every process must call it together."""
  local_mesh = mesh_lib.host_local_mesh(mesh)
  global_shardings = rules_lib.shardings(logical_tree, hosts_mesh(mesh), rules)
  local_shardings = rules_lib.shardings(logical_tree, local_mesh, rules)

  def to_local(array, local_sharding):
    by_device = {shard.device: shard.data for shard in array.addressable_shards}
    devices = local_sharding.addressable_devices_indices_map(array.shape)
    return jax.make_array_from_single_device_arrays(
        array.shape, local_sharding, [by_device[device] for device in devices])

  def handoff(params):
    resharded = jax.device_put(params, global_shardings)
    return jax.tree.map(to_local, resharded, local_shardings)

  return handoff


def as_target_order(sharding, target):
  """sharding re-expressed over target's device order (the same shards on the same devices),
  as jax.device_put does before resharding between meshes whose devices are in different
  orders (jax requires one device order per jitted program): with it the handoff compiles
  ahead of time as jit(identity, out_shardings=target) (whale_jax.aot). Uses
  NamedSharding's private _logical_device_ids, as jax's device_put does."""
  if sharding.is_fully_replicated:
    logical = None
  else:
    position = {device: index for index, device in enumerate(target.mesh.devices.flat)}
    logical = tuple(position[device] for device in sharding.mesh.devices.flat)
  mesh = Mesh(target.mesh.devices.reshape(sharding.mesh.axis_sizes), sharding.mesh.axis_names,
              axis_types=sharding.mesh.axis_types)
  return NamedSharding(mesh, sharding.spec, _logical_device_ids=logical)


def _shard_bytes(shape, dtype, sharding):
  shard_shape = sharding.shard_shape(tuple(shape))
  return math.prod(shard_shape) * np.dtype(dtype).itemsize


def handoff_bytes_per_chip(shapes, logical_tree, mesh, train_rules, sample_rules):
  """(bytes a chip holds for its sampler, bytes it already held as the trainer's shard) per
  handoff, summed over the params; their difference bounds what arrives over the
  interconnect. shapes: a tree of jax.ShapeDtypeStruct (e.g. jax.eval_shape of the init)."""
  train = rules_lib.shardings(logical_tree, mesh, train_rules)
  sample = rules_lib.shardings(logical_tree, hosts_mesh(mesh), sample_rules)
  held = sum(jax.tree.leaves(jax.tree.map(
      lambda leaf, sharding: _shard_bytes(leaf.shape, leaf.dtype, sharding), shapes, sample)))
  before = sum(jax.tree.leaves(jax.tree.map(
      lambda leaf, sharding: _shard_bytes(leaf.shape, leaf.dtype, sharding), shapes, train)))
  return held, before
