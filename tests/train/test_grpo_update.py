"""PPO-clipped GRPO over one batch of rollouts (grpo_update.update) against a numpy reference.

The model is a linear softmax over the previous token, logits(t) = E[y_{t-1}] U, small enough
that the reference below writes loss and gradient out by hand (float64) and applies plain SGD:
  per loss token, r = exp(logp - old), objective = min(r A, clip(r, 0.8, 1.2) A), and with the
  dual clip max(objective, c A) where A < 0; d objective / d logp = r A where the unclipped
  term is the one taken, else 0. k3 = exp(x) - x - 1 with x = ref - logp, d k3 / d logp
  = 1 - exp(x). d logp / d logits = onehot(y_t) - softmax(logits).
Loss per step = token mean over that minibatch. Old logprobs: the initial weights, recorded
before the first step; the reference is also the initial weights.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from whale_jax.train import advantages as advantages_lib
from whale_jax.train import grpo
from whale_jax.train import grpo_update
from whale_jax.train import packing
from whale_jax.train import step as step_lib

VOCAB, WIDTH = 7, 5
LENGTHS = [6, 4, 7, 5, 6, 4]          # two groups of three samples
PROMPT_LENGTH = 2
REWARDS = [[1.0, 0.0, 0.5], [0.0, 1.0, 1.0]]
LEARNING_RATE = 1.0


def make_samples(seed=0):
  rng = np.random.default_rng(seed)
  advantages = advantages_lib.group_advantages(REWARDS).reshape(-1)
  samples = []
  for length, advantage in zip(LENGTHS, advantages):
    loss_mask = (np.arange(length) >= PROMPT_LENGTH).astype(np.float32)
    samples.append(packing.Sample(rng.integers(0, VOCAB, size=length), loss_mask,
                                  sampler_logprobs=-rng.uniform(0.5, 3, size=length),
                                  advantage=float(advantage)))
  return samples


def initial_params(seed=0):
  rng = np.random.default_rng(seed)
  return {"embedding": rng.normal(size=(VOCAB, WIDTH)).astype(np.float32),
          "unembedding": rng.normal(size=(WIDTH, VOCAB)).astype(np.float32)}


# --- the system under test: the linear model through grpo_update and the real loss ----------

def linear_logprobs(params, batch):
  logits = params["embedding"][batch["tokens"]] @ params["unembedding"]  # [B, T, V]
  log_distribution = jax.nn.log_softmax(logits[:, :-1], axis=-1)
  targets = jnp.take_along_axis(log_distribution, batch["tokens"][:, 1:, None], -1)[..., 0]
  return jnp.concatenate([jnp.zeros_like(targets[:, :1]), targets], axis=1)


def make_train_step(grpo_config):
  optimizer = optax.sgd(LEARNING_RATE)

  def loss_fn(params, _, batch):
    return grpo.loss_from_logprobs(linear_logprobs(params, batch), batch, grpo_config)

  @jax.jit
  def train_step(state, batch):
    loss, grads, metrics = step_lib.loss_and_grads(state["params"], None, loss_fn, batch)
    updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
    metrics["loss"] = loss
    return {"step": state["step"] + 1, "params": optax.apply_updates(state["params"], updates),
            "opt_state": opt_state}, metrics

  return optimizer, train_step


def run_update(grpo_config, samples, params):
  optimizer, train_step = make_train_step(grpo_config)
  state = {"step": jnp.zeros((), jnp.int32), "params": jax.tree.map(jnp.asarray, params),
           "opt_state": optimizer.init(params)}
  reference_params = jax.tree.map(jnp.asarray, params)
  logprobs_fn = jax.jit(linear_logprobs)
  state, history = grpo_update.update(
      state, train_step, samples, grpo_config, logprobs_fn,
      lambda batch: logprobs_fn(reference_params, batch), row_length=8, samples_per_step=64)
  return jax.device_get(state["params"]), history


# --- the numpy reference ---------------------------------------------------------------------

def numpy_logprobs(params, tokens):
  """Per target t >= 1 of one sample: logprob [n - 1], softmax [n - 1, V]."""
  logits = params["embedding"][tokens[:-1]] @ params["unembedding"]
  logits = logits - logits.max(axis=1, keepdims=True)
  probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
  return np.log(probabilities[np.arange(len(tokens) - 1), tokens[1:]]), probabilities


def numpy_step(params, samples, old, reference, kl_weight, dual_clip_ratio, bounds=(0.8, 1.2)):
  """(loss, gradient dict, clip counts) of one minibatch; old/reference: per-sample arrays."""
  gradient = {name: np.zeros_like(value) for name, value in params.items()}
  loss, counts, num_tokens = 0.0, dict(low=0, high=0, dual=0, kl=0.0), 0
  for sample, sample_old, sample_reference in zip(samples, old, reference):
    tokens, mask = sample.token_ids, sample.loss_mask[1:]
    logprobs, probabilities = numpy_logprobs(params, tokens)
    for t in np.flatnonzero(mask):
      advantage, ratio = sample.advantage, np.exp(logprobs[t] - sample_old[t])
      assert min(abs(ratio - bounds[0]), abs(ratio - bounds[1])) > 1e-4  # no borderline token
      unclipped, clipped = ratio * advantage, np.clip(ratio, *bounds) * advantage
      objective, d_objective = (unclipped, ratio * advantage) if unclipped <= clipped else (
          clipped, 0.0)
      counts["low"] += advantage < 0 and ratio < bounds[0]
      counts["high"] += advantage > 0 and ratio > bounds[1]
      if dual_clip_ratio is not None and advantage < 0 and dual_clip_ratio * advantage > objective:
        objective, d_objective = dual_clip_ratio * advantage, 0.0
        counts["dual"] += 1
      x = sample_reference[t] - logprobs[t]
      kl = np.exp(x) - x - 1
      counts["kl"] += kl
      loss += -objective + kl_weight * kl
      d_logprob = -d_objective + kl_weight * (1 - np.exp(x))
      d_logits = d_logprob * (np.eye(VOCAB)[tokens[t + 1]] - probabilities[t])  # [V]
      previous = tokens[t]
      gradient["unembedding"] += np.outer(params["embedding"][previous], d_logits)
      gradient["embedding"][previous] += params["unembedding"] @ d_logits
      num_tokens += 1
  gradient = {name: value / num_tokens for name, value in gradient.items()}
  counts = {name: value / num_tokens for name, value in counts.items()}
  return loss / num_tokens, gradient, counts


def numpy_ppo(params, samples, ppo_epochs, parts, kl_weight, dual_clip_ratio):
  params = {name: value.astype(np.float64) for name, value in params.items()}
  recorded = [numpy_logprobs(params, s.token_ids)[0] for s in samples]  # old = reference
  steps = []
  for _ in range(ppo_epochs):
    for part in parts:
      chunk = [samples[i] for i in part]
      old = [recorded[i] for i in part]
      loss, gradient, counts = numpy_step(params, chunk, old, old, kl_weight, dual_clip_ratio)
      params = {name: value - LEARNING_RATE * gradient[name] for name, value in params.items()}
      steps.append((loss, counts))
  return params, steps


@pytest.mark.parametrize("ppo_epochs, num_minibatches, kl_weight, dual_clip_ratio", [
    (1, 3, 0.0, None),
    (3, 1, 0.1, None),
    (1, 3, 0.1, 1.5),
])
def test_ppo_clipped_grpo_matches_numpy_over_three_steps(ppo_epochs, num_minibatches,
                                                         kl_weight, dual_clip_ratio):
  samples, params = make_samples(), initial_params()
  grpo_config = grpo.GRPOConfig(ppo_epochs=ppo_epochs, num_minibatches=num_minibatches,
                                kl_weight=kl_weight, keep_reference=True,
                                dual_clip_ratio=dual_clip_ratio, compute_entropy=False)
  actual_params, history = run_update(grpo_config, samples, params)
  # Unshuffled (seed None): contiguous near-equal minibatches, visited in order.
  parts = np.array_split(np.arange(len(samples)), num_minibatches)
  expected_params, steps = numpy_ppo(params, samples, ppo_epochs, parts, kl_weight,
                                     dual_clip_ratio)
  assert len(history) == len(steps) == 3
  for row, (loss, counts) in zip(history, steps):
    np.testing.assert_allclose(row["loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(row["kl_to_reference"], counts["kl"], rtol=1e-4, atol=1e-7)
    for kind in ("low", "high", "dual"):
      assert row[f"clip_fraction_{kind}"] == pytest.approx(counts[kind], abs=1e-6)
  for name in params:
    np.testing.assert_allclose(actual_params[name], expected_params[name], rtol=1e-5,
                               atol=1e-6)
  # The case must exercise the clip: nothing at the first step, something afterwards.
  assert history[0]["clip_fraction"] == 0.0 and history[0]["kl_to_reference"] == 0.0
  assert sum(row["clip_fraction"] for row in history[1:]) > 0
  if dual_clip_ratio is not None:
    assert sum(row["clip_fraction_dual"] for row in history) > 0


def test_old_logprobs_from_the_sampler_are_what_the_first_step_clips_against():
  samples, params = make_samples(), initial_params()
  grpo_config = grpo.GRPOConfig(old_logprobs_source="sampler", num_minibatches=1,
                                compute_entropy=False)
  _, history = run_update(grpo_config, samples, params)
  # r = exp(logp - sampler) at the initial weights, written out per token.
  ratios = np.concatenate([
      np.exp(numpy_logprobs(params, s.token_ids)[0] - s.sampler_logprobs[1:])[
          s.loss_mask[1:] > 0] for s in samples])
  advantages = np.concatenate([np.full(int(s.loss_mask.sum()), s.advantage) for s in samples])
  expected_high = np.mean((advantages > 0) & (ratios > 1.2))
  expected_low = np.mean((advantages < 0) & (ratios < 0.8))
  assert expected_high + expected_low > 0
  assert history[0]["clip_fraction_high"] == pytest.approx(expected_high)
  assert history[0]["clip_fraction_low"] == pytest.approx(expected_low)


def test_a_kept_reference_is_required():
  samples, params = make_samples(), initial_params()
  optimizer, train_step = make_train_step(grpo.GRPOConfig(kl_weight=0.1))
  state = {"step": jnp.zeros((), jnp.int32), "params": params,
           "opt_state": optimizer.init(params)}
  with pytest.raises(ValueError, match=r"config.training.grpo.kl_weight=0.1 .*needs a reference"):
    grpo_update.update(state, train_step, samples, grpo.GRPOConfig(kl_weight=0.1),
                       jax.jit(linear_logprobs), row_length=8, samples_per_step=64)


def test_minibatch_indices_partition_the_samples():
  parts = grpo_update.minibatch_indices(10, 3, seed=(4, 2))
  assert [len(part) for part in parts] == [4, 3, 3]
  assert sorted(np.concatenate(parts).tolist()) == list(range(10))
  assert [len(part) for part in grpo_update.minibatch_indices(2, 5)] == [1, 1]
