"""grpo_update on a real decoder and an 8-device mesh: the first step of a batch clips nothing
and has no KL, later steps clip and drift; the reference copy survives the donated train state;
an offloaded (pinned host) reference gives the same logprobs; the sharded and micro-batched
forward equals the unsharded one. The first test compiles a sharded train step (slow); the
linear-softmax tests in test_grpo_update.py check the same properties in the default run."""
import functools

import jax
import numpy as np
import optax
import pytest

from tests.train import random_params
from whale_jax.models import config as config_lib
from whale_jax.models import decoder
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.train import advantages as advantages_lib
from whale_jax.train import grpo
from whale_jax.train import grpo_update
from whale_jax.train import logprobs as logprobs_lib
from whale_jax.train import packing
from whale_jax.train import reference as reference_lib
from whale_jax.train import step as step_lib
from whale_jax.train import train_state

MODEL = config_lib.ModelConfig(vocab_size=40, num_layers=2, embed_dim=24, mlp_dim=40,
                               num_heads=4, num_kv_heads=2, head_dim=6)
ROW_LENGTH = 16


def make_samples(seed=0):
  rng = np.random.default_rng(seed)
  rewards = rng.integers(0, 2, size=(4, 4)).astype(np.float64)
  rewards[:, 0], rewards[:, 1] = 0.0, 1.0  # every group informative
  samples = []
  for advantage in advantages_lib.group_advantages(rewards).reshape(-1):
    length = int(rng.integers(6, ROW_LENGTH + 1))
    loss_mask = (np.arange(length) >= 3).astype(np.float32)
    samples.append(packing.Sample(rng.integers(1, MODEL.vocab_size, size=length), loss_mask,
                                  sampler_logprobs=np.zeros(length), advantage=float(advantage)))
  return samples


@pytest.mark.slow
def test_clip_and_kl_over_one_batch_on_a_sharded_decoder():
  mesh = mesh_lib.make_mesh(data=1, fsdp=4, tensor=2)
  grpo_config = grpo.GRPOConfig(num_minibatches=4, keep_reference=True, compute_entropy=False)
  optimizer = optax.adam(0.05)
  state = train_state.create(MODEL, random_params.numpy_params(MODEL), optimizer, mesh,
                             rules.TRAIN_RULES)
  step = step_lib.make_train_step(MODEL, functools.partial(grpo.loss, grpo_config=grpo_config),
                                  optimizer, mesh, rules.TRAIN_RULES)
  logprobs_fn = grpo_update.make_logprobs_fn(MODEL, mesh, rules.TRAIN_RULES)
  ref = reference_lib.create(MODEL, state["params"], mesh, rules.TRAIN_RULES)
  reference_fn = grpo_update.make_reference_logprobs_fn(MODEL, ref, mesh, rules.TRAIN_RULES)
  samples = make_samples()
  probe, _ = packing.pack(samples, ROW_LENGTH, num_rows=16)
  before = np.asarray(logprobs_fn(state["params"], probe))

  state, history = grpo_update.update(state, step, samples, grpo_config, logprobs_fn,
                                      reference_fn, row_length=ROW_LENGTH, samples_per_step=4,
                                      row_multiple=mesh_lib.axis_size(mesh, "batch",
                                                                      rules.TRAIN_RULES))
  assert len(history) == 4 and int(state["step"]) == 4
  first, later = history[0], history[1:]
  for name in ("clip_fraction", "clip_fraction_low", "clip_fraction_high"):
    assert first[name] == 0.0  # old logprobs from the same weights: ratio 1 up to float error
  assert abs(first["kl_to_reference"]) < 1e-9 and abs(first["approx_kl"]) < 1e-9
  assert all(row["clip_fraction"] > 0 for row in later[1:]), [r["clip_fraction"] for r in later]
  assert all(row["kl_to_reference"] > 1e-4 for row in later)
  # The frozen copy outlived four donated states and still scores the initial weights.
  np.testing.assert_array_equal(np.asarray(reference_fn(probe)), before)
  assert not np.allclose(np.asarray(logprobs_fn(state["params"], probe)), before, atol=1e-3)


def test_offloaded_reference_and_microbatched_forward_match():
  mesh = mesh_lib.make_mesh(data=2, fsdp=2, tensor=2)
  params = random_params.numpy_params(MODEL)
  on_device = reference_lib.create(MODEL, params, mesh, rules.TRAIN_RULES)
  offloaded = reference_lib.create(MODEL, params, mesh, rules.TRAIN_RULES, offload=True)
  assert on_device.memory_kind == "device" and offloaded.memory_kind == "pinned_host"
  assert all(x.sharding.memory_kind == "pinned_host" for x in jax.tree.leaves(offloaded.params))
  batch, _ = packing.pack(make_samples(1), ROW_LENGTH, num_rows=16)
  whole = grpo_update.make_reference_logprobs_fn(MODEL, on_device, mesh, rules.TRAIN_RULES)
  host = grpo_update.make_reference_logprobs_fn(MODEL, offloaded, mesh, rules.TRAIN_RULES,
                                                num_microbatches=2)
  np.testing.assert_allclose(np.asarray(host(batch)), np.asarray(whole(batch)), rtol=1e-6,
                             atol=1e-6)
  unsharded = jax.jit(logprobs_lib.token_logprobs, static_argnums=1)(params, MODEL, batch)
  np.testing.assert_allclose(np.asarray(whole(batch)), np.asarray(unsharded), rtol=1e-5,
                             atol=1e-5)


def test_the_reference_owns_its_buffers():
  mesh = mesh_lib.make_mesh(data=1, fsdp=4, tensor=2)
  params = mesh_lib.place(random_params.numpy_params(MODEL), decoder.logical_axes(MODEL), mesh,
                          rules.TRAIN_RULES)
  expected = jax.tree.map(np.asarray, params)
  ref = reference_lib.create(MODEL, params, mesh, rules.TRAIN_RULES)
  jax.tree.map(lambda x: x.delete(), params)  # as a donated train state would be
  for actual, value in zip(jax.tree.leaves(ref.params), jax.tree.leaves(expected)):
    np.testing.assert_array_equal(np.asarray(actual), value)
  bfloat16 = reference_lib.create(MODEL.replace(compute_dtype="bfloat16"), expected, mesh,
                                  rules.TRAIN_RULES)
  assert {x.dtype.name for x in jax.tree.leaves(bfloat16.params)} == {"bfloat16"}
