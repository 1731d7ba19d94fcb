"""The generation engine's jitted programs: what an engine runs, warm-up compiles and aot
compiles ahead of time for a pod.

  functions = programs(model_config, engine_config, layout, mesh=mesh)
  slots = functions.init(batch_size, cache_length)
  slots, tokens, logprobs = functions.decode(params, layers, slots, cancel, num_steps,
                                             stop_early)

Each program is a jax.jit of a pure function of decode.py (or models/), with the slot state
and block pool sharded by the logical axis rules on a mesh, or committed to one device
without one. Engines with the same settings share one set of programs (and so their
compilations). Each trace (= a compilation for a new shape) is counted for the engine whose
thread calls it: counting(counter) around a call.
"""
import contextlib
import functools
import threading
import types

import jax

from whale_jax.models import decode_step
from whale_jax.parallel import rules as rules_lib
from whale_jax.sampling import decode

PREFILL_CHUNK = 64  # tokens per row and step of a prefill after a cached prefix
COUNTER_LOCK = threading.Lock()  # held while a counter of compilations is read or written
_CALLER = threading.local()  # .compilations: the Counter of the engine calling a program


@contextlib.contextmanager
def counting(compilations):
  """Counts the traces of programs called by this thread in compilations (a Counter)."""
  _CALLER.compilations = compilations
  try:
    yield
  finally:
    _CALLER.compilations = None


def _counted(name, function):
  """function, counting each trace (= compilation for a new shape) for the calling engine."""
  @functools.wraps(function)
  def traced(*args, **kwargs):
    compilations = getattr(_CALLER, "compilations", None)
    if compilations is not None:
      with COUNTER_LOCK:
        compilations[name] += 1
    return function(*args, **kwargs)
  return traced


def compiled_config(config):
  """config without what the programs never read (special token ids, the position limit):
  engines of models that differ only in those share programs."""
  return config.replace(eos_token_ids=(), bos_token_id=None, pad_token_id=None,
                        max_position_embeddings=0)


def programs(config, engine_config, layout, mesh=None, rules=None, device=None):
  """The jitted programs of an engine (a namespace of jax.jit functions).

  Args:
    config: models.ModelConfig.
    engine_config: engine_config.EngineConfig; its steps_per_call, num_stop_ids and
      prefix_block_size shape the programs.
    layout: layout.Layout (Layout.choose); decode takes Layout.for_batch of its slot batch.
    mesh: optional Mesh; slot state and pool are then sharded by rules.
    rules: logical axis rules (default parallel.rules.SAMPLE_RULES).
    device: without a mesh, the device state outputs are committed to, so that a program's
      inputs are alike however they were made (JAX compiles again for committed vs
      uncommitted inputs, which would defeat warm-up).
  Returns:
    init(batch_size, cache_length), prefill(params, tokens, lengths), prefill_prefix(params,
    tokens, lengths, pool, pages, prefix_lengths, save_pages) (params: store_weights' where
    layout.stores_bits), init_pool(num_blocks), grow_pool(pool, num_blocks), save_slots(pool, cache,
    rows, blocks, pages), insert(slots, prefilled, new), decode(params, layers, slots,
    cancel, num_steps, stop_early), relayout(slots, rows, cache_length),
    split_layers(params, transposed=..., columns=...), store_weights(params).
  """
  rules = rules_lib.SAMPLE_RULES if rules is None else rules
  return _programs(compiled_config(config), layout, engine_config.steps_per_call,
                   engine_config.num_stop_ids, mesh, tuple(sorted(rules.items())),
                   engine_config.prefix_block_size, PREFILL_CHUNK,
                   None if mesh is not None else device)


@functools.lru_cache(maxsize=16)
def _programs(config, layout, steps_per_call, num_stop_ids, mesh, rules_items, block_size,
              prefill_chunk, device):
  """programs() for hashable settings, made once per distinct settings."""
  slot_shardings = pool_shardings = None
  if mesh is None and device is not None:
    slot_shardings = pool_shardings = jax.sharding.SingleDeviceSharding(device)
  if mesh is not None:
    slot_shardings = rules_lib.shardings(decode.slots_logical_axes(config, layout), mesh,
                                         dict(rules_items))
    pool_shardings = rules_lib.shardings(decode.pool_logical_axes(), mesh, dict(rules_items))

  def prefill_call(params, tokens, lengths):
    return decode.prefill(params, config, tokens, lengths, prefill_chunk, layout)

  def prefill_prefix_call(params, tokens, lengths, pool, pages, prefix_lengths, save_pages):
    return decode.prefill_with_prefix(params, config, tokens, lengths, pool, pages,
                                      prefix_lengths, save_pages, prefill_chunk, layout)

  def decode_call(params, layers, slots, cancel, num_steps, stop_early):
    return decode.decode(params, layers, config, slots, cancel, num_steps, stop_early,
                         steps_per_call)

  return types.SimpleNamespace(
      init=jax.jit(_counted("init_slots", functools.partial(
          decode.init_slots, config, num_stop_ids=num_stop_ids, layout=layout)),
                   static_argnums=(0, 1), out_shardings=slot_shardings),
      prefill=jax.jit(_counted("prefill", prefill_call),
                      out_shardings=pool_shardings if mesh is None else None),
      prefill_prefix=jax.jit(_counted("prefill_prefix", prefill_prefix_call), donate_argnums=3,
                             out_shardings=(pool_shardings if mesh is None else None,
                                            pool_shardings)),
      init_pool=jax.jit(_counted("init_pool", functools.partial(
          decode.init_pool, config, block_size=block_size)), static_argnums=0,
                        out_shardings=pool_shardings),
      grow_pool=jax.jit(_counted("grow_pool", decode.grow_pool), static_argnums=1,
                        out_shardings=pool_shardings),  # a new shape: nothing to donate to
      save_slots=jax.jit(_counted("save_blocks", functools.partial(
          decode.save_blocks, layout=layout)), donate_argnums=0,
                         out_shardings=pool_shardings),
      insert=jax.jit(_counted("insert", functools.partial(decode.insert, layout=layout)),
                     donate_argnums=0, out_shardings=slot_shardings),
      decode=jax.jit(_counted("decode", decode_call), donate_argnums=2,
                     out_shardings=(slot_shardings, None, None)),
      relayout=jax.jit(_counted("relayout", functools.partial(decode.relayout,
                                                              layout=layout)),
                       static_argnums=2, out_shardings=slot_shardings),
      split_layers=jax.jit(_counted("split_layers", functools.partial(
          decode_step.split_layers, config=config)),
                           static_argnames=("transposed", "columns")),
      store_weights=jax.jit(_counted("store_weights", functools.partial(
          layout.store_weights, config=config))))
