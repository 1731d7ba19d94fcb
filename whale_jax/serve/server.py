"""The state behind whale_jax.serve's HTTP app (Server: one sampler, its tokenizer, the
pending-request bound and the counters /health reports), the model it serves (load_model) and
the process's count of XLA compilations."""
import asyncio
import concurrent.futures
import functools
import os
import threading
import time

from whale_jax.models import presets as model_presets
from whale_jax.serve import guided
from whale_jax.serve import protocol

EMBEDDED_SOLVER = model_presets.EMBEDDED_SOLVER   # --model=embedded


def load_model(source, tokenizer_source="", dtype="float32", seed=0, vocab_size=0):
  """(ModelConfig, params, tokenizer, default served name) for --model (module docstring).

  A directory or "embedded" loads through algorithms.builders (load_model, load_run_tokenizer:
  the loaders experiments use); "preset:NAME" builds models.presets' config with random
  weights from seed.
  """
  from whale_jax.algorithms import builders  # pylint: disable=import-outside-toplevel
  from whale_jax.algorithms import sections  # pylint: disable=import-outside-toplevel
  if source.startswith("preset:"):
    return _preset_model(source[len("preset:"):], tokenizer_source, dtype, seed, vocab_size)
  path = EMBEDDED_SOLVER if source == "embedded" else source
  if not os.path.isdir(path):
    raise FileNotFoundError(f"--model={source}: no such directory; pass a Hugging Face model "
                            "directory, 'embedded' or 'preset:NAME'.")
  config, params, model_dir = builders.load_model(
      sections.ModelSection(source="embedded" if source == "embedded" else "hf", path=path,
                            dtype=dtype), mesh=None, key_path="--model")
  tokenizer = builders.load_run_tokenizer(tokenizer_source, model_dir, key_path="--tokenizer")
  name = "embedded" if source == "embedded" else os.path.basename(os.path.normpath(path))
  return config, params, tokenizer, name


def _preset_model(name, tokenizer_source, dtype, seed, vocab_size):
  """load_model of --model=preset:NAME."""
  import jax  # pylint: disable=import-outside-toplevel
  from whale_jax.models import decoder  # pylint: disable=import-outside-toplevel
  from whale_jax.models import presets  # pylint: disable=import-outside-toplevel
  from whale_jax.tokenization import load_tokenizer  # pylint: disable=import-outside-toplevel
  if not tokenizer_source:
    raise ValueError(f"--model=preset:{name} has no tokenizer of its own; pass --tokenizer "
                     "(e.g. --tokenizer=byte, or a tokenizer directory).")
  tokenizer = load_tokenizer(tokenizer_source)
  changes = {"param_dtype": dtype, "compute_dtype": dtype}
  if vocab_size:
    changes["vocab_size"] = vocab_size
  config = presets.get(name, **changes)
  if tokenizer.vocab_size > config.vocab_size:
    raise ValueError(f"--tokenizer={tokenizer_source} has {tokenizer.vocab_size} tokens but "
                     f"preset {name!r} has vocab_size={config.vocab_size}; pass "
                     f"--vocab_size={tokenizer.vocab_size}.")
  return config, decoder.init_params(config, jax.random.key(seed)), tokenizer, name


@functools.lru_cache(maxsize=None)
def compilation_counter():
  """This process's counter of XLA compilations (one jax.monitoring listener, made once)."""
  import jax  # pylint: disable=import-outside-toplevel
  counter = _CompilationCounter()
  jax.monitoring.register_event_duration_secs_listener(counter.on_event)
  return counter


class _CompilationCounter:
  """Counts JAX's backend-compile events: every program compiled, by anyone in the process."""

  def __init__(self):
    self._lock = threading.Lock()
    self._count = 0

  def on_event(self, event, duration, **kwargs):
    del duration, kwargs
    if event == "/jax/core/compile/backend_compile_duration":
      with self._lock:
        self._count += 1

  @property
  def count(self):
    with self._lock:
      return self._count


class Server:
  """The state behind the HTTP app: one sampler, its tokenizer and the pending-request bound.

  Args:
    sampler: a sampling.Sampler (its engine batches every request).
    tokenizer: the sampler's tokenizer.
    model_name: the name clients put in "model".
    max_pending_requests: prompts in the engine or waiting for it before a 429.
    default_max_tokens: chat requests without max_tokens get this (clipped to the context).
  """

  def __init__(self, sampler, tokenizer, model_name, max_pending_requests=256,
               default_max_tokens=1024):
    self.sampler, self.tokenizer, self.model_name = sampler, tokenizer, model_name
    self.max_pending_requests = max_pending_requests
    self.default_max_tokens = default_max_tokens
    self.max_context = sampler.max_cache_length
    self.max_n = sampler.max_slots
    self.created = int(time.time())
    self._lock = threading.Lock()
    self.pending = 0
    self.counts = {"served_requests": 0, "rejected_requests": 0, "busy_rejections": 0,
                   "prompt_tokens": 0, "completion_tokens": 0, "guided_choice_requests": 0}
    self.scorer = guided.Scorer(sampler)
    self.warmup_seconds, self.warmup_programs = None, None

  def warm_up(self):
    """Compiles every program a request can need: the engine's whole bucket grid and
    guided_choice's scoring shapes (guided.SCORE_ROWS rows at each of the engine's cache lengths).
    Returns and keeps (seconds, programs: the XLA compilations it made, or loaded from the
    persistent compilation cache)."""
    start, before = time.perf_counter(), compilation_counter().count
    self.sampler.warm_up()
    for length in self.sampler.cache_lengths:
      self.scorer.score_call([[0]], length)
    self.warmup_seconds = time.perf_counter() - start
    self.warmup_programs = compilation_counter().count - before
    return self.warmup_seconds, self.warmup_programs

  def health(self):
    with self._lock:
      state = {"status": "ok", "model": self.model_name, "pending_requests": self.pending,
               "max_pending_requests": self.max_pending_requests, **self.counts}
    state.update(compilations=compilation_counter().count, warmup_seconds=self.warmup_seconds,
                 warmup_programs=self.warmup_programs)
    engine = self.sampler.metrics()
    state["engine"] = {key: engine[key] for key in (
        "generated_tokens", "completed_requests", "tokens_per_second", "slot_occupancy",
        "queued_requests", "compilations")}
    return state

  def count(self, name, amount=1):
    with self._lock:
      self.counts[name] += amount

  def count_served(self, usage):
    """Counts one answered request and its usage's tokens."""
    with self._lock:
      self.counts["served_requests"] += 1
      self.counts["prompt_tokens"] += usage["prompt_tokens"]
      self.counts["completion_tokens"] += usage["completion_tokens"]

  def _reserve(self, num_prompts):
    with self._lock:
      if self.pending + num_prompts > self.max_pending_requests:
        self.counts["busy_rejections"] += 1
        raise protocol.RequestError(
            429, f"The server has {self.pending} prompts pending and takes at most "
            f"{self.max_pending_requests} (--max_pending_requests); retry after a moment.",
            None, "rate_limit_error")
      self.pending += num_prompts

  def _release(self, num_prompts):
    with self._lock:
      self.pending -= num_prompts

  def sampling_params(self, body, prompt_lengths, default_max_tokens, chat):
    """SamplingParams of a request body (protocol.sampling_params for this server)."""
    return protocol.sampling_params(body, prompt_lengths, default_max_tokens, chat,
                                    self.model_name, self.max_context, self.max_n)

  async def guided(self, prompt, choices, choice_ids):
    """The Completion of the best choice after prompt (see the module docstring)."""
    from whale_jax.sampling import api  # pylint: disable=import-outside-toplevel
    self._reserve(1)
    try:
      best, logprobs, _ = await asyncio.to_thread(self.scorer.choose, prompt, choice_ids)
    finally:
      self._release(1)
    self.count("guided_choice_requests")
    return api.Completion(token_ids=list(choice_ids[best]), logprobs=logprobs,
                          text=choices[best], finish_reason="stop",
                          prompt_token_ids=list(prompt), stop_reason=None)

  async def generate(self, prompts, params):
    """The Completions of each prompt (params.n each, prompt-major); prompt r has key r."""
    self._reserve(len(prompts))
    try:
      try:
        futures = self.sampler.submit_many(
            [(prompt, params, key) for key, prompt in enumerate(prompts)])
      except ValueError as error:
        raise protocol.RequestError(400, str(error), "prompt") from None
      results = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
    finally:
      self._release(len(prompts))
    return [completion for result in results for completion in result]

  def stream(self, prompts, params):
    """Submits prompts now (a bad request fails here, before a response starts) and returns
    an async iterator of (choice index, token_ids, logprobs, Completion or None): each choice's
    tokens as the engine settles them, once per decode call; the Completion comes with a
    choice's last tokens. Choices are prompt-major as in generate; prompt r has key r."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    def reporter(key):
      def on_tokens(index, token_ids, logprobs, completion):  # on the engine thread
        loop.call_soon_threadsafe(queue.put_nowait,
                                  (key * params.n + index, token_ids, logprobs, completion))
      return on_tokens

    def finished(future):  # after the request's last on_tokens: the queue keeps the order
      self._release(1)
      loop.call_soon_threadsafe(queue.put_nowait, future)

    self._reserve(len(prompts))
    try:
      futures = self.sampler.submit_many(
          [(prompt, params, key, reporter(key)) for key, prompt in enumerate(prompts)])
    except ValueError as error:
      self._release(len(prompts))
      raise protocol.RequestError(400, str(error), "prompt") from None
    for future in futures:
      future.add_done_callback(finished)
    return _settled_tokens(queue, len(futures))


async def _settled_tokens(queue, remaining):
  """The events Server.stream queues, until all its requests are done (raising the
  engine's error if one failed)."""
  while remaining:
    item = await queue.get()
    if isinstance(item, concurrent.futures.Future):
      remaining -= 1
      item.result()
    else:
      yield item
