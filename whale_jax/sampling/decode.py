"""Decode slots: a batch of samples sharing one KV cache, and the pure steps over it.

Shape letters: L layers, B slots, S cache length, P prompts in a prefill, T prefill length,
M slots being filled, E stop token ids per slot, C decode steps per call, K key/value heads,
H head dim, V vocabulary.

A slot holds one sample (one of the n samples of a request). Slot state, all leading B:
  cache             the KV cache (two layouts, below); cache["length"][b] filled positions
  token [B]         next token to feed: the prompt's last token, then each sampled token
  rng [B, 2]        the sample's base key (categorical.sample_rngs)
  step [B]          index of the next generated token (selects the draw of the random stream)
  remaining [B]     tokens still to generate; 0 = free or finished
  temperature [B], top_k [B], top_p [B]   sampling parameters (categorical.sample)
  stop_ids [B, E]   ids that end the sample when generated (eos and stop token ids; -1 = none)

Cache layouts (layout.py's Layout, a static argument of every function here that depends on
it): with layout.unrolled, models.decode_step's one buffer per layer (fast on CPU, plain
decoders only); otherwise models.kv_cache's stacked buffers stepped by
decoder.forward_with_cache (any model, hybrid ones included; every leaf but "length" has
layers on axis 0 and rows on axis 1, and "key"/"value" have cache positions on axis 2).

A prompt of T0 tokens is prefilled without its last token (T0 - 1 positions) into a small
stacked cache of its own, which is then copied into each of its n slots: one prefill per
prompt, whatever n. Every prefill runs in chunks of a fixed number of tokens per row (a loop
whose trip count is the only thing that depends on the prompt), with or without a cached
prefix, so a position's KV is computed by the same operations either way. The prompt's last
token is the slot's first decode input, so every generated token, the first included, comes
out of the same decode step.

Prefix cache pages (the block pool): {"key", "value": [L, N, Z, K, H]} (N pages of Z = block
size positions, stacked over layers like kv_cache), plus nothing else: a page holds one block's
KV and the host index (prefix_cache.py) knows which. In a 16-bit float compute dtype the pages
hold the values' bits (uint16): XLA's CPU scatter converts a 16-bit float buffer to float32 and
back in full at every write, which for a pool of a gigabyte costs more than the prefill. For
the same reason, with layout.bits (on CPU), the prefills, inserts and block saves here
gather and scatter 16-bit KV as its bits (kv_cache.as_bits).
prefill_with_prefix gathers a prompt's cached pages into its prefill cache, computes only the
rest and writes its new full blocks to pages in the same call; save_blocks copies blocks out of
decode slots into pages. Pages are replicated over batch shards and split over key/value heads
like the slot cache (pool_logical_axes).

The engine jits these functions; none of them knows about requests, threads or text.
"""
import functools

import jax
import jax.numpy as jnp

from whale_jax.models import decode_step
from whale_jax.models import decoder
from whale_jax.models import kv_cache
from whale_jax.sampling import categorical
from whale_jax.sampling.layout import Layout

NO_TOKEN = -1  # in decode outputs: the slot was not generating at that step
_SLOT_FIELDS = ("token", "rng", "step", "remaining", "temperature", "top_k", "top_p",
                "stop_ids")


def init_slots(config, batch_size, cache_length, num_stop_ids, layout):
  """Slot state with every slot free."""
  if layout.unrolled:
    cache = decode_step.init_cache(config, batch_size, cache_length)
  else:
    cache = kv_cache.init(config, batch_size, cache_length)
  return {
      "cache": cache,
      "token": jnp.zeros((batch_size,), jnp.int32),
      "rng": jnp.zeros((batch_size, 2), jnp.uint32),
      "step": jnp.zeros((batch_size,), jnp.int32),
      "remaining": jnp.zeros((batch_size,), jnp.int32),
      "temperature": jnp.ones((batch_size,), jnp.float32),
      "top_k": jnp.zeros((batch_size,), jnp.int32),
      "top_p": jnp.ones((batch_size,), jnp.float32),
      "stop_ids": jnp.full((batch_size, num_stop_ids), NO_TOKEN, jnp.int32),
  }


def slots_logical_axes(config, layout):
  """Logical axis names of the slot state (for sharding)."""
  if layout.unrolled:
    cache = decode_step.cache_logical_axes(config)
  else:
    cache = kv_cache.logical_axes(config)
  return {"cache": cache, "token": ("batch",), "rng": ("batch", None), "step": ("batch",),
          "remaining": ("batch",), "temperature": ("batch",), "top_k": ("batch",),
          "top_p": ("batch",), "stop_ids": ("batch", None)}


def prefill(params, config, tokens, lengths, chunk=64, layout=Layout()):
  """Stacked cache of P right-padded prompts, computed chunk tokens per row at a time.

  Args:
    params: the params, or layout.store_weights(params, config) (made once by the engine).
    tokens: [P, T] int32, row p's first lengths[p] tokens are real.
    lengths: [P] int32 (may be 0).
    chunk: static int (prefill_with_prefix's chunk: both compute a position alike).
    layout: static; the cache is filled as layout.store_cache stores it.
  Returns:
    kv_cache tree with P rows of T positions, "length" included.
  """
  cache = kv_cache.init(config, tokens.shape[0], tokens.shape[1])
  return _prefill_chunks(params, config, tokens, lengths, cache, chunk, layout)


def _prefill_chunks(params, config, tokens, lengths, cache, chunk, layout):
  """cache with row p's positions cache["length"][p] .. lengths[p] - 1 computed, chunk per
  row and loop step (as many steps as the longest rest needs: zero when nothing is to do)."""
  start = cache["length"]
  rest = lengths - start
  num_chunks = (jnp.max(rest) + chunk - 1) // chunk

  def body(step, cache):
    index = start[:, None] + step * chunk + jnp.arange(chunk)[None, :]
    chunk_tokens = jnp.take_along_axis(tokens, jnp.minimum(index, tokens.shape[1] - 1), axis=1)
    count = jnp.clip(rest - step * chunk, 0, chunk)
    _, cache = decoder.forward_with_cache(params, config, chunk_tokens, cache,
                                          num_new_tokens=count)
    return cache

  cache = jax.lax.fori_loop(0, num_chunks, body, layout.store_cache(cache, config))
  return layout.load_cache(cache, config)


def init_pool(config, num_blocks, block_size):
  """An all-zero block pool of num_blocks pages."""
  shape = (config.num_layers, num_blocks, block_size, config.num_kv_heads, config.head_dim)
  dtype = kv_cache.bits_dtype(config.compute_jnp_dtype)
  return {"key": jnp.zeros(shape, dtype), "value": jnp.zeros(shape, dtype)}


def pool_logical_axes():
  """Logical axis names of the block pool: pages replicated over batch shards."""
  names = ("layers", None, None, "kv_heads", "head_dim")
  return {"key": names, "value": names}


def grow_pool(pool, num_blocks):
  """The pool with zero pages appended up to num_blocks (static)."""
  return {name: _resize(leaf, 1, num_blocks) for name, leaf in pool.items()}


def prefill_with_prefix(params, config, tokens, lengths, pool, pages, prefix_lengths,
                        save_pages, chunk, layout=Layout()):
  """Stacked cache of P prompts whose first prefix_lengths[p] positions come from pool pages,
  and the pool with blocks of it saved.

  The rest of each row is computed as prefill() does (chunk tokens at a time, chunks starting
  at the row's prefix length), so shapes depend on P and S only, whatever the split between
  cached and new. Then block j of row p is copied into page save_pages[p, j] (>= N: not).

  Args:
    tokens: [P, S] int32, each row's prompt positions from 0 (right-padded).
    lengths: [P] int32, positions to fill in each row (cached prefix included).
    pool: the block pool (donated by the engine).
    pages: [P, S // Z] int32, row p's cached pages in order; the rest >= N (zeros).
    prefix_lengths: [P] int32, a multiple of the block size each, <= lengths.
    save_pages: [P, S // Z] int32, the page each full new block goes to (>= N: none).
    chunk: static int, tokens computed per row and loop step.
    params, layout: as in prefill().
  Returns:
    (kv_cache tree with P rows of S positions, length = lengths; the pool)
  """
  num_rows, num_pages = pages.shape
  cache = {"length": prefix_lengths}
  for name in ("key", "value"):
    gathered = kv_cache.from_bits(jnp.take(pool[name], pages, axis=1, mode="fill",
                                           fill_value=0),
                                  config.compute_jnp_dtype)  # [L, P, S/Z, Z, K, H]
    shape = gathered.shape
    cache[name] = gathered.reshape(shape[0], num_rows, num_pages * shape[3], *shape[4:])
  cache = _prefill_chunks(params, config, tokens, lengths, cache, chunk, layout)
  if layout.row_loops:
    return cache, _save_new_blocks(pool, cache, save_pages, config.compute_jnp_dtype)
  saved = {}
  for name in ("key", "value"):
    leaf = cache[name]  # [L, P, S, K, H]
    blocks = leaf.reshape(leaf.shape[0], num_rows * num_pages, -1, *leaf.shape[3:])
    saved[name] = pool[name].at[:, save_pages.reshape(-1)].set(
        kv_cache.as_bits(blocks.astype(config.compute_jnp_dtype)), mode="drop")
  return cache, saved


def _save_new_blocks(pool, cache, save_pages, dtype):
  """pool with block j of cache row p copied into page save_pages[p, j] (>= N: not).

  A loop over the pages to save, one block of every layer per step: a scatter of all P x S/Z
  blocks with most of them dropped moves the whole cache (XLA's CPU scatter first transposes
  every update to put the page axis first: a ~100M model's prefill of 16 x 2,048 positions
  took 14.1 s with it, 9.7 s without, docs/benchmarks.md), where the pages saved are a few
  hundred blocks.
  """
  num_pages = save_pages.shape[1]
  flat = save_pages.reshape(-1)
  valid = flat < pool["key"].shape[1]
  (order,) = jnp.nonzero(valid, size=flat.shape[0], fill_value=0)
  num_layers, _, size, num_kv_heads, head_dim = pool["key"].shape

  def save_one(step, pool):
    index = order[step]
    row, block = index // num_pages, index % num_pages
    new = {}
    for name in ("key", "value"):
      kv = jax.lax.dynamic_slice(cache[name], (0, row, block * size, 0, 0),
                                 (num_layers, 1, size, num_kv_heads, head_dim))
      new[name] = jax.lax.dynamic_update_slice(pool[name], kv_cache.as_bits(kv.astype(dtype)),
                                               (0, flat[index], 0, 0, 0))
    return new

  return jax.lax.fori_loop(0, jnp.sum(valid), save_one, pool)


def save_blocks(pool, cache, rows, blocks, pages, layout):
  """Copies block blocks[m] of cache row rows[m] into pool page pages[m] (>= N: skipped).

  cache is a prefill cache (stacked) or the decode slots' cache (unrolled or stacked), whose
  length is a multiple of the block size. layout: static; with bits, gather 16-bit KV as its
  bits (insert's).
  """
  size = pool["key"].shape[2]
  new = {}
  bits = layout.bits
  if layout.unrolled:
    keys, values = [], []
    for key, value in zip(cache["key"], cache["value"]):  # [B, K, H, S] and [B, K, S, H]
      key, value = kv_cache.as_bits(key, bits), kv_cache.as_bits(value, bits)
      key = key.reshape(*key.shape[:3], -1, size)[rows, :, :, blocks]  # [M, K, H, Z]
      value = value.reshape(value.shape[0], value.shape[1], -1, size,
                            value.shape[3])[rows, :, blocks]  # [M, K, Z, H]
      keys.append(jnp.transpose(key, (0, 3, 1, 2)))
      values.append(jnp.transpose(value, (0, 2, 1, 3)))
    new = {"key": jnp.stack(keys), "value": jnp.stack(values)}
  else:
    for name in ("key", "value"):
      leaf = kv_cache.as_bits(cache[name], bits)  # [L, B, S, K, H]
      leaf = leaf.reshape(leaf.shape[0], leaf.shape[1], -1, size, *leaf.shape[3:])
      new[name] = leaf[:, rows, blocks]  # [L, M, Z, K, H]
  return {name: pool[name].at[:, pages].set(kv_cache.as_bits(new[name]), mode="drop")
          for name in ("key", "value")}


def insert(slots, prefilled, new, layout):
  """Starts M samples in slots new["slot"] from rows new["row"] of a prefill.

  Args:
    slots: slot state; its cache length S must be >= the prefill's T.
    prefilled: prefill() output.
    new: {"slot": [M] (B or more = padding, ignored), "row": [M] prefill row, "token": [M]
      last prompt token, "rng": [M, 2], "remaining": [M] max tokens, "temperature",
      "top_k", "top_p": [M], "stop_ids": [M, E]}
    layout: static; the slots' cache layout, and with bits, gather and scatter 16-bit leaves
      as their bits (for XLA's CPU compiler).
  """
  target, rows = new["slot"], new["row"]
  length = prefilled["key"].shape[2] if "key" in prefilled else 0
  cache = dict(slots["cache"])
  as_bits = functools.partial(kv_cache.as_bits, enabled=layout.bits)
  if layout.row_loops:
    if "key" in prefilled:
      cache.update(_insert_rows(cache, prefilled, target, rows, layout))
    for name, leaf in prefilled.items():  # a hybrid model's other state: small
      if name not in ("length", "key", "value"):
        cache[name] = kv_cache.from_bits(
            as_bits(cache[name]).at[:, target].set(as_bits(leaf)[:, rows], mode="drop"),
            cache[name].dtype)
  elif layout.unrolled:
    keys, values = decode_step.from_stacked(as_bits(prefilled["key"])[:, rows],
                                            as_bits(prefilled["value"])[:, rows])
    cache["key"] = tuple(
        kv_cache.from_bits(as_bits(old).at[target, :, :, :length].set(new_keys, mode="drop"),
                           old.dtype) for old, new_keys in zip(cache["key"], keys))
    cache["value"] = tuple(
        kv_cache.from_bits(as_bits(old).at[target, :, :length].set(new_values, mode="drop"),
                           old.dtype) for old, new_values in zip(cache["value"], values))
  else:
    for name, leaf in prefilled.items():
      if name == "length":
        continue
      old, leaf = cache[name], as_bits(leaf)[:, rows]
      if name in ("key", "value"):
        new_leaf = as_bits(old).at[:, target, :length].set(leaf, mode="drop")
      else:
        new_leaf = as_bits(old).at[:, target].set(leaf, mode="drop")
      cache[name] = kv_cache.from_bits(new_leaf, old.dtype)
  cache["length"] = cache["length"].at[target].set(prefilled["length"][rows], mode="drop")
  slots = dict(slots, cache=cache, step=slots["step"].at[target].set(0, mode="drop"))
  for name in _SLOT_FIELDS:
    if name != "step":
      slots[name] = slots[name].at[target].set(new[name].astype(slots[name].dtype),
                                               mode="drop")
  return slots


def _insert_rows(cache, prefilled, target, rows, layout):
  """The slot cache's key and value with prefill row rows[m] copied into slot target[m]
  (>= B: not): a loop over the samples started, one row of every layer per step (its layout
  moved there, for the unrolled cache), instead of insert's scatters. Those gather every row
  and move the layout of all of them at once into new buffers, and XLA's CPU scatter then
  writes element by element: at 16 rows of a ~100M model's 2,048 positions, seconds of fresh
  temporaries where the loop's copies reuse one row's."""
  as_bits = functools.partial(kv_cache.as_bits, enabled=layout.bits)
  keys = cache["key"]
  batch_size = keys[0].shape[0] if layout.unrolled else keys.shape[1]
  valid = target < batch_size
  (order,) = jnp.nonzero(valid, size=target.shape[0], fill_value=0)
  source = {name: as_bits(prefilled[name]) for name in ("key", "value")}  # [L, P, T, K, H]

  def copy_one(step, stored):
    entry = order[step]
    slot = target[entry]
    key, value = (jax.lax.dynamic_index_in_dim(source[name], rows[entry], axis=1)
                  for name in ("key", "value"))  # [L, 1, T, K, H]
    if layout.unrolled:  # per layer [B, K, H, S] keys and [B, K, S, H] values
      key, value = decode_step.from_stacked(key, value)
      return {name: tuple(jax.lax.dynamic_update_slice(old, part, (slot, 0, 0, 0))
                          for old, part in zip(stored[name], parts))
              for name, parts in (("key", key), ("value", value))}
    return {name: jax.lax.dynamic_update_slice(stored[name], part, (0, slot, 0, 0, 0))
            for name, part in (("key", key), ("value", value))}

  stored = {name: jax.tree.map(as_bits, cache[name]) for name in ("key", "value")}
  stored = jax.lax.fori_loop(0, jnp.sum(valid), copy_one, stored)
  return {name: jax.tree.map(lambda new, old: kv_cache.from_bits(new, old.dtype),
                             stored[name], cache[name]) for name in ("key", "value")}


def decode(params, layers, config, slots, cancel, num_steps, stop_at_first_finish, max_steps):
  """Runs up to num_steps decode steps for every generating slot in one lax.while_loop.

  The loop also ends when no slot is generating, or, if stop_at_first_finish, right after a
  step in which some slot finished (so the caller can refill it).

  Args:
    params: the params tree.
    layers: decode_step.split_layers(params, config, transposed, columns) in the form
      Layout.for_batch(...) picks (a decode_step.Weights) for the unrolled cache, None for
      the stacked cache (module docstring).
    slots: slot state.
    cancel: [B] bool, slots to stop before the first step (e.g. a stop string was seen).
    num_steps: int32 scalar <= max_steps.
    stop_at_first_finish: bool scalar.
    max_steps: static int, C.
  Returns:
    (slots, tokens [B, C] int32, logprobs [B, C] float32); NO_TOKEN where a slot did not
    generate. A slot's tokens are a prefix of its row.
  """
  slots = dict(slots, remaining=jnp.where(cancel, 0, slots["remaining"]))
  batch_size = slots["token"].shape[0]
  generating_at_start = slots["remaining"] > 0
  tokens = jnp.full((batch_size, max_steps), NO_TOKEN, jnp.int32)
  logprobs = jnp.zeros((batch_size, max_steps), jnp.float32)

  def keep_going(carry):
    step, slots, _, _ = carry
    generating = slots["remaining"] > 0
    finished_some = jnp.any(generating_at_start & ~generating)
    return (step < num_steps) & jnp.any(generating) & ~(stop_at_first_finish & finished_some)

  # A step in columns makes the logits [V, B]; the sampler reads them so (categorical.py).
  vocab_major = layers is not None and decode_step.in_columns(config, batch_size, layers)

  def one_step(carry):
    step, slots, tokens, logprobs = carry
    generating = slots["remaining"] > 0
    advance = generating.astype(jnp.int32)
    if layers is not None:
      logits, cache = decode_step.step(params, layers, config, slots["token"], slots["cache"],
                                       advance, vocab_major)
    else:
      logits, cache = decoder.forward_with_cache(params, config, slots["token"][:, None],
                                                 slots["cache"], num_new_tokens=advance)
      logits = logits[:, 0]
    token, logprob = categorical.sample(logits, slots["rng"], slots["step"],
                                        slots["temperature"], slots["top_k"], slots["top_p"],
                                        vocab_axis=0 if vocab_major else -1)
    stops = jnp.any(token[:, None] == slots["stop_ids"], axis=-1) | (slots["remaining"] == 1)
    slots = dict(
        slots, cache=cache,
        token=jnp.where(generating, token, slots["token"]),
        step=slots["step"] + advance,
        remaining=jnp.where(generating & ~stops, slots["remaining"] - 1, 0))
    tokens = tokens.at[:, step].set(jnp.where(generating, token, NO_TOKEN))
    logprobs = logprobs.at[:, step].set(jnp.where(generating, logprob, 0.0))
    return step + 1, slots, tokens, logprobs

  _, slots, tokens, logprobs = jax.lax.while_loop(
      keep_going, one_step, (jnp.int32(0), slots, tokens, logprobs))
  return slots, tokens, logprobs


def _resize(x, axis, length):
  """x cut or zero-padded to length along axis."""
  if x.shape[axis] >= length:
    return jax.lax.slice_in_dim(x, 0, length, axis=axis)
  padding = [(0, 0)] * x.ndim
  padding[axis] = (0, length - x.shape[axis])
  return jnp.pad(x, padding)


def relayout(slots, rows, cache_length, layout):
  """Slot state whose slot b' is old slot rows[b'] (rows[b'] >= B: a free slot).

  The batch size becomes len(rows) and the cache length cache_length (static). Cutting the
  cache below a slot's filled length is the caller's mistake.
  """
  def take(x, axis):
    return jnp.take(x, rows, axis=axis, mode="fill", fill_value=0)

  cache = slots["cache"]
  if layout.unrolled:
    relaid = {"key": tuple(_resize(take(x, 0), 3, cache_length) for x in cache["key"]),
              "value": tuple(_resize(take(x, 0), 2, cache_length) for x in cache["value"])}
  else:
    relaid = {name: _resize(take(x, 1), 2, cache_length) if name in ("key", "value")
              else take(x, 1) for name, x in cache.items() if name != "length"}
  relaid["length"] = take(cache["length"], 0)
  new = {name: take(slots[name], 0) for name in _SLOT_FIELDS}
  return dict(new, cache=relaid)
