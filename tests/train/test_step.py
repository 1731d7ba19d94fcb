"""The jitted train step: sharded == unsharded, micro-batching == one global batch, overfitting.

Steps use SGD with learning rate 1 where the numbers are compared, so the updated params are
params - gradient and a wrong gradient anywhere shows up at full size. The unsharded step is
checked against a gradient written out without the loss module; the sharded ones, which also
split the batch into micro-batches, against the unsharded step.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec

from tests.train import random_params
from whale_jax.models import config as config_lib
from whale_jax.models import decoder
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.train import grpo
from whale_jax.train import optimizer as optimizer_lib
from whale_jax.train import packing
from whale_jax.train import rsft
from whale_jax.train import step as step_lib
from whale_jax.train import train_state

MODEL = config_lib.ModelConfig(vocab_size=40, num_layers=2, embed_dim=24, mlp_dim=40,
                               num_heads=4, num_kv_heads=2, head_dim=6)
ROWS, ROW_LENGTH = 8, 12
GRPO_LOSS = functools.partial(grpo.loss, grpo_config=grpo.GRPOConfig(
    aggregation="sequence_mean_token_mean", importance_sampling="token_truncate",
    kl_weight=0.05))
LOSSES = {"rsft": rsft.loss, "grpo": GRPO_LOSS}


def make_batch(seed=0):
  """Eight rows with very different numbers of target tokens (2 to 22 per row)."""
  rng = np.random.default_rng(seed)
  samples = []
  for length in [12, 3, 11, 5, 12, 2, 9, 7, 4, 6, 10, 3]:
    loss_mask = np.zeros(length, np.float32)
    loss_mask[rng.integers(1, length):] = 1
    samples.append(packing.Sample(rng.integers(1, MODEL.vocab_size, size=length), loss_mask,
                                  sampler_logprobs=-rng.uniform(0.5, 4, size=length),
                                  advantage=float(rng.normal())))
  batch, _ = packing.pack(samples, ROW_LENGTH, num_rows=ROWS)
  batch["reference_logprobs"] = np.where(batch["loss_mask"] > 0,
                                         -rng.uniform(0.5, 4, size=batch["tokens"].shape),
                                         0).astype(np.float32)
  return batch


def single_device_mesh():
  return mesh_lib.make_mesh(data=1, devices=jax.devices()[:1])


def run_step(mesh, loss_fn, optimizer, num_microbatches=1, num_steps=1):
  state = train_state.create(MODEL, random_params.numpy_params(MODEL), optimizer, mesh,
                             rules.TRAIN_RULES)
  step = step_lib.make_train_step(MODEL, loss_fn, optimizer, mesh, rules.TRAIN_RULES,
                                  num_microbatches=num_microbatches)
  for _ in range(num_steps):
    state, metrics = step(state, make_batch())
  return jax.device_get(state), jax.device_get(metrics)


@functools.cache
def unsharded(loss_name):
  return run_step(single_device_mesh(), LOSSES[loss_name], optax.sgd(1.0))


@pytest.mark.parametrize("sizes, loss_name, num_microbatches", [
    (dict(data=1, fsdp=4, tensor=2), "rsft", 2),
    (dict(data=2, fsdp=2, tensor=2), "grpo", 2),
    pytest.param(dict(data=4, fsdp=1, tensor=2), "rsft", 1, marks=pytest.mark.slow),
    pytest.param(dict(data=1, fsdp=4, tensor=2), "grpo", 1, marks=pytest.mark.slow),
    pytest.param(dict(data=8, fsdp=1, tensor=1), "grpo", 1, marks=pytest.mark.slow),
    pytest.param(dict(data=1, fsdp=8, tensor=1), "rsft", 1, marks=pytest.mark.slow),
])
def test_sharded_step_matches_unsharded(sizes, loss_name, num_microbatches):
  expected_state, expected_metrics = unsharded(loss_name)
  state, metrics = run_step(mesh_lib.make_mesh(**sizes), LOSSES[loss_name], optax.sgd(1.0),
                            num_microbatches)
  np.testing.assert_allclose(metrics["loss"], expected_metrics["loss"], rtol=1e-5, atol=1e-6)
  for actual, expected in zip(jax.tree.leaves(state["params"]),
                              jax.tree.leaves(expected_state["params"])):
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-5)
  assert int(state["step"]) == 1


@pytest.mark.slow
def test_sharded_adamw_state_matches_unsharded_after_two_steps():
  optimizer = optimizer_lib.make(optimizer_lib.OptimizerConfig(learning_rate=1e-3,
                                                               weight_decay=0.1))
  expected, _ = run_step(single_device_mesh(), rsft.loss, optimizer, num_steps=2)
  actual, _ = run_step(mesh_lib.make_mesh(data=1, fsdp=4, tensor=2), rsft.loss, optimizer,
                       num_steps=2)
  # Adam's moments are smooth in the gradient; compare them tightly, the params loosely
  # (m / sqrt(v) is ill-conditioned where a gradient is ~0).
  adam_expected, adam_actual = expected["opt_state"].inner[1][0], actual["opt_state"].inner[1][0]
  for moment in ("mu", "nu"):
    for a, e in zip(jax.tree.leaves(getattr(adam_actual, moment)),
                    jax.tree.leaves(getattr(adam_expected, moment))):
      np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-7)
  for a, e in zip(jax.tree.leaves(actual["params"]), jax.tree.leaves(expected["params"])):
    np.testing.assert_allclose(a, e, atol=2e-5)


def reference_global_nll(params, batch):
  """Token-mean NLL over the whole batch, written out without the loss module."""
  logits = decoder.forward(params, MODEL, batch["tokens"], positions=batch["positions"],
                           segment_ids=batch["segment_ids"])
  log_distribution = jax.nn.log_softmax(logits[:, :-1], axis=-1)
  targets = jnp.take_along_axis(log_distribution, batch["tokens"][:, 1:, None], -1)[..., 0]
  mask = batch["loss_mask"][:, 1:]
  return -jnp.sum(targets * mask) / jnp.sum(mask)


@pytest.mark.parametrize("num_microbatches", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_microbatching_normalizes_over_the_global_batch(num_microbatches):
  batch = make_batch()
  params = random_params.numpy_params(MODEL)
  loss, grads = jax.jit(jax.value_and_grad(reference_global_nll))(params, batch)
  if num_microbatches == 1:
    state, metrics = unsharded("rsft")
  else:
    state, metrics = run_step(single_device_mesh(), rsft.loss, optax.sgd(1.0),
                              num_microbatches)
  np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-5)
  assert metrics["num_target_tokens"] == batch["loss_mask"].sum()
  # Jitted, and the leaves then read as numpy: eagerly each small op compiles on its own.
  np.testing.assert_allclose(metrics["grad_norm"], jax.jit(optax.global_norm)(grads), rtol=1e-5)
  grads = jax.device_get(grads)
  for actual, p, g in zip(jax.tree.leaves(state["params"]), jax.tree.leaves(params),
                          jax.tree.leaves(grads)):
    np.testing.assert_allclose(actual, p - g, rtol=0, atol=1e-5)


def test_cpu_tuned_step_equals_the_step_as_configured():
  """On CPU the step compiles blockwise attention in 256-long blocks and unrolled layers
  (train/platform_tuning.py); rows of 300 tokens in two segments (the second crossing the
  block boundary) span two key blocks. As configured (auto attention, one 512 block) the step
  runs dense attention in a layer scan."""
  rng = np.random.default_rng(5)
  rows, length = 2, 300
  segment_ids = np.where(np.arange(length) < 170, 1, 2)[None].repeat(rows, 0).astype(np.int32)
  positions = np.where(segment_ids == 1, np.arange(length), np.arange(length) - 170)
  loss_mask = (rng.uniform(size=(rows, length)) < 0.7).astype(np.float32)
  batch = {"tokens": rng.integers(1, MODEL.vocab_size, (rows, length)).astype(np.int32),
           "positions": positions.astype(np.int32), "segment_ids": segment_ids,
           "loss_mask": loss_mask}
  mesh = single_device_mesh()
  results = []
  for platform_tuning in (False, True):
    state = train_state.create(MODEL, random_params.numpy_params(MODEL), optax.sgd(1.0), mesh,
                               rules.TRAIN_RULES)
    step = step_lib.make_train_step(MODEL, rsft.loss, optax.sgd(1.0), mesh,
                                    platform_tuning=platform_tuning)
    results.append(jax.device_get(step(state, batch)))
  (expected, expected_metrics), (actual, metrics) = results
  np.testing.assert_allclose(metrics["loss"], expected_metrics["loss"], rtol=1e-6)
  for a, e in zip(jax.tree.leaves(actual["params"]), jax.tree.leaves(expected["params"])):
    np.testing.assert_allclose(a, e, rtol=0, atol=1e-6)


def test_optimizer_state_is_sharded_like_the_params():
  optimizer = optimizer_lib.make(optimizer_lib.OptimizerConfig())
  mesh = mesh_lib.make_mesh(data=1, fsdp=4, tensor=2)
  shardings = train_state.shardings(MODEL, optimizer, mesh, rules.TRAIN_RULES)
  adam = shardings["opt_state"].inner[1][0]
  assert adam.mu["layers"]["attention"]["query"].spec == PartitionSpec(None, "fsdp", "tensor",
                                                                       None)
  assert adam.nu["embedding"].spec == PartitionSpec("tensor", "fsdp")
  assert adam.count.spec == PartitionSpec()
  assert shardings["step"].spec == PartitionSpec()


def test_bad_batches_fail_before_compiling():
  mesh = mesh_lib.make_mesh(data=2, fsdp=2, tensor=2)
  optimizer = optax.sgd(1.0)
  step = step_lib.make_train_step(MODEL, rsft.loss, optimizer, mesh, num_microbatches=2)
  state = {"step": None, "params": None, "opt_state": None}  # never reached
  batch = make_batch()
  with pytest.raises(ValueError, match=r"batch_size=4 .* Use a multiple of 8"):
    step(state, {name: value[:4] for name, value in batch.items()})
  with pytest.raises(ValueError, match=r"lacks \['loss_mask'\]"):
    step(state, {name: value for name, value in batch.items() if name != "loss_mask"})
  with pytest.raises(TypeError, match=r"batch\['tokens'\] has dtype float32"):
    step(state, {**batch, "tokens": batch["tokens"].astype(np.float32)})


def test_a_tiny_model_overfits_a_small_set():
  model = config_lib.ModelConfig(vocab_size=32, num_layers=2, embed_dim=32, mlp_dim=64,
                                 num_heads=4, num_kv_heads=2, head_dim=8)
  rng = np.random.default_rng(0)
  samples = [packing.Sample(rng.integers(1, 32, size=16), np.r_[np.zeros(4), np.ones(12)])
             for _ in range(4)]
  batch, _ = packing.pack(samples, 16)
  optimizer = optimizer_lib.make(optimizer_lib.OptimizerConfig(learning_rate=1e-2,
                                                               warmup_steps=5))
  mesh = mesh_lib.make_mesh(data=4, devices=jax.devices()[:4])
  state = train_state.create(model, random_params.numpy_params(model), optimizer, mesh,
                             rules.TRAIN_RULES)
  step = step_lib.make_train_step(model, rsft.loss, optimizer, mesh)
  losses = []
  for _ in range(60):
    state, metrics = step(state, batch)
    losses.append(float(metrics["loss"]))
  assert losses[-1] <= 0.1 * losses[0], losses[::10]


HYBRID = config_lib.ModelConfig(
    model_type="qwen3_5", vocab_size=40, num_layers=3, embed_dim=24, mlp_dim=40, num_heads=4,
    num_kv_heads=2, head_dim=8, partial_rotary_factor=0.5, tie_embeddings=False,
    layer_types=("linear_attention", "linear_attention", "full_attention"),
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=4,
    linear_value_head_dim=6, linear_conv_width=4, rms_norm_eps=1e-2)


@pytest.mark.slow
def test_hybrid_qwen3_5_sharded_step_matches_unsharded():
  results = []
  for mesh in (single_device_mesh(), mesh_lib.make_mesh(data=2, fsdp=2, tensor=2)):
    state = train_state.create(HYBRID, random_params.numpy_params(HYBRID), optax.sgd(1.0),
                               mesh, rules.TRAIN_RULES)
    step = step_lib.make_train_step(HYBRID, GRPO_LOSS, optax.sgd(1.0), mesh, rules.TRAIN_RULES)
    results.append(jax.device_get(step(state, make_batch())))
  (expected, expected_metrics), (actual, metrics) = results
  np.testing.assert_allclose(metrics["loss"], expected_metrics["loss"], rtol=1e-5, atol=1e-6)
  # The delta rule's gated norm amplifies float32 rounding (see tests/models/test_qwen3_5.py)
  # and these gradients reach ~10: compare at 1e-4 of each tensor's scale.
  for a, e in zip(jax.tree.leaves(actual["params"]), jax.tree.leaves(expected["params"])):
    np.testing.assert_allclose(a, e, rtol=0, atol=1e-4 * np.abs(e).max())
