"""The gated delta rule: a chunked parallel form for prefill and training, and the plain
step-by-step recurrence for decoding (and as the reference the chunked form is tested against).

Shape letters: B batch, T length, N heads, H key head dim, E value head dim, U chunks,
C chunk length, I and J positions inside one chunk (both of length C).

One head keeps a state S [H, E]. Token t (query q, key k, value v, log decay g <= 0, write
strength beta in [0, 1]) updates and reads it:

  S_t = exp(g_t) S_{t-1} + k_t delta_t^T,   delta_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t)
  o_t = S_t^T q_t

resets[b, t] = True zeroes the state before token t (a new packed segment starts there). A
token with beta = 0 and g = 0 leaves the state as it was: that is how callers mask padding.

Chunked form (WY / UT transform). Within a chunk let gamma_i = exp(g_1 + ... + g_i) and S_0 the
state entering the chunk. Unrolling the recurrence gives, for every position i of the chunk,

  delta_i + beta_i sum_{j<i} (gamma_i / gamma_j) (k_i . k_j) delta_j
      = beta_i v_i - beta_i gamma_i S_0^T k_i

a unit lower-triangular system (I + A) delta = beta v - (beta gamma k) S_0 that is solved for
all chunks at once, in parallel. Only the passing of S from chunk to chunk is sequential:

  o_i     = gamma_i S_0^T q_i + sum_{j<=i} (gamma_i / gamma_j) (q_i . k_j) delta_j
  S_C     = gamma_C S_0 + sum_j (gamma_C / gamma_j) k_j delta_j^T

so a sequence of T tokens costs T / C sequential steps of matrix products instead of T steps of
vector products. A reset inside a chunk cuts every (i, j) pair that straddles it and the link of
later positions to S_0.

Both forms compute in float32 whatever the input dtype and return float32.
"""
import jax
import jax.numpy as jnp

CHUNK_SIZE = 64


def recurrent(query, key, value, log_decay, beta, initial_state=None, resets=None):
  """The plain recurrence, one token at a time (`lax.scan` over T).

  Args:
    query, key: [B, T, N, H]; value: [B, T, N, E].
    log_decay: [B, T, N], g_t <= 0 (the state is multiplied by exp(g_t)).
    beta: [B, T, N] write strength.
    initial_state: [B, N, H, E] or None (zeros).
    resets: [B, T] bool or None; True zeroes the state before that token.
  Returns:
    (output [B, T, N, E] float32, final state [B, N, H, E] float32)
  """
  batch_size, length, num_heads, key_dim = key.shape
  value_dim = value.shape[-1]
  if initial_state is None:
    initial_state = jnp.zeros((batch_size, num_heads, key_dim, value_dim), jnp.float32)
  if resets is None:
    resets = jnp.zeros((batch_size, length), bool)
  time_major = lambda x: jnp.moveaxis(x.astype(jnp.float32), 1, 0)
  inputs = (time_major(query), time_major(key), time_major(value), time_major(log_decay),
            time_major(beta), jnp.moveaxis(resets, 1, 0))

  def step(state, inputs):
    query, key, value, log_decay, beta, reset = inputs  # [B, N, H], ..., [B, N], [B]
    state = jnp.where(reset[:, None, None, None], 0.0, state)
    state = state * jnp.exp(log_decay)[:, :, None, None]
    predicted = jnp.einsum("BNH,BNHE->BNE", key, state)
    delta = beta[:, :, None] * (value - predicted)
    state = state + jnp.einsum("BNH,BNE->BNHE", key, delta)
    return state, jnp.einsum("BNH,BNHE->BNE", query, state)

  final_state, outputs = jax.lax.scan(step, initial_state.astype(jnp.float32), inputs)
  return jnp.moveaxis(outputs, 0, 1), final_state


@jax.custom_vjp
def unit_lower_inverse(strict):
  """(I + A)^-1 for strictly lower triangular A [..., C, C], by forward substitution.

  Row i of the inverse is e_i - A[i] @ inverse (rows before i already final): a C-step loop
  over [..., C, C], after which both right-hand sides of the chunk are one matrix product (as
  flash-linear-attention does). Written out rather than calling lax.linalg.triangular_solve:
  on CPU that is a LAPACK call that blocks a thread-pool thread while it waits for its own
  batch items, and two such calls side by side (forward or backward pass) deadlocked XLA's
  2-thread pool. The gradient, -M^T g M^T on the strict lower part, needs only M.
  """
  strict = jnp.asarray(strict)
  size = strict.shape[-1]
  identity = jnp.broadcast_to(jnp.eye(size, dtype=strict.dtype), strict.shape)

  def row(i, inverse):
    updated = identity[..., i, :] - jnp.einsum("...J,...JK->...K", strict[..., i, :], inverse)
    return inverse.at[..., i, :].set(updated)

  return jax.lax.fori_loop(1, size, row, identity)


def _unit_lower_inverse_forward(strict):
  inverse = unit_lower_inverse(strict)
  return inverse, inverse


def _unit_lower_inverse_backward(inverse, grad):
  transposed = jnp.swapaxes(inverse, -1, -2)
  grad_strict = -jnp.einsum("...IJ,...JK,...KL->...IL", transposed, grad, transposed)
  return (jnp.tril(grad_strict, -1),)


unit_lower_inverse.defvjp(_unit_lower_inverse_forward, _unit_lower_inverse_backward)


def chunked(query, key, value, log_decay, beta, initial_state=None, resets=None,
            chunk_size=CHUNK_SIZE):
  """The same map as recurrent(), computed chunk-parallel; see the module docstring.

  T need not be a multiple of chunk_size: the tail is padded with tokens that leave the state
  unchanged (beta = 0, g = 0) and their outputs are dropped.
  """
  batch_size, length, num_heads, key_dim = key.shape
  value_dim = value.shape[-1]
  if initial_state is None:
    initial_state = jnp.zeros((batch_size, num_heads, key_dim, value_dim), jnp.float32)
  chunk_size = min(chunk_size, length)
  padding = -length % chunk_size
  num_chunks = (length + padding) // chunk_size

  def to_chunks(x):  # [B, T, ...] -> [B, U, C, ...], float32, zero-padded along T
    x = jnp.pad(x, [(0, 0), (0, padding)] + [(0, 0)] * (x.ndim - 2))
    return x.reshape(batch_size, num_chunks, chunk_size, *x.shape[2:])

  query, key, value, log_decay, beta = (to_chunks(x.astype(jnp.float32))
                                        for x in (query, key, value, log_decay, beta))
  cumulative = jnp.cumsum(log_decay, axis=2)  # [B, U, C, N] log gamma
  lower = jnp.tril(jnp.ones((chunk_size, chunk_size), bool))  # [I, J] j <= i
  strictly_lower = jnp.tril(jnp.ones((chunk_size, chunk_size), bool), -1)
  if resets is None:
    same_segment = jnp.ones((batch_size, num_chunks, chunk_size, chunk_size), bool)
    connected = jnp.ones((batch_size, num_chunks, chunk_size), bool)
  else:
    segment = jnp.cumsum(to_chunks(resets.astype(jnp.int32)), axis=2)  # [B, U, C]
    same_segment = segment[:, :, :, None] == segment[:, :, None, :]  # [B, U, I, J]
    connected = segment == 0  # position still reads the state that entered the chunk

  # gamma_i / gamma_j = exp(g_{j+1} + ... + g_i) for j <= i in one segment, else 0. The sum is
  # accumulated per column j from token j + 1 on, not as cumulative_i - cumulative_j: with
  # strong decay those prefix sums reach hundreds and their difference loses the digits that
  # matter for nearby tokens. Masked before exp (no inf, no NaN gradient).
  after = jnp.arange(chunk_size)[:, None] > jnp.arange(chunk_size)[None, :]  # [I, J] i > j
  pair_log = jnp.cumsum(jnp.where(after, jnp.moveaxis(log_decay, -1, 2)[..., :, None], 0.0),
                        axis=-2)  # [B, U, N, I, J]
  pair_mask = (lower & same_segment)[:, :, None]  # [B, U, 1, I, J]
  pair_decay = jnp.exp(jnp.where(pair_mask, pair_log, -jnp.inf))
  strict_decay = jnp.where(strictly_lower, pair_decay, 0.0)

  gamma = jnp.exp(cumulative) * connected[..., None]  # [B, U, C, N]
  key_products = jnp.einsum("BUINH,BUJNH->BUNIJ", key, key)
  strict = (jnp.moveaxis(beta, -1, 2)[..., :, None] * key_products
            * strict_decay)  # A, strictly lower triangular [B, U, N, I, J]
  value_targets = jnp.einsum("BUCN,BUCNE->BUNCE", beta, value)
  state_keys = jnp.einsum("BUCN,BUCNH->BUNCH", beta * gamma, key)
  inverse = unit_lower_inverse(strict)  # (I + A)^-1 [B, U, N, I, J]
  new_values = jnp.einsum("BUNIJ,BUNJE->BUNIE", inverse, value_targets)  # delta if S_0 = 0
  new_state_keys = jnp.einsum("BUNIJ,BUNJH->BUNIH", inverse, state_keys)  # delta -= this @ S_0

  intra = jnp.einsum("BUINH,BUJNH->BUNIJ", query, key) * pair_decay  # [B, U, N, I, J]
  query_read = jnp.einsum("BUCN,BUCNH->BUNCH", gamma, query)
  to_end = pair_decay[..., -1, :]  # [B, U, N, C]: gamma_C / gamma_j, same segment as C
  key_write = jnp.einsum("BUNC,BUCNH->BUNCH", to_end, key)
  chunk_decay = jnp.exp(cumulative[:, :, -1]) * connected[:, :, -1, None]  # [B, U, N]

  def step(state, inputs):
    new_values, new_state_keys, intra, query_read, key_write, chunk_decay = inputs
    delta = new_values - jnp.einsum("BNCH,BNHE->BNCE", new_state_keys, state)
    output = (jnp.einsum("BNCH,BNHE->BNCE", query_read, state)
              + jnp.einsum("BNIJ,BNJE->BNIE", intra, delta))
    state = (chunk_decay[:, :, None, None] * state
             + jnp.einsum("BNCH,BNCE->BNHE", key_write, delta))
    return state, output

  chunk_major = lambda x: jnp.moveaxis(x, 1, 0)
  final_state, outputs = jax.lax.scan(
      step, initial_state.astype(jnp.float32),
      tuple(map(chunk_major, (new_values, new_state_keys, intra, query_read, key_write,
                              chunk_decay))))
  outputs = jnp.moveaxis(outputs, 0, 1)  # [B, U, N, C, E]
  outputs = jnp.moveaxis(outputs, 2, 3).reshape(batch_size, num_chunks * chunk_size, num_heads,
                                                value_dim)
  return outputs[:, :length], final_state
