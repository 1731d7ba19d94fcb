"""AdamW with linear warmup, a constant or cosine schedule, gradient clipping and a decay mask.

  optimizer_config = OptimizerConfig(learning_rate=1e-6, warmup_steps=50)
  optimizer = make(optimizer_config)                 # an optax.GradientTransformation
  learning_rate = learning_rate_schedule(optimizer_config)(step)

Schedule, for step s = 0, 1, ... (the step the update is applied at):
  warmup   s < warmup_steps:  learning_rate * (s + 1) / warmup_steps
  constant afterwards:        learning_rate
  cosine   afterwards:        final + (learning_rate - final) * (1 + cos(pi * p)) / 2,
           p = (s - warmup_steps) / (total_steps - warmup_steps) clipped to [0, 1],
           final = learning_rate * final_learning_rate_fraction
Weight decay applies to weight matrices only: never to norms, biases, the input embedding or
per-head vectors.
Gradients are clipped to a global norm of max_grad_norm before Adam sees them.

Precision: Adam's moments are kept in state_dtype (float32 by default) whatever the parameter
dtype. With master_weights and parameters in a narrower dtype (bfloat16), the optimizer state
also holds a float32 copy of the parameters: updates are applied to that copy and the
parameters are its rounding, so steps smaller than bfloat16's resolution (a learning rate of
1e-7 on weights near 1) still add up instead of being rounded away.
"""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from whale_jax.train import options

OptimizerConfig = options.OptimizerConfig
SCHEDULES = options.SCHEDULES


def learning_rate_schedule(optimizer_config):
  """step -> learning rate (see the module docstring)."""
  peak = optimizer_config.learning_rate
  warmup_steps = optimizer_config.warmup_steps
  final = peak * optimizer_config.final_learning_rate_fraction

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    warmup = peak * jnp.minimum(1.0, (step + 1) / max(warmup_steps, 1))
    if optimizer_config.schedule == "constant":
      after = jnp.float32(peak)
    else:
      progress = jnp.clip((step - warmup_steps) /
                          (optimizer_config.total_steps - warmup_steps), 0.0, 1.0)
      after = final + (peak - final) * 0.5 * (1 + jnp.cos(jnp.pi * progress))
    return jnp.where(step < warmup_steps, warmup, after)

  return schedule


_UNSTACKED = ("embedding", "unembedding", "final_norm")  # top-level params without an L axis


def weight_decay_mask(params):
  """True for the leaves weight decay applies to: weight matrices.

  Not decayed: norms, biases, the input embedding, and every leaf with fewer than two axes
  besides the stacked layer axis (per-head scalars such as linear attention's decay rates).
  """

  def decays(path, leaf):
    name = path[-1].key
    matrix_axes = len(leaf.shape) - (0 if path[0].key in _UNSTACKED else 1)
    return not (name == "embedding" or name.endswith("norm") or name.endswith("bias")
                or matrix_axes < 2)

  return jax.tree_util.tree_map_with_path(decays, params)


class PrecisionState(NamedTuple):
  """State of in_state_dtype(): the inner transformation's, and the float32 master copy of
  the parameters (None when the parameters are float32 already or master weights are off)."""
  inner: Any
  master: Any


def in_state_dtype(inner, state_dtype="float32", master_weights=True):
  """Runs inner on gradients and parameters cast to state_dtype, so its state is kept in it.

  Updates come out in state_dtype; optax.apply_updates adds them in that dtype and rounds the
  sum to each parameter's own dtype.
  """
  dtype = jnp.dtype(state_dtype)
  cast = lambda tree: jax.tree.map(lambda x: x.astype(dtype), tree)

  def keeps_master(params):
    return master_weights and any(jnp.dtype(leaf.dtype) != dtype and
                                  jnp.dtype(leaf.dtype).itemsize < dtype.itemsize
                                  for leaf in jax.tree.leaves(params))

  def init(params):
    wide = cast(params)
    return PrecisionState(inner.init(wide), wide if keeps_master(params) else None)

  def update(grads, state, params=None):
    base = state.master if state.master is not None else (
        None if params is None else cast(params))
    updates, inner_state = inner.update(cast(grads), state.inner, base)
    master = None
    if state.master is not None:
      master = jax.tree.map(jnp.add, state.master, updates)
      updates = jax.tree.map(lambda new, old: new - old.astype(dtype), master, params)
    return updates, PrecisionState(inner_state, master)

  return optax.GradientTransformation(init, update)


def make(optimizer_config):
  """The optax transformation: clip by global norm, then AdamW under the schedule, with its
  state (and master weights) in optimizer_config.state_dtype."""
  parts = []
  if optimizer_config.max_grad_norm is not None:
    parts.append(optax.clip_by_global_norm(optimizer_config.max_grad_norm))
  parts.append(optax.adamw(learning_rate_schedule(optimizer_config),
                           b1=optimizer_config.beta1, b2=optimizer_config.beta2,
                           eps=optimizer_config.epsilon,
                           weight_decay=optimizer_config.weight_decay,
                           mask=weight_decay_mask))
  return in_state_dtype(optax.chain(*parts), optimizer_config.state_dtype,
                        optimizer_config.master_weights)
