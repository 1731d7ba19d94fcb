"""Learning-rate schedules against hand-computed values; AdamW against a numpy loop."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from whale_jax.train import optimizer as optimizer_lib


def test_warmup_then_constant():
  schedule = optimizer_lib.learning_rate_schedule(
      optimizer_lib.OptimizerConfig(learning_rate=2.0, warmup_steps=4))
  np.testing.assert_allclose([schedule(s) for s in range(7)], [0.5, 1, 1.5, 2, 2, 2, 2])


def test_warmup_then_cosine_to_the_final_fraction():
  schedule = optimizer_lib.learning_rate_schedule(optimizer_lib.OptimizerConfig(
      learning_rate=1.0, warmup_steps=2, schedule="cosine", total_steps=10,
      final_learning_rate_fraction=0.1))
  # Cosine over steps 2..10: progress 0, 0.5, 1 at steps 2, 6, 10; 0.1 + 0.9 (1 + cos) / 2.
  np.testing.assert_allclose([schedule(s) for s in (0, 1, 2, 6, 10, 14)],
                             [0.5, 1.0, 1.0, 0.55, 0.1, 0.1], rtol=1e-6)


def test_no_warmup_starts_at_the_peak():
  schedule = optimizer_lib.learning_rate_schedule(optimizer_lib.OptimizerConfig(
      learning_rate=3.0))
  assert float(schedule(0)) == 3.0


def test_weight_decay_mask_skips_norms_biases_vectors_and_the_embedding():
  leaf = lambda *shape: np.zeros(shape)
  params = {"embedding": leaf(8, 4), "unembedding": leaf(4, 8), "final_norm": leaf(4),
            "layers": {"attention_norm": leaf(2, 4),
                       "attention": {"query": leaf(2, 4, 2, 3), "query_bias": leaf(2, 2, 3),
                                     "key_norm": leaf(2, 3), "output": leaf(2, 2, 3, 4)},
                       "mlp": {"gate": leaf(2, 4, 6)}},
            "linear_layers": {"mixer": {"log_decay_rate": leaf(2, 5),
                                        "convolution": leaf(2, 4, 7)}}}
  assert optimizer_lib.weight_decay_mask(params) == {
      "embedding": False, "unembedding": True, "final_norm": False,
      "layers": {"attention_norm": False, "attention": {"query": True, "query_bias": False,
                                                        "key_norm": False, "output": True},
                 "mlp": {"gate": True}},
      "linear_layers": {"mixer": {"log_decay_rate": False, "convolution": True}}}


def reference_adamw(params, grads_per_step, learning_rates, beta1, beta2, epsilon,
                    weight_decay, max_grad_norm, decays):
  """Loshchilov & Hutter AdamW with bias correction and global-norm clipping, in numpy."""
  params = {name: value.astype(np.float64) for name, value in params.items()}
  mu = {name: np.zeros_like(value) for name, value in params.items()}
  nu = {name: np.zeros_like(value) for name, value in params.items()}
  for step, (grads, learning_rate) in enumerate(zip(grads_per_step, learning_rates), 1):
    norm = np.sqrt(sum(np.sum(g.astype(np.float64)**2) for g in grads.values()))
    scale = min(1.0, max_grad_norm / norm)
    for name in params:
      grad = grads[name] * scale
      mu[name] = beta1 * mu[name] + (1 - beta1) * grad
      nu[name] = beta2 * nu[name] + (1 - beta2) * grad**2
      update = (mu[name] / (1 - beta1**step)) / (np.sqrt(nu[name] / (1 - beta2**step)) + epsilon)
      if decays[name]:
        update = update + weight_decay * params[name]
      params[name] = params[name] - learning_rate * update
  return params


def test_adamw_with_clipping_and_decay_mask_matches_numpy():
  rng = np.random.default_rng(0)
  params = {"embedding": rng.normal(size=(5, 3)).astype(np.float32),
            "final_norm": rng.normal(size=(3,)).astype(np.float32),
            "unembedding": rng.normal(size=(3, 5)).astype(np.float32)}
  grads_per_step = [{name: (rng.normal(size=value.shape) * 2).astype(np.float32)
                     for name, value in params.items()} for _ in range(3)]
  optimizer_config = optimizer_lib.OptimizerConfig(
      learning_rate=0.1, warmup_steps=2, beta1=0.8, beta2=0.95, epsilon=1e-6,
      weight_decay=0.3, max_grad_norm=1.5)
  optimizer = optimizer_lib.make(optimizer_config)
  state, current = optimizer.init(params), params
  for grads in grads_per_step:
    updates, state = optimizer.update(grads, state, current)
    current = jax.tree.map(lambda p, u: p + u, current, updates)
  expected = reference_adamw(params, grads_per_step, [0.05, 0.1, 0.1], 0.8, 0.95, 1e-6, 0.3,
                             1.5, {"embedding": False, "final_norm": False,
                                   "unembedding": True})
  for name in params:
    np.testing.assert_allclose(current[name], expected[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fields, words", [
    (dict(schedule="linear"), "schedule='linear' is not one of"),
    (dict(schedule="cosine", warmup_steps=5, total_steps=5), "needs total_steps > warmup_steps"),
    (dict(max_grad_norm=0.0), "max_grad_norm=0.0 must be > 0"),
    (dict(warmup_steps=-1), "warmup_steps=-1"),
])
def test_config_errors_name_the_key(fields, words):
  with pytest.raises(ValueError, match=words):
    optimizer_lib.OptimizerConfig(**fields)


def test_bfloat16_params_keep_float32_moments_and_master_weights():
  """Steps below bfloat16's resolution accumulate in the float32 master copy; the bfloat16
  parameters are its rounding. Reference: optax's own AdamW on float32 parameters."""
  rng = np.random.default_rng(0)
  params32 = {"embedding": (1.0 + 0.1 * rng.normal(size=(6, 4))).astype(np.float32),
              "unembedding": (1.0 + 0.1 * rng.normal(size=(4, 6))).astype(np.float32)}
  params16 = jax.tree.map(lambda p: jnp.asarray(p, jnp.bfloat16), params32)
  start32 = jax.tree.map(lambda p: np.asarray(p.astype(jnp.float32)), params16)
  optimizer = optimizer_lib.make(optimizer_lib.OptimizerConfig(learning_rate=1e-3,
                                                                max_grad_norm=None))
  reference = optax.adamw(1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0)
  state, current, naive = optimizer.init(params16), params16, params16
  reference_state, expected = reference.init(start32), start32
  naive_state = reference.init(params16)
  adam = state.inner[-1][0]
  assert adam.mu["embedding"].dtype == jnp.float32 and adam.nu["embedding"].dtype == jnp.float32
  for _ in range(8):
    grads = {name: np.sign(rng.normal(size=value.shape)).astype(np.float32) + 0.5
             for name, value in params32.items()}
    updates, state = optimizer.update(grads, state, current)
    current = optax.apply_updates(current, updates)
    reference_updates, reference_state = reference.update(grads, reference_state, expected)
    expected = optax.apply_updates(expected, reference_updates)
    naive_updates, naive_state = reference.update(grads, naive_state, naive)
    naive = optax.apply_updates(naive, naive_updates)
  for name in params32:
    assert current[name].dtype == jnp.bfloat16
    np.testing.assert_allclose(state.master[name], expected[name], rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(current[name], np.float32),
                               np.asarray(jnp.asarray(expected[name], jnp.bfloat16), np.float32),
                               rtol=0, atol=2**-7)  # within one bfloat16 step near 1
    # Each step (1e-3) is below half a bfloat16 step near 1: updating the bfloat16 weights
    # directly leaves them where they started, the master copy moves them.
    np.testing.assert_array_equal(np.asarray(naive[name], np.float32), start32[name])
    assert np.any(np.asarray(current[name], np.float32) != start32[name])


def test_float32_params_keep_no_master_copy():
  optimizer = optimizer_lib.make(optimizer_lib.OptimizerConfig())
  state = optimizer.init({"embedding": np.zeros((2, 3), np.float32)})
  assert state.master is None
