"""The gated delta rule: chunked form and recurrence against a numpy loop, gradients against torch."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from whale_jax.models import gated_delta

# Distinct sizes: a swapped axis fails loudly instead of broadcasting.
BATCH, LENGTH, NUM_HEADS, KEY_DIM, VALUE_DIM = 2, 23, 3, 5, 7

# Jitted once here: eager calls dispatch (and compile) the rule op by op.
_recurrent = jax.jit(gated_delta.recurrent)
_chunked = jax.jit(gated_delta.chunked, static_argnames="chunk_size")


def random_inputs(seed, length=LENGTH, with_resets=False):
  rng = np.random.default_rng(seed)
  normal = lambda *shape: rng.normal(size=shape).astype(np.float32)
  key = normal(BATCH, length, NUM_HEADS, KEY_DIM)
  key /= np.linalg.norm(key, axis=-1, keepdims=True)  # the layer l2-normalizes keys
  inputs = dict(
      query=normal(BATCH, length, NUM_HEADS, KEY_DIM) * KEY_DIM**-0.5,
      key=key,
      value=normal(BATCH, length, NUM_HEADS, VALUE_DIM),
      log_decay=-np.exp(normal(BATCH, length, NUM_HEADS)) * 0.5,
      beta=1 / (1 + np.exp(-normal(BATCH, length, NUM_HEADS))),
      initial_state=normal(BATCH, NUM_HEADS, KEY_DIM, VALUE_DIM),
  )
  if with_resets:
    resets = rng.random((BATCH, length)) < 0.15
    resets[0, [5, 6, 16]] = True  # back-to-back resets and one at a chunk start (chunk 4)
    inputs["resets"] = resets
  return inputs


def reference_delta_rule(query, key, value, log_decay, beta, initial_state, resets=None):
  """Slow and obviously correct: one (batch, head, token) at a time, in float64."""
  batch_size, length, num_heads, _ = key.shape
  output = np.zeros(value.shape, np.float64)
  final = np.zeros(initial_state.shape, np.float64)
  for b, n in np.ndindex(batch_size, num_heads):
    state = initial_state[b, n].astype(np.float64)
    for t in range(length):
      if resets is not None and resets[b, t]:
        state = np.zeros_like(state)
      state = np.exp(log_decay[b, t, n]) * state
      delta = beta[b, t, n] * (value[b, t, n] - state.T @ key[b, t, n])
      state = state + np.outer(key[b, t, n], delta)
      output[b, t, n] = state.T @ query[b, t, n]
    final[b, n] = state
  return output, final


@pytest.mark.parametrize("with_resets", [False, True], ids=["plain", "resets"])
def test_recurrence_matches_numpy_loop(with_resets):
  inputs = random_inputs(0, with_resets=with_resets)
  output, final = _recurrent(**inputs)
  expected_output, expected_final = reference_delta_rule(**inputs)
  np.testing.assert_allclose(output, expected_output, atol=2e-5, rtol=0)
  np.testing.assert_allclose(final, expected_final, atol=2e-5, rtol=0)


@pytest.mark.parametrize("chunk_size", [1, 4, 8, 64])
@pytest.mark.parametrize("with_resets", [False, True], ids=["plain", "resets"])
def test_chunked_matches_numpy_loop(chunk_size, with_resets):
  """LENGTH = 23 is not a multiple of 4 or 8: the padded tail must not change the state."""
  inputs = random_inputs(1, with_resets=with_resets)
  output, final = _chunked(**inputs, chunk_size=chunk_size)
  expected_output, expected_final = reference_delta_rule(**inputs)
  np.testing.assert_allclose(output, expected_output, atol=2e-5, rtol=0)
  np.testing.assert_allclose(final, expected_final, atol=2e-5, rtol=0)


def test_chunked_stays_accurate_after_strong_decay():
  """Strong decay early in a chunk (g = -40, transformers' A_log init allows -16 * softplus)
  then weak decay: the prefix sums of g reach -1000, where float32 cannot resolve the small
  decay between nearby later tokens if it is taken as a difference of two prefix sums."""
  inputs = random_inputs(6, length=64)
  inputs["log_decay"][:, :24] = -40.0
  inputs["log_decay"][:, 24:] *= 0.05
  output, final = _chunked(**inputs)
  expected_output, expected_final = reference_delta_rule(**inputs)
  np.testing.assert_allclose(output, expected_output, atol=2e-5, rtol=0)
  np.testing.assert_allclose(final, expected_final, atol=2e-5, rtol=0)


def test_masked_tokens_leave_the_state_unchanged():
  """beta = 0 and g = 0 on a token is how layers mask padding: the state passes through."""
  inputs = random_inputs(2)
  inputs["beta"][:, 10:14] = 0.0
  inputs["log_decay"][:, 10:14] = 0.0
  kept = {name: np.delete(x, np.s_[10:14], axis=1) if x.ndim >= 3 and x.shape[1] == LENGTH
          else x for name, x in inputs.items()}
  _, final = _chunked(**inputs, chunk_size=8)
  _, expected_final = reference_delta_rule(**kept)
  np.testing.assert_allclose(final, expected_final, atol=2e-5, rtol=0)


def torch_recurrence(query, key, value, log_decay, beta, initial_state):
  """The same recurrence in torch (float64), for an autograd reference independent of JAX."""
  state = initial_state
  outputs = []
  for t in range(key.shape[1]):
    state = state * torch.exp(log_decay[:, t])[:, :, None, None]
    predicted = torch.einsum("bnh,bnhe->bne", key[:, t], state)
    delta = beta[:, t, :, None] * (value[:, t] - predicted)
    state = state + key[:, t, :, :, None] * delta[:, :, None, :]
    outputs.append(torch.einsum("bnh,bnhe->bne", query[:, t], state))
  return torch.stack(outputs, dim=1), state


def test_chunked_gradient_matches_recurrence_gradient():
  inputs = random_inputs(3)
  rng = np.random.default_rng(4)
  output_weights = rng.normal(size=(BATCH, LENGTH, NUM_HEADS, VALUE_DIM)).astype(np.float32)
  state_weights = rng.normal(size=(BATCH, NUM_HEADS, KEY_DIM, VALUE_DIM)).astype(np.float32)
  names = list(inputs)

  def loss(function, *arrays):
    output, final = function(**dict(zip(names, arrays)))
    return jnp.sum(output * output_weights) + jnp.sum(final * state_weights)

  arrays = [jnp.asarray(inputs[name]) for name in names]
  chunked = lambda **kw: gated_delta.chunked(**kw, chunk_size=8)
  chunked_grads = jax.jit(jax.grad(lambda *a: loss(chunked, *a),
                                   argnums=tuple(range(6))))(*arrays)
  recurrent_grads = jax.jit(jax.grad(lambda *a: loss(gated_delta.recurrent, *a),
                                     argnums=tuple(range(6))))(*arrays)

  tensors = [torch.tensor(inputs[name], dtype=torch.float64, requires_grad=True)
             for name in names]
  output, final = torch_recurrence(*tensors)
  torch_loss = ((output * torch.tensor(output_weights, dtype=torch.float64)).sum()
                + (final * torch.tensor(state_weights, dtype=torch.float64)).sum())
  torch_loss.backward()
  for name, chunked_grad, recurrent_grad, tensor in zip(names, chunked_grads, recurrent_grads,
                                                        tensors):
    expected = tensor.grad.numpy()
    scale = np.abs(expected).max()
    np.testing.assert_allclose(chunked_grad, expected, atol=1e-4 * scale, rtol=0, err_msg=name)
    np.testing.assert_allclose(recurrent_grad, expected, atol=1e-4 * scale, rtol=0, err_msg=name)
    np.testing.assert_allclose(chunked_grad, recurrent_grad, atol=1e-4 * scale, rtol=0,
                               err_msg=name)


def test_chunked_gradient_with_resets_matches_recurrence():
  inputs = {k: jnp.asarray(v) for k, v in random_inputs(5, with_resets=True).items()}
  resets = inputs.pop("resets")

  def loss(function, **kw):
    output, final = function(**kw, resets=resets)
    return jnp.sum(jnp.sin(output)) + jnp.sum(final**2)

  chunked = jax.jit(jax.grad(lambda kw: loss(gated_delta.chunked, chunk_size=8, **kw)))(inputs)
  recurrent = jax.jit(jax.grad(lambda kw: loss(gated_delta.recurrent, **kw)))(inputs)
  for name in inputs:
    scale = np.abs(recurrent[name]).max()
    assert np.all(np.isfinite(chunked[name])), name
    np.testing.assert_allclose(chunked[name], recurrent[name], atol=1e-4 * scale, rtol=0,
                               err_msg=name)


def test_unit_lower_inverse_and_its_gradient_match_numpy_and_torch():
  rng = np.random.default_rng(7)
  strict = np.tril(rng.normal(size=(3, 2, 9, 9)), -1).astype(np.float32) * 0.5
  expected = np.linalg.inv(np.eye(9) + strict.astype(np.float64))
  np.testing.assert_allclose(jax.jit(gated_delta.unit_lower_inverse)(strict), expected,
                             atol=1e-5)

  weights = rng.normal(size=strict.shape).astype(np.float32)
  grad = jax.jit(jax.grad(lambda a: jnp.sum(gated_delta.unit_lower_inverse(a) * weights)))(
      strict)
  tensor = torch.tensor(strict, dtype=torch.float64, requires_grad=True)
  lower = torch.tril(tensor, -1)  # the function reads the strict lower part only
  (torch.linalg.inv(torch.eye(9, dtype=torch.float64) + lower)
   * torch.tensor(weights, dtype=torch.float64)).sum().backward()
  np.testing.assert_allclose(grad, tensor.grad.numpy(), atol=1e-4)
