"""The jitted, sharded train step shared by RSFT and GRPO.

  step = make_train_step(model_config, rsft.loss, optimizer, mesh, rules.TRAIN_RULES)
  state, metrics = step(state, batch)

loss_fn(params, model_config, batch) -> (loss_sum, normalizer, metrics) is evaluated on each
micro-batch; the step's loss is (sum of loss_sum) / (sum of normalizer) over the global batch
and its gradient is the summed micro-batch gradients divided by the same total, so gradient
accumulation changes nothing but memory. A metric given as (sum, count) is reported as
global sum / global count; a bare value as its global sum.

Micro-batch m takes rows m, m + M, m + 2M, ... (M = num_microbatches): each micro-batch keeps
rows on every data-parallel device. The state is donated: do not reuse the state passed in.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from whale_jax.models import decoder
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules as rules_lib
from whale_jax.train import batch as batch_lib
from whale_jax.train import platform_tuning as tuning_lib
from whale_jax.train import train_state


def _split_microbatches(batch, num_microbatches):
  """[B, ...] -> [M, B / M, ...] with micro-batch m = rows m, m + M, ..."""

  def split(x):
    x = x.reshape(x.shape[0] // num_microbatches, num_microbatches, *x.shape[1:])
    x = jnp.swapaxes(x, 0, 1)
    return rules_lib.constrain(x, (None, "batch") + (None,) * (x.ndim - 2))

  return jax.tree.map(split, batch)


def _accumulate(total, new):
  return jax.tree.map(jnp.add, total, new)


def _finish_metrics(metric_sums):
  out = {}
  for name, value in metric_sums.items():
    if isinstance(value, tuple):
      out[name] = value[0] / jnp.maximum(value[1], 1e-9)
    else:
      out[name] = value
  return out


def loss_and_grads(params, model_config, loss_fn, batch, num_microbatches=1):
  """(loss, grads, metrics) of the global batch, summed over micro-batches (inside jit).

  With one micro-batch the gradient is taken of loss_sum / normalizer itself (the normalizer
  held constant), so the division scales the backward pass's seed instead of costing a pass
  over every gradient afterwards.
  """

  def micro_terms(micro_batch, scale=False):
    def objective(params):
      loss_sum, normalizer, metrics = loss_fn(params, model_config, micro_batch)
      scaled = loss_sum / jax.lax.stop_gradient(_denominator(normalizer)) if scale else loss_sum
      return scaled, (loss_sum, normalizer, metrics)

    (_, (loss_sum, normalizer, metrics)), grads = jax.value_and_grad(
        objective, has_aux=True)(params)
    grads = jax.tree.map(lambda g: g.astype(jnp.float32), grads)
    metrics = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), metrics)
    return loss_sum, normalizer, grads, metrics

  if num_microbatches == 1:
    loss_sum, normalizer, grads, metrics = micro_terms(batch, scale=True)
  else:
    micro_batches = _split_microbatches(batch, num_microbatches)
    shapes = jax.eval_shape(micro_terms, jax.tree.map(lambda x: x[0], micro_batches))
    zeros = jax.tree.map(lambda shape: jnp.zeros(shape.shape, shape.dtype), shapes)

    def body(totals, micro_batch):
      loss_sum, normalizer, grads, metrics = _accumulate(totals, micro_terms(micro_batch))
      grads = jax.tree.map(rules_lib.constrain, grads, decoder.logical_axes(model_config))
      return (loss_sum, normalizer, grads, metrics), None

    (loss_sum, normalizer, grads, metrics), _ = jax.lax.scan(body, zeros, micro_batches)
    grads = jax.tree.map(lambda g: g / _denominator(normalizer), grads)
  metrics = _finish_metrics(metrics)
  metrics["normalizer"] = normalizer
  return loss_sum / _denominator(normalizer), grads, metrics


def _denominator(normalizer):
  return jnp.maximum(normalizer, 1e-9)


def make_train_step(model_config, loss_fn, optimizer, mesh, rules=rules_lib.TRAIN_RULES,
                    num_microbatches=1, learning_rate_schedule=None, donate=True,
                    platform_tuning=True):
  """Builds step(state, batch) -> (new state, metrics), jitted and sharded on mesh.

  Args:
    model_config: the ModelConfig of state["params"]. The step compiles
      platform_tuning.tuned(model_config, the mesh's platform): on CPU, blockwise attention
      in 256-long blocks and unrolled layers where the config leaves those fields at their
      defaults (train/platform_tuning.py).
    loss_fn: loss(params, model_config, batch) -> (loss_sum, normalizer, metrics), e.g.
      rsft.loss or functools.partial(grpo.loss, grpo_config=...).
    optimizer: the optax transformation the state was created with.
    mesh, rules: where the state and the batch live (see parallel/).
    num_microbatches: gradient accumulation steps per call.
    learning_rate_schedule: if given, metrics["learning_rate"] is its value at this step.
    donate: reuse the input state's buffers for the output state.
    platform_tuning: compile the platform's choices (see model_config) with the platform's
      XLA options for each new set of shapes (platform_tuning.compiler_options: on CPU, the
      temporaries in heaps malloc can reuse); False compiles model_config as given, with
      XLA's defaults.
  Returns:
    step(state, batch); batch is a dict of [B, T] numpy or jax arrays (train/batch.py).
    metrics: "loss", "grad_norm" (before clipping), "normalizer", the loss's own metrics.
  """
  mesh_lib.validate_model(model_config, mesh, rules)
  state_shardings = train_state.shardings(model_config, optimizer, mesh, rules)
  batch_sharding = mesh_lib.batch_sharding(mesh, rules)
  platform = mesh.devices.flat[0].platform
  compiled_config = (tuning_lib.tuned(model_config, platform) if platform_tuning
                     else model_config)

  def step(state, batch):
    with rules_lib.activate(mesh, rules):
      loss, grads, metrics = loss_and_grads(state["params"], compiled_config, loss_fn, batch,
                                            num_microbatches)
      updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
      params = optax.apply_updates(state["params"], updates)
    metrics.update(loss=loss, grad_norm=optax.global_norm(grads))
    if learning_rate_schedule is not None:
      metrics["learning_rate"] = jnp.asarray(learning_rate_schedule(state["step"]),
                                             jnp.float32)
    return {"step": state["step"] + 1, "params": params, "opt_state": opt_state}, metrics

  jitted = jax.jit(step, in_shardings=(state_shardings, batch_sharding),
                   out_shardings=(state_shardings, mesh_lib.replicated(mesh)),
                   donate_argnums=(0,) if donate else ())

  multi_process = mesh_lib.spans_processes(mesh)
  compiled_steps = {}  # (state, batch) structure and shapes -> (XLA options, compiled step)

  def run(state, batch):
    """jitted(state, batch), compiled with the platform's XLA options for these shapes."""
    if not (platform_tuning and platform in tuning_lib.COMPILER_OPTION_PLATFORMS):
      return jitted(state, batch)
    leaves, structure = jax.tree.flatten((state, batch))
    key = structure, tuple((np.shape(leaf), np.result_type(leaf)) for leaf in leaves)
    if key not in compiled_steps:
      traced = jitted.trace(state, batch)
      options = tuning_lib.compiler_options(platform, traced.jaxpr)
      compiled_steps[key] = options, traced.lower().compile(compiler_options=options)
    return compiled_steps[key][1](state, batch)

  def checked_step(state, batch):
    batch_size, _ = batch_lib.validate(batch)
    mesh_lib.validate_batch_size(batch_size, mesh, rules, num_microbatches)
    batch = {name: value if isinstance(value, jax.Array) else np.asarray(value)
             for name, value in batch.items()}
    if multi_process:  # every process holds the same global batch; each places its shards
      batch = {name: value if isinstance(value, jax.Array) else jax.make_array_from_callback(
          value.shape, batch_sharding, lambda index, value=value: value[index])
               for name, value in batch.items()}
    return run(state, batch)

  checked_step.jitted = jitted
  checked_step.compiled_steps = compiled_steps
  return checked_step
