"""The frozen reference policy of GRPO's KL term: a copy of the initial weights.

  ref = reference.create(model_config, state["params"], mesh, rules.TRAIN_RULES, offload=False)
  ref.params         # the copy: model_config.compute_dtype, sharded like the policy's params
  ref.memory_kind    # "device", or "pinned_host" when offloaded

The copy is made once, before the first update, in the compute dtype (the forward pass casts
to it anyway, so reference logprobs at step 0 equal the policy's), and it owns its buffers:
the train step donates the policy's state without touching the reference.

Offload: with offload=True the copy lives in pinned host memory (memory_kind "pinned_host")
and a forward pass moves it onto the devices inside the jitted computation
(grpo_update.make_logprobs_fn), so during the train step -- the peak of training memory -- the
devices hold no reference weights. Where a device offers no pinned host memory the copy stays
in device memory, with a logged warning, and memory_kind says "device".
Cost per chip: see docs/design.md (Training: the reference copy).
"""
import dataclasses
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp

from whale_jax.models import decoder
from whale_jax.parallel import rules as rules_lib

PINNED_HOST = "pinned_host"


@dataclasses.dataclass(frozen=True)
class Reference:
  """A frozen copy of a policy's params (see the module docstring)."""
  params: Any
  memory_kind: str


def supports_pinned_host(mesh):
  """True when every device of mesh offers pinned host memory (JAX 0.10 on CPU does)."""
  for device in mesh.devices.flat:
    try:
      kinds = {memory.kind for memory in device.addressable_memories()}
    except Exception:  # a backend without the memories API  # pylint: disable=broad-except
      return False
    if PINNED_HOST not in kinds:
      return False
  return True


def param_shardings(model_config, mesh, rules, memory_kind="device"):
  """NamedShardings of the params on mesh, in memory_kind ("device" or "pinned_host")."""
  shardings = rules_lib.shardings(decoder.logical_axes(model_config), mesh, rules)
  if memory_kind == "device":
    return shardings
  return jax.tree.map(lambda sharding: sharding.with_memory_kind(memory_kind), shardings)


def create(model_config, params, mesh, rules, offload=False):
  """A Reference holding a copy of params in model_config.compute_dtype (own buffers)."""
  memory_kind = "device"
  if offload:
    if supports_pinned_host(mesh):
      memory_kind = PINNED_HOST
    else:
      logging.warning("config.training.grpo.offload_reference=True, but the devices of mesh "
                      "%s offer no %r memory; the reference copy stays in device memory.",
                      dict(mesh.shape), PINNED_HOST)
  dtype = model_config.compute_jnp_dtype
  device_shardings = param_shardings(model_config, mesh, rules)
  copy = jax.jit(lambda params: jax.tree.map(lambda x: jnp.array(x, dtype=dtype, copy=True),
                                             params),
                 out_shardings=device_shardings)(params)
  if memory_kind != "device":
    on_host = jax.device_put(copy, param_shardings(model_config, mesh, rules, memory_kind))
    jax.block_until_ready(on_host)
    jax.tree.map(lambda x: x.delete(), copy)
    copy = on_host
  return Reference(params=copy, memory_kind=memory_kind)
