"""The train state: {"step": int32 [], "params": params tree, "opt_state": optax state}.

A plain dict, so it is a pytree that jit, orbax and the sampler's weight sync all accept.
Its sharding follows the model's logical axes: optimizer state leaves that mirror a
parameter (Adam's mu and nu) take that parameter's axes, everything else is replicated.

  state = create(model_config, params, optimizer, mesh, rules.TRAIN_RULES)
  params = init_params(model_config, rng, mesh, rules.TRAIN_RULES)   # random, sharded
"""
import jax
import jax.numpy as jnp

from whale_jax.models import decoder
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules as rules_lib


def _param_axes_by_path(model_config):
  axes = decoder.logical_axes(model_config)
  flat, _ = jax.tree_util.tree_flatten_with_path(axes, is_leaf=rules_lib.is_logical_names)
  return {tuple(entry.key for entry in path): names for path, names in flat}


def _optimizer_state_axes(model_config, optimizer, param_shapes):
  """Logical names for each optimizer-state leaf: its parameter's when it mirrors one."""
  by_path = _param_axes_by_path(model_config)
  state_shapes = jax.eval_shape(optimizer.init, param_shapes)

  def names_for(path, leaf):
    keys = []
    for entry in reversed(path):  # the params path is the trailing run of dict keys
      if not isinstance(entry, jax.tree_util.DictKey):
        break
      keys.insert(0, entry.key)
    names = by_path.get(tuple(keys))
    if names is not None and len(names) == len(leaf.shape):
      return names
    return (None,) * len(leaf.shape)

  return jax.tree_util.tree_map_with_path(names_for, state_shapes)


def _param_shapes(model_config):
  return jax.eval_shape(lambda: decoder.init_params(model_config, jax.random.key(0)))


def logical_axes(model_config, optimizer):
  """Same tree as the train state, with logical axis names at each leaf."""
  return {"step": (), "params": decoder.logical_axes(model_config),
          "opt_state": _optimizer_state_axes(model_config, optimizer,
                                             _param_shapes(model_config))}


def shardings(model_config, optimizer, mesh, rules):
  """NamedShardings of the train state on mesh; ValueError if a parameter cannot split."""
  mesh_lib.validate_model(model_config, mesh, rules)
  mesh_lib.validate_shardable(_param_shapes(model_config), decoder.logical_axes(model_config),
                              mesh, rules)
  return rules_lib.shardings(logical_axes(model_config, optimizer), mesh, rules)


def abstract(model_config, optimizer, mesh, rules):
  """ShapeDtypeStructs (with shardings) of the train state; the target of a restore."""
  shapes = jax.eval_shape(lambda: _new_state(
      decoder.init_params(model_config, jax.random.key(0)), optimizer))
  return jax.tree.map(lambda shape, sharding: jax.ShapeDtypeStruct(
      shape.shape, shape.dtype, sharding=sharding), shapes,
                      shardings(model_config, optimizer, mesh, rules))


def _new_state(params, optimizer):
  return {"step": jnp.zeros((), jnp.int32), "params": params,
          "opt_state": optimizer.init(params)}


def create(model_config, params, optimizer, mesh, rules):
  """A step-0 state around params (any placement); placed on mesh by the rules."""
  state_shardings = shardings(model_config, optimizer, mesh, rules)
  params = jax.device_put(params, state_shardings["params"])
  return jax.jit(lambda params: _new_state(params, optimizer),
                 out_shardings=state_shardings)(params)


def init_params(model_config, rng, mesh, rules):
  """decoder.init_params(model_config, rng), created already sharded on mesh by the rules:
  no device ever holds the whole tree unless the rules replicate it. create() then builds
  the train state around it without moving it."""
  mesh_lib.validate_model(model_config, mesh, rules)
  param_shardings = rules_lib.shardings(decoder.logical_axes(model_config), mesh, rules)
  return jax.jit(lambda rng: decoder.init_params(model_config, rng),
                 out_shardings=param_shardings)(rng)
