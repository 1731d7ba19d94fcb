"""Causal attention with packing's segment ids through the Pallas TPU splash kernel.

Shape letters: B batch, T length, N query heads, K key/value heads, H head dim.

The kernel (`jax.experimental.pallas.ops.tpu.splash_attention`) works on one row's
[N, T, H] queries and [K, T, H] keys/values and skips the blocks the causal mask hides; it is
vmapped over the batch. Under a mesh (rules.activate) it runs inside shard_map: rows split
over the batch axes and heads over the tensor axis, as the rules place them, so each device
runs the kernel on its own rows and heads. Only self-attention of training and full-sequence
forwards (no cache) goes here; models/attention.py's blockwise version is the plain
equivalent and the fallback everywhere else. On CPU the kernel runs in interpret mode
(slow; for tests only).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from whale_jax.parallel import rules

_MIN_BLOCK = 128


def supported(config, length):
  """True when the kernel handles this model and row length (lane-aligned shapes)."""
  return length % _MIN_BLOCK == 0 and config.head_dim % _MIN_BLOCK == 0


def _block_size(length):
  for block in (512, 256, _MIN_BLOCK):
    if length % block == 0:
      return block
  raise ValueError(f"splash attention needs a row length that is a multiple of {_MIN_BLOCK}, "
                   f"got {length}; use attention='blockwise' or pad the rows.")


def _kernel(num_heads, length, interpret):
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask
  mask = splash_attention_mask.MultiHeadMask(
      [splash_attention_mask.CausalMask((length, length))] * num_heads)
  block = _block_size(length)
  sizes = splash_attention_kernel.BlockSizes(
      block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
      block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block)
  return splash_attention_kernel.make_splash_mha(mask, block_sizes=sizes, head_shards=1,
                                                 q_seq_shards=1, interpret=interpret)


def _attend_local(query, key, value, segments, interpret):
  """One device's rows: query [B, T, N, H], key/value [B, T, K, H], segments [B, T]."""
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel
  batch_size, length, num_heads, head_dim = query.shape
  kernel = _kernel(num_heads, length, interpret)
  query = jnp.einsum("BTNH->BNTH", query * jnp.asarray(head_dim**-0.5, query.dtype))
  key, value = jnp.einsum("BTKH->BKTH", key), jnp.einsum("BTKH->BKTH", value)
  if segments is None:
    segments = jnp.zeros((batch_size, length), jnp.int32)
  segments = segments.astype(jnp.int32)

  def row(query, key, value, segments):
    return kernel(query, key, value, splash_attention_kernel.SegmentIds(segments, segments))

  encoded = jax.vmap(row)(query, key, value, segments)  # [B, N, T, H]
  return jnp.einsum("BNTH->BTNH", encoded)


def attend(query, key, value, segments=None, interpret=None):
  """Causal attention within segments: query [B, T, N, H], key/value [B, T, K, H],
  segments [B, T] int (None = one segment). Returns [B, T, N, H]."""
  if interpret is None:
    interpret = rules.active_platform() != "tpu"
  active = rules.active()
  local = functools.partial(_attend_local, interpret=interpret)
  if active is None:
    return local(query, key, value, segments)
  mesh, table = active
  heads_spec = rules.spec(("batch", None, "heads", None), table)
  kv_spec = rules.spec(("batch", None, "kv_heads", None), table)
  rows_spec = PartitionSpec(heads_spec[0], None)
  if segments is None:
    segments = jnp.zeros(query.shape[:2], jnp.int32)
  return jax.shard_map(local, mesh=mesh, in_specs=(heads_spec, kv_spec, kv_spec, rows_spec),
                       out_specs=heads_spec, check_vma=False)(query, key, value, segments)
