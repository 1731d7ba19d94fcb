"""The generation engine (the Sampler): a background thread that batches requests into decode
slots.

  sampler = Sampler(config, params, tokenizer=None, mesh=None)   # or engine_config=...
  outs = sampler.generate([prompt_ids, ...], SamplingParams(max_tokens=64, seed=0))
  future = sampler.submit(prompt_ids, SamplingParams(seed=3), request_key=7)  # any thread
  sampler.update_params(train_state.params)   # next decode call uses the new weights
  sampler.metrics()                           # tokens/s, slot occupancy, queue wait, compiles

Any number of threads call submit(); requests queue up. The engine thread loops:
  1. admit queued requests (first come, first served) into free slots, growing the slot batch
     if needed: one prefill per prompt, copied into its n slots; requests that arrive while
     that prefill runs are admitted the same way before the decode call (_admit_arrivals);
     an idle engine woken by one request first waits briefly for the rest of a burst like
     the last one (agent episodes back from their tool calls: _await_burst);
  2. run one jitted decode call of up to steps_per_call steps over all slots; while requests
     wait for a slot, the call returns as soon as any sample finishes; while requests keep
     arriving during calls (agent episodes between tool calls), calls get shorter (halved per
     call down to MIN_STEPS_PER_CALL) so that newcomers start sooner, and grow back to
     steps_per_call when none arrive;
  3. hand finished samples back (stop strings are checked here, on the host) and free slots.
Free slots are refilled between decode calls (continuous batching), so a long generation never
holds short ones hostage; the slot batch shrinks again when few samples remain.

The parts: buckets.py (shape buckets and the grid warm_up() compiles), warmup.py (the
warm-up plan over that grid), programs.py (the jitted programs, which aot compiles too),
layout.py (the XLA-CPU choices, picked once here), slots.py (requests and their checks,
samples, and the arrays that start them in slots), prefix_cache.py (the block index); this
module holds the thread, the queue, admission and the API.

Request keys name random streams: generate() gives prompt r the key r (its index in that
call), submit() takes an explicit key (default 0).

Prefix sharing: requests with identical prompts admitted together share one prefill row, and
the prefix cache (prefix_cache.py: an index of 16-token blocks over a fixed pool of KV pages)
serves every full block a prompt shares with an earlier prefilled prompt (and, with
prefix_cache_completions, an earlier prompt + completion), so the G samples of a group and
the next turn of an episode compute only what is new. Its pages
are read into the prefill cache and written from prefills and finished decode slots by
jitted gathers and scatters of padded index arrays; shapes never depend on what is cached.

Shape buckets keep compilations few (buckets.py): every program's shapes follow from a (slot
batch, cache length) cell of the grid, so warm_up() compiles the whole set (in parallel), and a
server that warms it compiles nothing afterwards. The cache grows with the samples (enough for
the next decode call, never past a sample's prompt + max_tokens), so attention reads little
more than is filled.

Determinism: sample i of a request draws from (seed, request_key, i) and its step index only
(categorical.py). Its slot, the batch and the buckets change floating-point rounding at most
(about 1e-6 in a logprob), never its random stream; a token flips only if such noise moves a
draw across a boundary of the cumulative distribution (or breaks a near-tie in greedy).
"""
import collections
import concurrent.futures
import dataclasses
import functools
import threading
import time

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules as rules_lib
from whale_jax.sampling import buckets
from whale_jax.sampling import categorical
from whale_jax.sampling import decode as decode_lib
from whale_jax.sampling import engine_config as engine_config_lib
from whale_jax.sampling import layout as layout_lib
from whale_jax.sampling import prefix_cache
from whale_jax.sampling import programs as programs_lib
from whale_jax.sampling import slots as slots_lib
from whale_jax.sampling import warmup

MAX_DEFAULT_PREFIX_CACHE_BYTES = 1 << 30
# Fewest steps of a decode call while requests arrive during calls (the call length adapts:
# Engine._iterate). Below ~4, the host's work between calls outweighs the steps at small sizes.
MIN_STEPS_PER_CALL = 4
# Most admission rounds (each a prefill) before a decode call: requests that arrive while one
# round's prefill runs join the next round instead of waiting for the decode call.
MAX_ADMISSION_ROUNDS = 4
# An idle engine woken by a request waits for the rest of a burst like the last one it was
# woken by (Engine._await_burst) at most BURST_SPAN_FACTOR times that burst's arrival span,
# and at most BURST_WAIT_FRACTION of its first admission round's duration.
BURST_SPAN_FACTOR = 2.0
BURST_WAIT_FRACTION = 0.5


def _on_device(params):
  """params with host (numpy) leaves moved to the default device once; jax arrays as they are."""
  if all(isinstance(x, jax.Array) for x in jax.tree.leaves(params)):
    return params  # the caller's tree itself
  return jax.tree.map(lambda x: x if isinstance(x, jax.Array) else jnp.asarray(x), params)


class Engine:
  """Serves generation requests from many threads with continuous batching; an
  api.LLMBackend (whale_jax.sampling.Sampler is this class).

  Args:
    config: models.ModelConfig.
    params: the params tree (held by reference; see update_params; the trainer's, when they
      share a mesh).
    tokenizer: optional; needed for text prompts, stop strings and Completion.text.
    mesh: optional jax Mesh the params live on; slot state is sharded by `rules`.
    rules: logical axis rules for the slot state (default parallel.rules.SAMPLE_RULES).
    engine_config: optional engine_config.EngineConfig holding the settings below; keywords
      given beside it replace its fields. The settings (EngineConfig's fields):
    max_slots: most samples decoded at once (rounded up to a multiple of the mesh's batch
      shards).
    min_slots: fewest slots in a batch, rounded up to a power of two and to at least the
      mesh's batch shards.
    steps_per_call: most decode steps per device call (fewer while requests arrive during
      calls, down to MIN_STEPS_PER_CALL).
    max_cache_length: longest prompt + max_tokens accepted (default
      config.max_position_embeddings).
    max_prefill_tokens: most (padded) tokens in one prefill call.
    num_stop_ids: most end-of-sequence plus stop token ids per request.
    unrolled: decode with models.decode_step (one cache buffer per layer, and per-layer
      copies of the weights made once per params version: see _prepared_layers) instead of
      decoder.forward_with_cache. Default (None): layout.Layout.choose's, on CPU for the models
      decode_step supports. The engine's layout (self.layout) holds it and the other
      XLA-CPU choices.
    prefix_cache_bytes: memory budget of the prefix cache's block pool (KV of prompt and
      completion blocks reused by later requests that start with them; see prefix_cache.py).
      0 turns it off. The pool starts with room for one prefill call (max_prefill_tokens) and
      doubles, up to the budget, only when the blocks it would evict have been reused
      (prefix_cache.py), so memory follows reuse: prompts that share nothing keep the first
      pool (each size compiles the programs that read the pool once). warm_up() allocates
      the whole budget (one shape: a warmed engine compiles nothing as the pool fills). Default for plain decoders: room for
      four times
      what the slots hold (4 * max_slots * max_cache_length tokens), at most
      MAX_DEFAULT_PREFIX_CACHE_BYTES; 0 for hybrid ones (their recurrent state is not
      block-granular; identical prompts admitted together still share one prefill).
    prefix_block_size: tokens per cached block: 1, 2, 4, 8 or 16.
    prefix_cache_completions: also cache each finished sample's prompt + completion blocks
      (their KV is in its decode slot), so that a next turn that starts with them skips the
      completion too. That KV was made by decode steps, whose products round differently
      from a prefill's: logprobs after it differ from the uncached engine's by up to ~2e-6.
      Off (the default): only prefilled prompt blocks are cached, so cached and uncached
      engines agree bitwise, and a next turn recomputes the previous completion once (as a
      prefill, whose blocks are then cached).
    share_identical_prompts: requests with the same prompt admitted in one round share one
      prefill row (exact for every model, hybrid ones included). False prefills each (a
      baseline for benchmarks).
    batch_sizes: the slot batch sizes, ascending, from min_slots (or more) to max_slots (as
      rounded above); default every power of two between them. Each is a multiple of the
      mesh's batch shards.
    cache_lengths: the cache lengths of the slots, ascending, the last >= max_cache_length,
      each a multiple of prefix_block_size; default 32, 48, 64, 96, ... (buckets.length_buckets).
      len(batch_sizes) * len(cache_lengths) is the number of cells warm_up() compiles (some
      ten programs each); buckets.geometric_buckets(32, max_cache_length, 8, multiple=16)
      and buckets.geometric_buckets(min_slots, max_slots, 8) make it small.
  """

  def __init__(self, config, params, tokenizer=None, mesh=None, rules=None,
               engine_config=None, **options):
    if engine_config is None:
      engine_config = engine_config_lib.EngineConfig(**options)
    elif options:
      engine_config = dataclasses.replace(engine_config, **options)
    self.engine_config = engine_config
    max_slots, max_cache_length = engine_config.max_slots, engine_config.max_cache_length
    prefix_cache_bytes = engine_config.prefix_cache_bytes
    prefix_block_size = engine_config.prefix_block_size
    token_bytes = (2 * config.num_layers * config.num_kv_heads * config.head_dim *
                   jnp.dtype(config.compute_jnp_dtype).itemsize)
    if prefix_cache_bytes is None:
      prefix_cache_bytes = 0 if config.is_hybrid else min(
          MAX_DEFAULT_PREFIX_CACHE_BYTES,
          4 * max_slots * (max_cache_length or config.max_position_embeddings) * token_bytes)
    if prefix_cache_bytes and config.is_hybrid:
      raise ValueError(
          f"prefix_cache_bytes={prefix_cache_bytes}: hybrid models (model_type="
          f"{config.model_type!r}) carry a recurrent state that block KV cannot restore; "
          "build the sampler with prefix_cache_bytes=0 (identical prompts admitted together "
          "still share one prefill).")
    self.config = config
    self.tokenizer = tokenizer
    self.mesh = mesh
    self.rules = rules if rules is not None else rules_lib.SAMPLE_RULES
    batch_shards = 1
    if mesh is not None:
      mesh_lib.validate_model(config, mesh, self.rules)
      batch_shards = mesh_lib.axis_size(mesh, "batch", self.rules)
    self.min_slots, self.max_slots = buckets.slot_bounds(engine_config.min_slots, max_slots,
                                                         batch_shards)
    self.steps_per_call = engine_config.steps_per_call
    # Steps of the next decode call: halved (to MIN_STEPS_PER_CALL) after a call during which
    # requests arrived, doubled back (to steps_per_call) after one without.
    self._steps = self.steps_per_call
    self.max_cache_length = max_cache_length or config.max_position_embeddings
    self.grid = buckets.Grid.build(engine_config.batch_sizes, engine_config.cache_lengths,
                                   self.min_slots, self.max_slots, self.max_cache_length,
                                   batch_shards, prefix_block_size)
    self.batch_sizes, self.cache_lengths = self.grid.batch_sizes, self.grid.cache_lengths
    self.max_prefill_tokens = engine_config.max_prefill_tokens
    self.num_stop_ids = engine_config.num_stop_ids
    self.eos_ids = tuple(dict.fromkeys(
        tuple(config.eos_token_ids) + tuple(getattr(tokenizer, "eos_ids", ()) or ())))
    params = _on_device(params)
    # next(iter(...)): devices() is the sharding's cached set, which pop() would empty.
    device = next(iter(jax.tree.leaves(params)[0].devices()))
    platform = device.platform
    self.layout = layout_lib.Layout.choose(config, platform, engine_config.unrolled)
    self.unrolled = self.layout.unrolled
    self._params = params
    self._layers = {}
    # (params, layout.store_weights(params)) where layout.stores_bits: made once per version
    self._stored = None
    self._lock = threading.Lock()
    self._wakeup = threading.Condition(self._lock)
    self._queue = collections.deque()
    self._arrivals = 0  # requests submitted so far
    self._thread = None
    self._closed = False
    self._slots = None
    self._slot_samples = []
    self._to_cancel = set()
    self._compilations = collections.Counter()
    self._decode_calls_by_batch = collections.Counter()  # slot batch size -> calls
    self._metrics = collections.Counter()
    self._max_queue_wait_seconds = 0.0
    # The last burst an idle engine was woken by: (requests admitted before its decode call,
    # seconds between their first and last submit, seconds of its first admission round).
    self._last_burst = (0, 0.0, 0.0)
    self._warm_job = None  # (function, Future) for the engine thread: warm_up()
    self.prefix_block_size = prefix_block_size
    block_bytes = prefix_block_size * token_bytes
    if prefix_cache_bytes and prefix_cache_bytes < block_bytes:
      raise ValueError(f"prefix_cache_bytes={prefix_cache_bytes} is less than one block "
                       f"({block_bytes} bytes); raise it or pass 0 to turn the cache off.")
    self._index_sizes = (prefix_cache_bytes // block_bytes,
                         -(-engine_config.max_prefill_tokens // prefix_block_size))
    self._index = (prefix_cache.PrefixIndex(prefix_block_size, *self._index_sizes)
                   if prefix_cache_bytes else None)
    self._pool = None
    self._indexed_params = None
    self._cache_completions = bool(engine_config.prefix_cache_completions)
    self._share_identical_prompts = bool(engine_config.share_identical_prompts)
    self._functions = programs_lib.programs(config, engine_config, self.layout, mesh,
                                            self.rules, device)

  def _call(self, function, *args):
    """Calls a jitted function, counting its compilations (traces) for this engine."""
    with programs_lib.counting(self._compilations):
      if self.mesh is None:
        return function(*args)
      with rules_lib.activate(self.mesh, self.rules):
        return function(*args)

  # ---- public API ------------------------------------------------------------------------

  @property
  def params(self):
    return self._params

  def update_params(self, params):
    """Decodes with params from the next decode call on (samples in flight continue with them).

    params must have the same tree, shapes and dtypes as before; it is used as is (no copy,
    no renaming), so when trainer and sampler share a mesh, a train step's output can be
    passed straight in.
    """
    params = _on_device(params)
    old = jax.tree.map(lambda x: (x.shape, x.dtype), self._params)
    new = jax.tree.map(lambda x: (x.shape, x.dtype), params)
    if jax.tree.structure(old) != jax.tree.structure(new) or old != new:
      raise ValueError("update_params: the new params differ in tree, shapes or dtypes from "
                       "the sampler's; pass a tree like the one the sampler was built with "
                       "(e.g. the train state's params for the same ModelConfig).")
    with self._lock:
      self._params = params

  def submit(self, prompt_ids, params=None, request_key=0, on_tokens=None):
    """Queues one prompt; returns a Future of its list of params.n Completions.

    Args:
      prompt_ids: non-empty sequence of token ids, or text (with a tokenizer).
      params: SamplingParams (default SamplingParams()).
      request_key: integer in [0, 2**64) naming the request's random streams: the same
        (prompt, params, request_key) gives the same tokens whatever else is being served.
      on_tokens: optional on_tokens(sample_index, token_ids, logprobs, completion), called on
        the engine thread after each decode call that settles tokens of a sample: the new
        tokens (never taken back: a stop string only cuts tokens of the call that completes
        it, before they are reported) and, with the sample's last ones, its Completion (else
        None). Keep it short (it holds up decoding); an exception in it is logged and the
        request gets no more calls.
    """
    return self.submit_many([(prompt_ids, params, request_key, on_tokens)])[0]

  def submit_many(self, requests):
    """Queues (prompt_ids[, params[, request_key[, on_tokens]]]) tuples at once; returns
    their Futures."""
    built = [self._validate(*request) for request in requests]
    with self._lock:
      if self._closed:
        raise RuntimeError("The sampler engine is closed; create a new Sampler.")
      self._queue.extend(built)
      self._arrivals += len(built)
      if self._thread is None:
        self._start_thread()
      self._wakeup.notify()
    return [request.future for request in built]

  def generate(self, prompts, params=None, request_keys=None):
    """Completions for each prompt (token ids, or text with a tokenizer), params.n per
    prompt (prompt-major), waiting for all.

    request_keys default to each prompt's index in `prompts`.
    """
    if isinstance(prompts, str):
      raise TypeError("generate takes a list of prompts; wrap the single prompt in a list.")
    if request_keys is None:
      request_keys = range(len(prompts))
    elif len(request_keys) != len(prompts):
      raise ValueError(f"request_keys has {len(request_keys)} entries for {len(prompts)} "
                       "prompts; give one per prompt or leave it None.")
    futures = self.submit_many([(p, params, k) for p, k in zip(prompts, request_keys)])
    return [completion for future in futures for completion in future.result()]

  def metrics(self):
    """Counters and rates since the engine started (see docs of each key below).

    busy_seconds (engine thread working), device_wait_seconds (of which waiting for decode
    results: the device's share, queued prefills included; the rest is host work and
    compilation); generated_tokens, prefill_tokens (prompt positions computed),
    prefill_tokens_saved (prompt positions served from the prefix cache or shared with an
    identical prompt admitted at the same time), completed_requests, decode_calls and
    decode_calls_by_batch_size (slot batch size -> calls);
    tokens_per_second (generated tokens per second of engine busy time); slot_occupancy (mean
    fraction of slots generating per decode step); burst_wait_seconds (an idle engine
    waiting for the rest of a burst of requests: _await_burst); mean/max queue_wait_seconds
    (submit to admission); prefix_cache_blocks (cached now), prefix_cache_pool_blocks (pages allocated),
    prefix_cache_evictions; compilations (total) and compilations_by_function.
    """
    with self._lock, programs_lib.COUNTER_LOCK:
      metrics = dict(self._metrics)
      compilations = dict(self._compilations)
      decode_calls_by_batch = dict(sorted(self._decode_calls_by_batch.items()))
      queued = len(self._queue)
    busy = metrics.get("busy_seconds", 0.0)
    admitted = metrics.get("admitted_requests", 0)
    slot_steps = metrics.get("slot_steps", 0)
    return {
        "generated_tokens": metrics.get("generated_tokens", 0),
        "prefill_tokens": metrics.get("prefill_tokens", 0),
        "prefill_tokens_saved": metrics.get("prefill_tokens_saved", 0),
        "prefix_cache_blocks": metrics.get("prefix_cache_blocks", 0),
        "prefix_cache_pool_blocks": metrics.get("prefix_cache_pool_blocks", 0),
        "prefix_cache_evictions": metrics.get("prefix_cache_evictions", 0),
        "completed_requests": metrics.get("completed_requests", 0),
        "decode_calls": metrics.get("decode_calls", 0),
        "decode_calls_by_batch_size": decode_calls_by_batch,
        "busy_seconds": busy,
        "device_wait_seconds": metrics.get("device_wait_seconds", 0.0),
        "tokens_per_second": metrics.get("generated_tokens", 0) / busy if busy else 0.0,
        "slot_occupancy": metrics.get("generated_tokens", 0) / slot_steps if slot_steps else 0.0,
        "burst_wait_seconds": metrics.get("burst_wait_seconds", 0.0),
        "mean_queue_wait_seconds": (metrics.get("queue_wait_seconds", 0.0) / admitted
                                    if admitted else 0.0),
        "max_queue_wait_seconds": self._max_queue_wait_seconds,
        "queued_requests": queued,
        "compilations": sum(compilations.values()),
        "compilations_by_function": compilations,
    }

  def warm_up(self, batch_sizes=None, max_cache_length=None, min_cache_length=None):
    """Compiles every device function for every shape the engine can meet within bounds.

    Like a GPU server capturing its graphs at start-up: afterwards, requests whose slot
    batches are among batch_sizes and whose cache lengths (prompt + max_tokens, and what
    the slots hold meanwhile) lie in [min_cache_length, max_cache_length] compile nothing.
    With no arguments that is every request the engine accepts: the whole grid
    self.batch_sizes x self.cache_lengths.
    Shapes: per slot batch B and cache length S (a cell), the decode call, the prefill of each
    row count it can use, its insert into the slots, the block copies out of the slots (with
    prefix_cache_completions), and the relayouts to the next batch and length buckets and back;
    plus the random-key folds. Without a mesh the programs are traced first and compiled on a
    pool of threads (one per CPU; programs compile independently); then each runs once on
    empty inputs (no slot generating, nothing to prefill), which compiles nothing more.

    Args:
      batch_sizes: slot batch sizes (each rounded up to a bucket; default all of them).
      max_cache_length: largest cache length (default the engine's max_cache_length).
      min_cache_length: smallest cache length (default the smallest bucket).
    Returns:
      The number of compilations made.
    Call it before the first request. It runs on the engine thread, whose compilation caches
    are the ones serving uses (JAX keeps some of them per thread).
    """
    future = concurrent.futures.Future()
    with self._lock:
      if self._closed:
        raise RuntimeError("The sampler engine is closed; create a new Sampler.")
      if self._slots is not None or self._queue or self._warm_job is not None:
        raise RuntimeError("warm_up() must come before the first request (the engine is "
                           "already serving).")
      self._warm_job = (functools.partial(self._warm_up, batch_sizes, max_cache_length,
                                          min_cache_length), future)
      if self._thread is None:
        self._start_thread()
      self._wakeup.notify()
    return future.result()

  def _warm_up(self, batch_sizes, max_cache_length, min_cache_length):
    """warm_up() on the engine thread (warmup.py)."""
    before = sum(self._compilations.values())
    self._pool = None  # stays so if a call fails: it may have consumed its donated buffers
    if self._index is not None:
      self._index.grow(self._index.max_blocks)  # the whole budget: one pool shape
    self._pool = warmup.run(self, batch_sizes, max_cache_length, min_cache_length)
    return sum(self._compilations.values()) - before

  def _start_thread(self):  # with self._lock held
    self._thread = threading.Thread(target=self._run, name="whale_jax-sampler", daemon=True)
    self._thread.start()

  def close(self):
    """Stops the engine thread after the requests in flight; later submits raise."""
    with self._lock:
      self._closed = True
      self._wakeup.notify()
      thread = self._thread
    if thread is not None:
      thread.join()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()

  # ---- validation ------------------------------------------------------------------------

  def _validate(self, prompt_ids, params=None, request_key=0, on_tokens=None):
    return slots_lib.new_request(
        prompt_ids, params, request_key, on_tokens, tokenizer=self.tokenizer,
        vocab_size=self.config.vocab_size, max_cache_length=self.max_cache_length,
        max_slots=self.max_slots, eos_ids=self.eos_ids, num_stop_ids=self.num_stop_ids)

  # ---- the engine thread -----------------------------------------------------------------

  def _run(self):
    while True:
      with self._lock:
        while (not self._queue and not self._has_active() and not self._closed
               and self._warm_job is None):
          self._wakeup.wait()
        job, self._warm_job = self._warm_job, None
      if job is not None:
        function, future = job
        try:
          future.set_result(function())
        except Exception as error:  # pylint: disable=broad-except
          future.set_exception(error)
        continue
      with self._lock:
        if self._closed and not self._queue and not self._has_active():
          return
        if self._queue and not self._has_active():
          self._await_burst()
        admitted = self._take_admissible()
        params = self._params
      start = time.perf_counter()
      try:
        finished = self._iterate(params, admitted)
      except Exception as error:  # pylint: disable=broad-except
        logging.exception("Sampler engine call failed; failing the requests in flight.")
        finished = self._fail_in_flight(admitted, error)
      elapsed = time.perf_counter() - start
      with self._lock:
        self._metrics["busy_seconds"] += elapsed
      for request in finished:
        if isinstance(request, tuple):
          request, error = request
          if not request.future.done():
            request.future.set_exception(error)
        else:
          request.future.set_result([sample.completion for sample in request.samples])

  def _has_active(self):
    return any(sample is not None for sample in self._slot_samples)

  def _await_burst(self):  # with self._lock held
    """Lets an idle engine, just woken by a request, wait for the rest of a burst like the
    last one: until as many requests are queued as that burst had, the free slots are
    full, or BURST_SPAN_FACTOR x its arrival span has passed since the first queued request
    was submitted (at most BURST_WAIT_FRACTION x its first admission round).

    Agent episodes come back from their tool calls within a fraction of a second of each
    other, turn after turn. Admitted alone, the first one's prefill runs with one row (the
    least efficient shape) while the others queue behind it; waiting a little gives one
    prefill of all rows instead. No wait after a burst of one request, or of requests
    submitted at once (span 0: generate(), submit_many()); a lone request after a burst
    waits at most half that burst's first prefill round.
    """
    size, span, first_round = self._last_burst
    if size < 2:
      return
    deadline = self._queue[0].submitted_seconds + min(BURST_SPAN_FACTOR * span,
                                                      BURST_WAIT_FRACTION * first_round)
    started = time.perf_counter()
    while (not self._closed and len(self._queue) < size and
           sum(r.params.n for r in self._queue) < self.max_slots):
      remaining = deadline - time.perf_counter()
      if remaining <= 0:
        break
      self._wakeup.wait(remaining)
    self._metrics["burst_wait_seconds"] += time.perf_counter() - started

  def _take_admissible(self):
    """Pops queued requests (in order) that fit in the free slots, up to max_slots."""
    active = sum(sample is not None for sample in self._slot_samples)
    admitted, now = [], time.perf_counter()
    while self._queue and active + self._queue[0].params.n <= self.max_slots:
      request = self._queue.popleft()
      active += request.params.n
      admitted.append(request)
      wait = now - request.submitted_seconds
      self._metrics["queue_wait_seconds"] += wait
      self._metrics["admitted_requests"] += 1
      self._max_queue_wait_seconds = max(self._max_queue_wait_seconds, wait)
    return admitted

  def _iterate(self, params, admitted):
    """One round: resize, admit, decode, collect. Returns the requests that completed."""
    new_samples = [sample for request in admitted for sample in request.samples]
    active = [sample for sample in self._slot_samples if sample is not None]
    if self._index is not None and params is not self._indexed_params:
      self._index.clear()  # cached KV is of other weights
      for sample in active:
        sample.cacheable = False
      self._indexed_params = params
    self._fit_slots(active, new_samples)
    if admitted:
      started = time.perf_counter()
      self._admit(params, admitted)
      first_round = self._admit_arrivals(params, admitted) - started
      if not active:  # the burst that woke an idle engine (_await_burst waits for the next)
        submitted = [request.submitted_seconds for request in admitted]
        self._last_burst = (len(admitted), max(submitted) - min(submitted), first_round)
    batch_size = len(self._slot_samples)
    batch_layout = self.layout.for_batch(self.config, batch_size)
    layers = self._prepared_layers(params, batch_layout)
    cancel = np.zeros((batch_size,), bool)
    cancel[sorted(self._to_cancel)] = True
    self._to_cancel.clear()
    with self._lock:
      waiting, arrivals = bool(self._queue), self._arrivals
    self._slots, tokens, logprobs = self._call(
        self._functions.decode, params, layers, self._slots, cancel,
        np.int32(self._steps), np.bool_(waiting))
    waited = time.perf_counter()
    tokens, logprobs = jax.device_get((tokens, logprobs))
    with self._lock:
      arrived = self._arrivals != arrivals
    self._steps = (max(self._steps // 2, min(MIN_STEPS_PER_CALL, self.steps_per_call)) if arrived
                   else min(self._steps * 2, self.steps_per_call))
    with self._lock:  # the device's share of the round (async prefill work included)
      self._metrics["device_wait_seconds"] += time.perf_counter() - waited
    finished = []
    completed = self._collect(tokens, logprobs, finished)
    if self._index is not None:
      if self._cache_completions:
        self._save_finished(finished)
      with self._lock:
        self._metrics["prefix_cache_blocks"] = len(self._index)
        self._metrics["prefix_cache_pool_blocks"] = self._index.pool_blocks
        self._metrics["prefix_cache_evictions"] = self._index.evictions
    return completed

  def _admit_arrivals(self, params, admitted):
    """Admits the requests that arrived while the last admission's prefill ran, before the
    decode call (at most MAX_ADMISSION_ROUNDS - 1 more rounds, so decoding never waits long).

    Agent episodes return from their tool calls at about the same time: the first one wakes
    the idle engine alone, and without this the rest would wait for its decode call (or a
    straggler for theirs), a turn behind from then on. Waiting for the prefill costs nothing
    (the decode call would queue behind it). Adds each round's requests to admitted (the
    requests _fail_in_flight fails should a call fail). Returns the time.perf_counter() at
    which the first round's prefill was found done.
    """
    first_done = None
    for _ in range(MAX_ADMISSION_ROUNDS - 1):
      jax.block_until_ready(self._slots)
      first_done = first_done or time.perf_counter()
      with self._lock:
        arrivals = self._take_admissible()
      if not arrivals:
        break
      admitted.extend(arrivals)
      self._fit_slots([sample for sample in self._slot_samples if sample is not None],
                      [sample for request in arrivals for sample in request.samples])
      self._admit(params, arrivals)
    return first_done or time.perf_counter()

  def _prepared_layers(self, params, batch_layout):
    """decode_step.split_layers(params), made once per params version and weight layout
    (batch_layout.transposed and .columns), gathering the embedding from _stored_weights'
    where it stores bits; None for the stacked cache (not batch_layout.unrolled).

    Each is a copy of the layer weights that lives until the params change.
    """
    if not batch_layout.unrolled:
      return None
    form = (batch_layout.transposed, batch_layout.columns)
    cached = self._layers.get(form)
    if cached is None or cached[0] is not params:
      self._layers = {key: value for key, value in self._layers.items()
                      if value[0] is params}  # drop copies of older params
      cached = (params, self._call(functools.partial(
          self._functions.split_layers, transposed=form[0], columns=form[1]), params))
      self._layers[form] = cached
    if not self.layout.stores_bits(self.config):
      return cached[1]
    return dataclasses.replace(cached[1], embedding=self._stored_weights(params)["embedding"])

  def _stored_weights(self, params):
    """params as the prefills read them: layout.store_weights(params) (a copy of the
    embedding and layer weights as 16-bit bits) made once per params version where the layout
    stores bits; params itself elsewhere."""
    if not self.layout.stores_bits(self.config):
      return params
    if self._stored is None or self._stored[0] is not params:
      self._stored = None  # the older copy goes before the new one is made
      self._stored = (params, self._call(self._functions.store_weights, params))
    return self._stored[1]

  def _fit_slots(self, active, new_samples):
    """Sizes the slot batch and cache for the active and new samples (relayout if needed).

    Grows at once; shrinks the batch only to a quarter or less and the cache to half or less,
    so that a batch hovering around a bucket boundary is not copied back and forth.
    """
    wanted_batch = buckets.bucket_for(self.batch_sizes, len(active) + len(new_samples))
    wanted_length = buckets.bucket_for(self.cache_lengths, max(
        min(s.final_cache_length, s.cache_length + self.steps_per_call)
        for s in active + new_samples))
    if self._slots is None:
      self._new_slots(wanted_batch, wanted_length)
      return
    old_batch = len(self._slot_samples)
    old_length = slots_lib.cache_length(self._slots, self.layout)
    batch_size = wanted_batch if (wanted_batch > old_batch or
                                  4 * wanted_batch <= old_batch) else old_batch
    cache_length = wanted_length if (wanted_length > old_length or
                                     2 * wanted_length <= old_length) else old_length
    if not active and (batch_size, cache_length) != (old_batch, old_length):
      # Nothing to keep (a new turn of agent episodes after the last one finished): fresh
      # slots of the new shape instead of copies of empty ones through every bucket between.
      self._new_slots(batch_size, cache_length)
      return
    # One bucket at a time (batch first, then cache length), so that only neighbouring
    # shapes are ever relaid: a set warm_up() can compile ahead.
    for step_batch, step_length in self.grid.relayout_path(
        (old_batch, old_length), (batch_size, cache_length)):
      self._relayout(active, step_batch, step_length)

  def _new_slots(self, batch_size, cache_length):
    self._slots = None  # the old buffers go before the new ones are made
    self._slots = self._call(self._functions.init, batch_size, cache_length)
    self._slot_samples = [None] * batch_size
    self._to_cancel.clear()  # cancelled slots hold no active sample

  def _relayout(self, active, batch_size, cache_length):
    old_batch = len(self._slot_samples)
    if batch_size < old_batch:  # compact the active samples to the front
      rows = [sample.slot for sample in active]
      self._to_cancel.clear()  # cancelled slots hold no active sample and are dropped
    else:  # keep every slot where it is
      rows = list(range(min(old_batch, batch_size)))
    rows += [old_batch] * (batch_size - len(rows))  # out of range: a free slot
    self._slots = self._call(self._functions.relayout, self._slots,
                             np.asarray(rows, np.int32), cache_length)
    samples = [None] * batch_size
    for new_slot, old_slot in enumerate(rows):
      if old_slot < old_batch and self._slot_samples[old_slot] is not None:
        samples[new_slot] = self._slot_samples[old_slot]
        samples[new_slot].slot = new_slot
    self._slot_samples = samples

  def _admit(self, params, admitted):
    """Prefills the admitted prompts and starts their samples in free slots.

    Identical prompts share one prefill row; a prompt's cached prefix (full blocks) is read
    from the block pool and only the rest is computed; the new full blocks are then cached.
    """
    free = [b for b, sample in enumerate(self._slot_samples) if sample is None]
    triples = [(r.params.seed, r.request_key, s.index) for r in admitted for s in r.samples]
    rngs = iter(categorical.sample_rngs(triples))
    rng_of = {id(s): next(rngs) for r in admitted for s in r.samples}
    rows = {}
    for request in admitted:
      key = request.prompt if self._share_identical_prompts else id(request)
      if key not in rows:
        rows[key] = slots_lib.PrefillRow(request.prompt, [], [])
      rows[key].requests.append(request)
    pinned = set()  # pages read or written in this round: never evicted before use
    if self._index is not None:
      for row in rows.values():
        row.pages = self._index.lookup(row.prompt[:-1])
        pinned.update(row.pages)
    size = self.prefix_block_size
    order = sorted(rows.values(), key=lambda r: len(r.prompt))
    while order:  # prefill batches of similar lengths within max_prefill_tokens
      group = [order.pop(0)]
      while order:
        candidate = group + [order[0]]
        longest = max(len(r.prompt) - 1 - r.prefix_length(size) for r in candidate)
        tokens = (buckets.power_of_four_bucket(len(candidate), self.grid.min_prefill_rows) *
                  buckets.bucket_for(self.cache_lengths, longest))
        if tokens > self.max_prefill_tokens:
          break
        group.append(order.pop(0))
      self._prefill_group(params, group, free, rng_of, pinned)

  def _prefill_group(self, params, group, free, rng_of, pinned):
    num_prompts = self.grid.prefill_rows(len(group), len(self._slot_samples))
    size = self.prefix_block_size
    # the slots' cache length (>= every prompt): few shapes
    total_length = slots_lib.cache_length(self._slots, self.layout)
    prefix = np.zeros((num_prompts,), np.int32)
    for row, group_row in enumerate(group):
      prefix[row] = group_row.prefix_length(size)
    tokens = np.zeros((num_prompts, total_length), np.int32)
    lengths = np.zeros((num_prompts,), np.int32)  # positions computed
    for row, group_row in enumerate(group):
      tokens[row, :len(group_row.prompt) - 1] = group_row.prompt[:-1]
      lengths[row] = len(group_row.prompt) - 1 - prefix[row]
    if self._index is not None:
      pages = np.full((num_prompts, total_length // size), slots_lib.NO_PAGE, np.int32)
      save_pages = np.full((num_prompts, total_length // size), slots_lib.NO_PAGE, np.int32)
      for row, group_row in enumerate(group):
        pages[row, :len(group_row.pages)] = group_row.pages
        for block, page in self._index.insert(group_row.prompt[:-1], pinned):
          save_pages[row, block] = page
      self._ensure_pool()
      prefilled, self._pool = self._call(self._functions.prefill_prefix,
                                         self._stored_weights(params), tokens,
                                         lengths + prefix, self._pool, pages, prefix,
                                         save_pages)
    else:
      prefilled = self._call(self._functions.prefill, self._stored_weights(params), tokens,
                             lengths)
    samples = [(row, s) for row, group_row in enumerate(group) for r in group_row.requests
               for s in r.samples]
    batch_size = len(self._slot_samples)
    new = slots_lib.empty_insert(batch_size, self.num_stop_ids)
    for m, (row, sample) in enumerate(samples):
      slot = free.pop(0)
      sample.slot = slot
      self._slot_samples[slot] = sample
      self._to_cancel.discard(slot)
      slots_lib.fill_insert(new, m, slot, row, sample, rng_of[id(sample)])
    self._slots = self._call(self._functions.insert, self._slots, prefilled, new)
    needed = sum(len(r.prompt) - 1 for group_row in group for r in group_row.requests)
    with self._lock:
      self._metrics["prefill_tokens"] += int(lengths.sum())
      self._metrics["prefill_tokens_saved"] += needed - int(lengths.sum())

  def _ensure_pool(self):
    """Allocates the block pool (all of it: one shape) or grows it to the index's size."""
    if self._pool is None:
      self._pool = self._call(self._functions.init_pool, self._index.pool_blocks)
    elif self._pool["key"].shape[1] < self._index.pool_blocks:
      self._pool = self._call(self._functions.grow_pool, self._pool, self._index.pool_blocks)

  def _save_finished(self, finished):
    """Caches the full blocks of each finished sample's prompt + completion (their KV is in
    its slot up to the completion's last token, which was never fed)."""
    writes, pinned = [], set()
    for sample in finished:
      if not sample.cacheable:
        continue
      sequence = sample.request.prompt + tuple(sample.token_ids)
      writes += [(sample.slot, block, page)
                 for block, page in self._index.insert(sequence[:-1], pinned)]
    if not writes:
      return
    self._ensure_pool()
    self._pool = self._call(self._functions.save_slots, self._pool, self._slots["cache"],
                            *slots_lib.save_arrays(writes, buckets.save_bucket(len(writes))))

  def _collect(self, tokens, logprobs, finished):
    """Appends a decode call's tokens to their samples; returns completed requests and adds
    the samples that ended to finished."""
    generated, steps = 0, 0
    completed = []
    for slot, sample in enumerate(self._slot_samples):
      if sample is None:
        continue
      row = tokens[slot]
      count = int(np.sum(row != decode_lib.NO_TOKEN))
      generated += count
      steps = max(steps, count)
      sample.token_ids.extend(int(t) for t in row[:count])
      sample.logprobs.extend(float(p) for p in logprobs[slot, :count])
      done, cancel = slots_lib.finish_if_done(sample, count, self.tokenizer)
      if cancel:  # a stop string ended it: the device is still generating in this slot
        self._to_cancel.add(slot)
      slots_lib.report_tokens(sample)
      if done:
        self._slot_samples[slot] = None
        finished.append(sample)
        if all(s.completion is not None for s in sample.request.samples):
          completed.append(sample.request)
    with self._lock:
      self._metrics["generated_tokens"] += generated
      self._metrics["slot_steps"] += steps * len(self._slot_samples)
      self._metrics["decode_calls"] += 1
      self._decode_calls_by_batch[len(self._slot_samples)] += 1
      self._metrics["completed_requests"] += len(completed)
    return completed

  def _fail_in_flight(self, admitted, error):
    """After a failed device call: fail every request in a slot or being admitted."""
    requests = {id(s.request): s.request for s in self._slot_samples if s is not None}
    requests.update({id(r): r for r in admitted})
    self._slots, self._slot_samples, self._layers = None, [], {}
    self._stored = None
    self._to_cancel.clear()
    self._pool = None  # a failed call may have consumed the pool's donated buffers
    if self._index is not None:
      self._index = prefix_cache.PrefixIndex(self.prefix_block_size, *self._index_sizes)
    return [(request, error) for request in requests.values()]


Sampler = Engine  # the public name (sampling.Sampler, sampler.Sampler)
