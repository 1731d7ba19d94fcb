"""One batch of rollouts -> ppo_epochs x num_minibatches GRPO steps that clip against the
policy that sampled it.

  logprobs_fn = grpo_update.make_logprobs_fn(model_config, mesh, rules.TRAIN_RULES, temperature)
  ref = reference.create(model_config, state["params"], mesh, rules.TRAIN_RULES)  # if kept
  reference_fn = grpo_update.make_reference_logprobs_fn(model_config, ref, mesh, rules, ...)
  state, history = grpo_update.update(state, train_step, samples, grpo_config, logprobs_fn,
                                      reference_fn, row_length=..., samples_per_step=...)

Order of work for one batch (samples with advantages and sampler logprobs):
  1. split the samples into num_minibatches near-equal minibatches (shuffled by seed; in order
     when seed is None) and pack each into rows (row count rounded to row_multiple * 2^k, so
     the jitted functions compile for few shapes);
  2. before any update, for every minibatch: "old_logprobs" -- one forward pass at the current
     weights, which are the weights that sampled the batch (old_logprobs_source "recompute"),
     or the sampler's logprobs ("sampler"); and "reference_logprobs" from the frozen reference
     when one is kept;
  3. ppo_epochs passes; each visits every minibatch once (order shuffled per pass when seeded)
     and takes one optimizer step with the GRPO loss, which clips against old_logprobs.
The first step of a batch therefore has ratio 1 up to float error and clips nothing; later
steps are off-policy and are clipped.
"""
import math

import jax
import numpy as np

from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules as rules_lib
from whale_jax.train import logprobs as logprobs_lib
from whale_jax.train import packing
from whale_jax.train import reference as reference_lib

_FORWARD_KEYS = ("tokens", "positions", "segment_ids")


def make_logprobs_fn(model_config, mesh, rules, temperature=1.0, num_microbatches=1,
                     params_memory_kind="device"):
  """Builds logprobs(params, batch) -> [B, T] jax.Array, jitted and sharded like the step.

  The forward pass of train/logprobs.py (the loss's own), without a gradient. Rows are split
  into num_microbatches chunks (rows m, m + M, ...) run one after another to bound activation
  memory. params_memory_kind "pinned_host" takes params offloaded to host memory (a
  reference.Reference) and moves them onto the devices inside the computation.
  """
  logprobs_lib.check_temperature(temperature)
  mesh_lib.validate_model(model_config, mesh, rules)
  device_shardings = reference_lib.param_shardings(model_config, mesh, rules)
  param_shardings = reference_lib.param_shardings(model_config, mesh, rules,
                                                  params_memory_kind)
  batch_sharding = mesh_lib.batch_sharding(mesh, rules)

  def forward(params, batch):
    with rules_lib.activate(mesh, rules):
      if params_memory_kind != "device":
        params = jax.device_put(params, device_shardings)
      if num_microbatches == 1:
        return logprobs_lib.token_logprobs(params, model_config, batch, temperature)
      rows, length = batch["tokens"].shape
      split = jax.tree.map(
          lambda x: x.reshape(rows // num_microbatches, num_microbatches, length).swapaxes(0, 1),
          batch)  # [M, B / M, T], micro-batch m = rows m, m + M, ...
      chunks = jax.lax.map(
          lambda micro: logprobs_lib.token_logprobs(params, model_config, micro, temperature),
          split)
      return chunks.swapaxes(0, 1).reshape(rows, length)

  jitted = jax.jit(forward, in_shardings=(param_shardings, batch_sharding),
                   out_shardings=batch_sharding)
  multi_process = mesh_lib.spans_processes(mesh)

  def logprobs(params, batch):
    mesh_lib.validate_batch_size(np.shape(batch["tokens"])[0], mesh, rules, num_microbatches)
    inputs = {}
    for name in _FORWARD_KEYS:
      value = batch[name]
      if multi_process and not isinstance(value, jax.Array):
        value = np.asarray(value)
        value = jax.make_array_from_callback(value.shape, batch_sharding,
                                             lambda index, value=value: value[index])
      inputs[name] = value
    return jitted(params, inputs)

  logprobs.jitted = jitted
  return logprobs


def make_reference_logprobs_fn(model_config, ref, mesh, rules, temperature=1.0,
                               num_microbatches=1):
  """batch -> [B, T] logprobs under the frozen reference ref (a reference.Reference)."""
  forward = make_logprobs_fn(model_config, mesh, rules, temperature, num_microbatches,
                             params_memory_kind=ref.memory_kind)
  return lambda batch: forward(ref.params, batch)


def minibatch_indices(num_samples, num_minibatches, seed=None):
  """Sample indices of each minibatch: near-equal parts of a permutation (seed) or of
  range(num_samples) (seed None); never more parts than samples."""
  order = (np.arange(num_samples) if seed is None
           else np.random.default_rng(seed).permutation(num_samples))
  return [part for part in np.array_split(order, min(num_minibatches, num_samples))]


def _round_rows(num_rows, multiple):
  rows = max(multiple, 1)
  while rows < num_rows:
    rows *= 2
  return rows


def pack_minibatches(samples, num_minibatches, row_length, row_multiple=1, seed=None):
  """[(batch dict, sample indices)] for each minibatch (see the module docstring, step 1)."""
  minibatches = []
  for indices in minibatch_indices(len(samples), num_minibatches, seed):
    chunk = [samples[i] for i in indices]
    batch, _ = packing.pack(chunk, row_length)
    rows = _round_rows(batch["tokens"].shape[0], row_multiple)
    if rows != batch["tokens"].shape[0]:
      batch, _ = packing.pack(chunk, row_length, num_rows=rows)
    minibatches.append((batch, indices))
  return minibatches


def num_minibatches_for(grpo_config, num_samples, samples_per_step):
  """config.training.grpo.num_minibatches, or one per samples_per_step samples."""
  if grpo_config.num_minibatches is not None:
    return grpo_config.num_minibatches
  return max(1, math.ceil(num_samples / samples_per_step))


def attach_old_logprobs(minibatches, params, logprobs_fn, source="recompute"):
  """Adds "old_logprobs" to every batch: logprobs_fn(params, batch), or the sampler's."""
  for batch, _ in minibatches:
    if source == "sampler":
      if "sampler_logprobs" not in batch:
        raise ValueError("config.training.grpo.old_logprobs_source='sampler' needs samples "
                         "with sampler_logprobs; record them in the rollouts or use "
                         "'recompute'.")
      batch["old_logprobs"] = batch["sampler_logprobs"]
    else:
      batch["old_logprobs"] = logprobs_fn(params, batch)
  return minibatches


def attach_reference_logprobs(minibatches, reference_logprobs_fn):
  """Adds "reference_logprobs" to every batch."""
  for batch, _ in minibatches:
    batch["reference_logprobs"] = reference_logprobs_fn(batch)
  return minibatches


def ppo_steps(state, train_step, minibatches, ppo_epochs, seed=None):
  """ppo_epochs passes of one train_step per minibatch; returns (state, history).

  history: one dict of float metrics per step, with "ppo_epoch" and "minibatch" (its index in
  minibatches) added. Minibatch order is shuffled per pass by (seed, pass) when seed is given.
  """
  history = []
  for epoch in range(ppo_epochs):
    order = (range(len(minibatches)) if seed is None else np.random.default_rng(
        (*np.atleast_1d(seed).tolist(), epoch)).permutation(len(minibatches)))
    for index in order:
      state, metrics = train_step(state, minibatches[index][0])
      row = {name: float(value) for name, value in jax.device_get(metrics).items()}
      history.append({**row, "ppo_epoch": epoch, "minibatch": int(index)})
  return state, history


def update(state, train_step, samples, grpo_config, logprobs_fn, reference_logprobs_fn=None,
           *, row_length, samples_per_step, row_multiple=1, seed=None, minibatches=None):
  """All GRPO updates for one batch of rollouts (module docstring); returns (state, history).

  Args:
    state: the train state; state["params"] must be the weights that sampled `samples`.
    train_step: step(state, batch) -> (state, metrics) with the GRPO loss (train/step.py).
    samples: packing.Sample list with advantages (and sampler_logprobs).
    grpo_config: grpo.GRPOConfig (ppo_epochs, num_minibatches, old_logprobs_source, ...).
    logprobs_fn: make_logprobs_fn(...) or any (params, batch) -> [B, T] logprobs.
    reference_logprobs_fn: batch -> [B, T]; required when grpo_config.uses_reference.
    row_length, samples_per_step, row_multiple: packing (see pack_minibatches).
    seed: shuffles samples into minibatches and minibatch order per pass; None = in order.
    minibatches: [(batch, sample indices)] packed already, step 1 done by the caller (a
      multi-host trainer packs each host's part of every minibatch); samples is then unused.
  """
  if grpo_config.uses_reference and reference_logprobs_fn is None:
    raise ValueError(f"config.training.grpo.kl_weight={grpo_config.kl_weight} (keep_reference="
                     f"{grpo_config.keep_reference}) needs a reference: pass "
                     "reference_logprobs_fn=make_reference_logprobs_fn(...).")
  if minibatches is None:
    if not samples:
      return state, []
    num_minibatches = num_minibatches_for(grpo_config, len(samples), samples_per_step)
    minibatches = pack_minibatches(samples, num_minibatches, row_length, row_multiple, seed)
  attach_old_logprobs(minibatches, state["params"], logprobs_fn,
                      grpo_config.old_logprobs_source)
  if grpo_config.uses_reference:
    attach_reference_logprobs(minibatches, reference_logprobs_fn)
  return ppo_steps(state, train_step, minibatches, grpo_config.ppo_epochs, seed)
