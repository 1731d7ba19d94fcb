"""The engine's warm-up: every program of a grid of (slot batch, cache length) cells, compiled
before the first request.

  compiled = warmup.run(engine, batch_sizes, max_cache_length, min_cache_length)

Like a GPU server capturing its graphs at start-up: afterwards, requests whose slot batches
and cache lengths lie in the warmed cells compile nothing (buckets.Grid.warm_cells picks the
cells). Per cell: the decode call, the prefill of each row count it can use, its insert into
the slots, the block copies out of the slots (with prefix_cache_completions), and the
relayouts to the next batch and length buckets and back; plus the random-key folds. Without
a mesh the programs are traced first and compiled on a pool of threads (one per CPU; programs
compile independently); then each runs once on empty inputs (no slot generating, nothing to
prefill), which compiles nothing more. Runs on the engine thread (engine.Engine.warm_up),
whose compilation caches are the ones serving uses.

A part of the engine split out of engine.py: it reads the engine's programs, grid and
weight copies (its private attributes) and changes nothing of it but what the calls do.
"""
# pylint: disable=protected-access
import concurrent.futures
import os

import jax
import numpy as np

from whale_jax.sampling import buckets
from whale_jax.sampling import categorical
from whale_jax.sampling import slots as slots_lib


def run(engine, batch_sizes, max_cache_length, min_cache_length):
  """Compiles and runs every program of the cells (engine.warm_up's arguments); returns the
  block pool the runs made (None without a prefix cache)."""
  params = engine._params
  sizes, lengths = engine.grid.warm_cells(engine.max_slots, engine.max_cache_length,
                                          batch_sizes, max_cache_length, min_cache_length)
  count = 1
  while count <= buckets.power_of_two_bucket(engine.max_slots):
    categorical.sample_rngs([(0, 0, 0)] * count)
    count *= 2
  if engine.mesh is None:  # with one, lowering alone may not fix the shardings a call gets
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as compiler:
      compiling = []

      def lower(function, *args):
        lowered = engine._call(function.lower, *args)  # traces (counted) on this thread
        compiling.append(compiler.submit(lowered.compile))
        return lowered.out_info

      try:
        plan(engine, params, sizes, lengths, lower)
      finally:
        for job in compiling:
          job.result()
  pool = plan(engine, params, sizes, lengths, engine._call)
  return jax.block_until_ready(pool)


def plan(engine, params, sizes, lengths, call):
  """call(function, *args) for every program of the cells sizes x lengths, each on empty
  inputs that the calls before it made. call runs the function (then the pool this returns
  is the engine's) or only lowers it (then every output is a ShapeDtypeStruct)."""
  functions, block_size = engine._functions, engine.prefix_block_size
  pool = None if engine._index is None else call(functions.init_pool, engine._index.pool_blocks)
  stored = engine._stored_weights(params)
  for batch_size in sizes:
    layers = engine._prepared_layers(params,
                                     engine.layout.for_batch(engine.config, batch_size))
    rows = sorted({engine.grid.prefill_rows(n, batch_size) for n in range(1, batch_size + 1)})
    for cache_length in lengths:
      slots = call(functions.init, batch_size, cache_length)
      slots, _, _ = call(functions.decode, params, layers, slots,
                         np.zeros((batch_size,), bool), np.int32(engine.steps_per_call),
                         np.bool_(False))
      for num_rows in rows:
        tokens = np.zeros((num_rows, cache_length), np.int32)
        zeros = np.zeros((num_rows,), np.int32)
        if pool is None:
          prefilled = call(functions.prefill, stored, tokens, zeros)
        else:
          no_pages = np.full((num_rows, cache_length // block_size), slots_lib.NO_PAGE,
                             np.int32)
          prefilled, pool = call(functions.prefill_prefix, stored, tokens, zeros, pool,
                                 no_pages, zeros, no_pages)
        slots = call(functions.insert, slots, prefilled,
                     slots_lib.empty_insert(batch_size, engine.num_stop_ids))
      if pool is not None and engine._cache_completions:
        blocks = 16
        while blocks <= buckets.save_bucket(batch_size * cache_length // block_size):
          pool = call(functions.save_slots, pool, slots["cache"],
                      *slots_lib.save_arrays([], blocks))
          blocks *= 16
      # relayout_path moves one bucket at a time: to the next cell up and back down.
      for other_batch, other_length in engine.grid.neighbours(batch_size, cache_length, sizes,
                                                              lengths):
        call(functions.relayout, slots, np.arange(other_batch, dtype=np.int32), other_length)
        other = call(functions.init, other_batch, other_length)
        call(functions.relayout, other, np.arange(batch_size, dtype=np.int32), cache_length)
  return pool
