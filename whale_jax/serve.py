r"""An OpenAI-compatible HTTP server over whale_jax's own generation engine.

  pip install -e '.[serve]'
  python -m whale_jax.serve --model=embedded --port=8000                  # the demo solver
  python -m whale_jax.serve --model=/ckpt/Qwen3-8B --dtype=bfloat16 --served_model_name=proposer
  python -m whale_jax.serve --model=preset:qwen3_5_tiny --tokenizer=byte --vocab_size=267

  client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
  client.chat.completions.create(model="embedded", messages=[...], temperature=0, seed=3)

--model is a Hugging Face directory (config.json + *.safetensors), "embedded" (the solver in
whale_jax/assets/demo_solver) or "preset:NAME" (models.presets, random weights from --seed).
Every request is served by one sampling.Sampler: continuous batching over decode slots, chat
messages rendered with the model's chat template (tokenization.chat's ChatML when it has none).

Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health.
Request fields: model, max_tokens (chat also max_completion_tokens), temperature, top_p,
top_k (0 or -1 = off), n, stop, seed, logprobs (completions: 0 or 1; chat: true/false with
top_logprobs 0), stream (+ stream_options.include_usage), ignore_eos, return_token_ids
(adds token_ids and prompt_token_ids to each choice), user; presence_penalty and
frequency_penalty only 0, logit_bias only empty, echo only false, best_of only 1 or n.
Chat also takes tools (function schemas, rendered into the prompt; no tool-call parsing).
Both take guided_choice (a list of strings, as vLLM before 0.12 takes it through the openai
client's extra_body) or its newer spelling structured_outputs={"choice": [...]} (both at
once must agree): the reply is the choice with the highest total log-probability under the
model.
Anything else, and any value out of range, is a 400 whose message and "param" name the field.

Semantics, where they differ from the OpenAI API:
  - Random streams: prompt r of a request draws from (seed, request key r, sample index), the
    same streams as Sampler.generate(prompts, SamplingParams(seed=seed, ...)); with no seed the
    server draws one per request.
  - logprobs are those the sampler reports: log-softmax of logits / temperature (temperature 1
    when greedy), one per generated token, a final end-of-sequence token included (the text
    leaves it out). top_logprobs (alternatives) are not available.
  - A stop string ends the output and is removed from the text (as the OpenAI API does); the
    tokens and logprobs keep the token that completed it.
  - Streaming speaks the SSE protocol: a choice's chunk comes after each decode call that gave
    it tokens (--steps_per_call tokens at most; each chunk carries their logprobs), then
    usage, then [DONE]. The text of a chunk holds back its last characters (as many as the
    longest stop string, at least one) until more tokens or the end settle them, so the
    chunks add up to the whole reply's text. An engine failure after the stream started is a
    last chunk {"error": {...}}. guided_choice replies stream whole (one chunk per token).
  - guided_choice is exact, not sampled: each choice's tokens (tokenizer.encode(choice), no
    end-of-sequence token) are scored after the prompt with the model's own distribution
    (temperature 1, whatever the request's temperature), the highest sum wins (ties: the
    earlier choice), finish_reason is "stop". Sampling fields are validated but do not change
    the answer; n must be 1; logprobs are the chosen choice's per-token ones.
Requests beyond --max_pending_requests (prompts in the engine or waiting for it) get a 429
with Retry-After; the client retries.

Start-up compiles every program a request can need before the server listens: the engine's
grid of slot batches (1, r, r**2, ... up to --max_slots) by cache lengths (32, 32 r, ... up to
--max_cache_length), r = --bucket_ratio, and guided_choice's scoring of 4 rows at each cache
length. The log and /health give that warm-up's seconds and program count; /health's
"compilations" (every XLA compilation in the process) stays flat from then on, whatever the
load. Compiled programs persist in --compilation_cache_dir (JAX's persistent compilation
cache), so a restarted server loads them in seconds.
"""
import asyncio
import concurrent.futures
import functools
import json
import os
import secrets
import socket
import sys
import threading
import time
import uuid

from whale_jax import quiet  # pylint: disable=unused-import  # before jax and transformers

from absl import app
from absl import flags
from absl import logging

from whale_jax.models import presets as model_presets

SERVE_EXTRA = "pip install -e '.[serve]'"
EMBEDDED_SOLVER = model_presets.EMBEDDED_SOLVER   # --model=embedded
COMMON_FIELDS = ("model", "max_tokens", "temperature", "top_p", "top_k", "n", "stop", "seed",
                 "logprobs", "stream", "stream_options", "ignore_eos", "return_token_ids",
                 "user", "presence_penalty", "frequency_penalty", "logit_bias", "best_of")
COMPLETION_FIELDS = COMMON_FIELDS + ("prompt", "echo", "suffix", "guided_choice",
                                     "structured_outputs")
CHAT_FIELDS = COMMON_FIELDS + ("messages", "max_completion_tokens", "top_logprobs", "tools",
                               "tool_choice", "guided_choice", "structured_outputs")
MAX_STOP_STRINGS = 16
MAX_GUIDED_CHOICES = 64
SCORE_ROWS = 4  # rows of one guided_choice scoring call (more choices: several calls)


class RequestError(Exception):
  """An HTTP error reply: status, message, the request field it is about."""

  def __init__(self, status, message, param=None, kind="invalid_request_error"):
    super().__init__(message)
    self.status, self.message, self.param, self.kind = status, message, param, kind


def _bad(name, expected, value):
  return RequestError(400, f"'{name}' must be {expected}; got {json.dumps(value)[:80]}.", name)


def _is_int(value):
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def _get(body, name, default, valid, expected):
  value = body.get(name)
  if value is None:
    return default
  if not valid(value):
    raise _bad(name, expected, value)
  return value


# ---- the model ---------------------------------------------------------------------------


def load_model(source, tokenizer_source="", dtype="float32", seed=0, vocab_size=0):
  """(ModelConfig, params, tokenizer, default served name) for --model (module docstring)."""
  import jax  # pylint: disable=import-outside-toplevel
  from whale_jax.models import decoder  # pylint: disable=import-outside-toplevel
  from whale_jax.models import hf  # pylint: disable=import-outside-toplevel
  from whale_jax.models import presets  # pylint: disable=import-outside-toplevel
  from whale_jax.tokenization import load_tokenizer  # pylint: disable=import-outside-toplevel
  if source.startswith("preset:"):
    name = source[len("preset:"):]
    if not tokenizer_source:
      raise ValueError(f"--model={source} has no tokenizer of its own; pass --tokenizer "
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
  path = EMBEDDED_SOLVER if source == "embedded" else source
  if not os.path.isdir(path):
    raise FileNotFoundError(f"--model={source}: no such directory; pass a Hugging Face model "
                            "directory, 'embedded' or 'preset:NAME'.")
  config, params = hf.load_hf(path, dtype=dtype)
  tokenizer = load_tokenizer(tokenizer_source or path)
  name = "embedded" if source == "embedded" else os.path.basename(os.path.normpath(path))
  return config, params, tokenizer, name


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


# ---- requests -> sampling ----------------------------------------------------------------


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
    self._score_lock = threading.Lock()
    self._score_fn = None
    self.warmup_seconds, self.warmup_programs = None, None

  def warm_up(self):
    """Compiles every program a request can need: the engine's whole bucket grid and
    guided_choice's scoring shapes (SCORE_ROWS rows at each of the engine's cache lengths).
    Returns and keeps (seconds, programs: the XLA compilations it made, or loaded from the
    persistent compilation cache)."""
    start, before = time.perf_counter(), compilation_counter().count
    self.sampler.warm_up()
    for length in self.sampler.cache_lengths:
      self._score_call([[0]], length)
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
        raise RequestError(
            429, f"The server has {self.pending} prompts pending and takes at most "
            f"{self.max_pending_requests} (--max_pending_requests); retry after a moment.",
            None, "rate_limit_error")
      self.pending += num_prompts

  def _release(self, num_prompts):
    with self._lock:
      self.pending -= num_prompts

  def sampling_params(self, body, prompt_lengths, default_max_tokens, chat):
    """SamplingParams of a request body (validated field by field)."""
    from whale_jax.sampling import SamplingParams  # pylint: disable=import-outside-toplevel
    model = body.get("model")
    if not isinstance(model, str) or not model:
      raise _bad("model", f"the served model's name ({self.model_name!r})", model)
    if model != self.model_name:
      raise RequestError(404, f"The model {model!r} does not exist; this server serves "
                         f"{self.model_name!r} (GET /v1/models).", "model", "not_found_error")
    longest = max(prompt_lengths)
    room = self.max_context - longest
    if room < 1:
      raise RequestError(400, f"The prompt has {longest} tokens; this server's context is "
                         f"{self.max_context} tokens, which leaves no room to generate.",
                         "messages" if chat else "prompt")
    token_field = "max_tokens"
    if chat and body.get("max_completion_tokens") is not None:
      token_field = "max_completion_tokens"
    max_tokens = _get(body, token_field, None, lambda v: _is_int(v) and v >= 1,
                      "an integer >= 1")
    if max_tokens is None:
      max_tokens = min(default_max_tokens, room)
    elif max_tokens > room:
      raise RequestError(400, f"'{token_field}'={max_tokens} plus the prompt's {longest} "
                         f"tokens exceeds this server's context of {self.max_context} tokens; "
                         f"ask for at most {room}.", token_field)
    temperature = _get(body, "temperature", 1.0, lambda v: _is_number(v) and 0 <= v <= 100,
                       "a number in [0, 100] (0 = greedy)")
    top_p = _get(body, "top_p", 1.0, lambda v: _is_number(v) and 0 < v <= 1,
                 "a number in (0, 1]")
    top_k = _get(body, "top_k", 0, lambda v: _is_int(v) and v >= -1,
                 "an integer >= 0 (0 or -1 = off)")
    n = _get(body, "n", 1, lambda v: _is_int(v) and 1 <= v <= self.max_n,
             f"an integer in [1, {self.max_n}]")
    seed = _get(body, "seed", None, lambda v: _is_int(v) and 0 <= v < 2**64,
                "an integer in [0, 2**64)")
    stop = body.get("stop")
    if stop is None:
      stop = ()
    elif isinstance(stop, str):
      stop = (stop,)
    if not (isinstance(stop, (list, tuple)) and len(stop) <= MAX_STOP_STRINGS and
            all(isinstance(s, str) and s for s in stop)):
      raise _bad("stop", f"a non-empty string or a list of at most {MAX_STOP_STRINGS} of them",
                 body.get("stop"))
    ignore_eos = _get(body, "ignore_eos", False, lambda v: isinstance(v, bool), "true or false")
    best_of = body.get("best_of")
    if best_of is not None and best_of not in (1, n):
      raise _bad("best_of", f"1 or n ({n}); this server does not rank samples", best_of)
    for name in ("presence_penalty", "frequency_penalty"):
      _get(body, name, 0, lambda v: _is_number(v) and v == 0, "0 (penalties are not supported)")
    _get(body, "logit_bias", None, lambda v: v == {}, "empty (logit_bias is not supported)")
    _get(body, "user", None, lambda v: isinstance(v, str), "a string")
    _get(body, "stream", False, lambda v: isinstance(v, bool), "true or false")
    _get(body, "return_token_ids", False, lambda v: isinstance(v, bool), "true or false")
    options = _get(body, "stream_options", {}, lambda v: isinstance(v, dict) and set(v) <= {
        "include_usage"} and isinstance(v.get("include_usage", False), bool),
                   '{"include_usage": true or false}')
    del options
    if seed is None:
      seed = secrets.randbits(63)
    return SamplingParams(max_tokens=max_tokens, temperature=float(temperature),
                          top_p=float(top_p), top_k=max(int(top_k), 0), seed=int(seed), n=n,
                          ignore_eos=ignore_eos, stop=tuple(stop))

  def _score_rows(self, rows):
    """Per-token log-probabilities [len(rows), bucket] of token rows under the model
    (train.logprobs.token_logprobs: entry t is log p(row[t] | row[:t]), temperature 1), in
    calls of SCORE_ROWS rows by one of the engine's cache lengths (the shapes warm_up
    compiles)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from whale_jax.sampling import buckets  # pylint: disable=import-outside-toplevel
    length = buckets.bucket_for(self.sampler.cache_lengths,
                                   max(len(row) for row in rows))
    return np.concatenate([self._score_call(rows[i:i + SCORE_ROWS], length)
                           for i in range(0, len(rows), SCORE_ROWS)])

  def _score_call(self, rows, length):
    """_score_rows of at most SCORE_ROWS rows, padded to [SCORE_ROWS, length]: one call."""
    import jax  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    from whale_jax.train import logprobs as logprobs_lib  # pylint: disable=import-outside-toplevel
    tokens = np.zeros((SCORE_ROWS, length), np.int32)
    segment_ids = np.zeros((SCORE_ROWS, length), np.int32)
    for r, row in enumerate(rows):
      tokens[r, :len(row)] = row
      segment_ids[r, :len(row)] = 1
    batch = {"tokens": tokens, "segment_ids": segment_ids,
             "positions": np.broadcast_to(np.arange(length, dtype=np.int32), tokens.shape)}
    with self._score_lock:  # one compile per length bucket, made by warm_up
      if self._score_fn is None:
        config = self.sampler.config
        self._score_fn = jax.jit(
            lambda params, batch: logprobs_lib.token_logprobs(params, config, batch))
      return np.asarray(self._score_fn(self.sampler.params, batch))[:len(rows)]

  def choose(self, prompt, choice_ids):
    """(index of the best choice, its per-token logprobs, every choice's total)."""
    scores = self._score_rows([list(prompt) + list(ids) for ids in choice_ids])
    per_token = [[float(scores[r, len(prompt) + j]) for j in range(len(ids))]
                 for r, ids in enumerate(choice_ids)]
    totals = [sum(values) for values in per_token]
    best = max(range(len(totals)), key=lambda r: (totals[r], -r))
    return best, per_token[best], totals

  async def guided(self, prompt, choices, choice_ids):
    """The Completion of the best choice after prompt (see the module docstring)."""
    from whale_jax.sampling import api  # pylint: disable=import-outside-toplevel
    self._reserve(1)
    try:
      best, logprobs, _ = await asyncio.to_thread(self.choose, prompt, choice_ids)
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
        raise RequestError(400, str(error), "prompt") from None
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
      raise RequestError(400, str(error), "prompt") from None
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


def _prompts(body, tokenizer):
  """Token-id prompts of a /v1/completions body (str, [str], [int] or [[int]])."""
  prompt = body.get("prompt")
  expected = "a string, a list of strings, a list of token ids or a list of such lists"
  if isinstance(prompt, str):
    prompt = [prompt]
  elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
    prompt = [prompt]
  if not isinstance(prompt, list) or not prompt:
    raise _bad("prompt", expected, prompt)
  prompts = []
  for item in prompt:
    if isinstance(item, str):
      ids = tokenizer.encode(item)
    elif isinstance(item, list) and all(_is_int(t) for t in item):
      ids = list(item)
    else:
      raise _bad("prompt", expected, item)
    if not ids:
      raise RequestError(400, "'prompt' holds an empty prompt; a prompt needs at least one "
                         "token.", "prompt")
    bad = [t for t in ids if not 0 <= t < tokenizer.vocab_size]
    if bad and not isinstance(item, str):
      raise RequestError(400, f"'prompt' holds token ids {bad[:5]} outside the vocabulary "
                         f"[0, {tokenizer.vocab_size}).", "prompt")
    prompts.append(ids)
  return prompts


def _messages(body):
  """Chat messages with text content (content parts of type "text" joined)."""
  messages = body.get("messages")
  if not isinstance(messages, list) or not messages:
    raise _bad("messages", "a non-empty list of {\"role\", \"content\"} objects", messages)
  plain = []
  for i, message in enumerate(messages):
    if isinstance(message, dict) and isinstance(message.get("content"), list):
      parts = message["content"]
      if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(
          p.get("text"), str) for p in parts):
        raise RequestError(400, f"'messages[{i}].content' parts must be "
                           "{\"type\": \"text\", \"text\": ...}; other content types are not "
                           "supported.", f"messages[{i}].content")
      message = {**message, "content": "".join(p["text"] for p in parts)}
    if isinstance(message, dict):
      message = {"role": message.get("role"), "content": message.get("content")}
    plain.append(message)
  from whale_jax.tokenization import chat  # pylint: disable=import-outside-toplevel
  try:
    chat.validate_messages(plain)
  except ValueError as error:
    raise RequestError(400, str(error), "messages") from None
  return plain


def _guided_choice(body, tokenizer, prompt_lengths, max_context, params):
  """(choices, their token ids) of a body's guided_choice (or structured_outputs.choice), or
  None when it has neither."""
  choices, field = body.get("guided_choice"), "guided_choice"
  structured = body.get("structured_outputs")
  if structured is not None:
    if not (isinstance(structured, dict) and set(structured) == {"choice"}):
      raise _bad("structured_outputs", '{"choice": [...]} (of the structured outputs only '
                 "choice is supported)", structured)
    if choices is not None and choices != structured["choice"]:
      raise RequestError(400, "'guided_choice' and 'structured_outputs.choice' differ; send "
                         "one of them.", "structured_outputs")
    choices, field = structured["choice"], "structured_outputs.choice"
  if choices is None:
    return None
  if not (isinstance(choices, list) and 1 <= len(choices) <= MAX_GUIDED_CHOICES and
          all(isinstance(c, str) and c for c in choices)):
    raise _bad(field, f"a list of 1 to {MAX_GUIDED_CHOICES} non-empty strings",
               choices)
  if len(set(choices)) != len(choices):
    raise _bad(field, "a list of distinct strings", choices)
  if params.n != 1:
    raise RequestError(400, f"'n'={params.n} with '{field}': the choice is exact, so "
                       "ask for n=1.", "n")
  if len(prompt_lengths) != 1:
    raise RequestError(400, f"'{field}' takes one prompt; send one request per prompt.",
                       "prompt")
  choice_ids = [tokenizer.encode(c) for c in choices]
  for choice, ids in zip(choices, choice_ids):
    if not ids:
      raise _bad(field, "strings that each encode to at least one token", choice)
    if prompt_lengths[0] + len(ids) > max_context:
      raise RequestError(400, f"'{field}' {choice!r} ({len(ids)} tokens) after the "
                         f"{prompt_lengths[0]}-token prompt exceeds this server's context "
                         f"of {max_context} tokens.", field)
  return choices, choice_ids


def _check_fields(body, allowed):
  if not isinstance(body, dict):
    raise RequestError(400, "The request body must be a JSON object.")
  unknown = sorted(set(body) - set(allowed))
  if unknown:
    raise RequestError(400, f"Unknown field(s) {unknown}; this endpoint accepts: "
                       f"{', '.join(allowed)}.", unknown[0])


def _text(completion):
  """The reply text: the engine's text without a final stop string."""
  text = completion.text
  if isinstance(completion.stop_reason, str) and text.endswith(completion.stop_reason):
    text = text[:-len(completion.stop_reason)]
  return text


def _token_strings(tokenizer, token_ids):
  return [tokenizer.decode([t]) for t in token_ids]


def _deltas(tokenizer, token_ids, text):
  """text split into one piece per token (their concatenation is text)."""
  pieces, emitted = [], 0
  for i in range(len(token_ids)):
    prefix = tokenizer.decode(token_ids[:i + 1])  # may end in half a character, or go
    target = max(len(prefix), emitted) if text.startswith(prefix) else emitted  # past text
    pieces.append(text[emitted:target])
    emitted = target
  if pieces:
    pieces[-1] += text[emitted:]
  else:
    pieces = [text]
  return pieces


def _usage(prompts, completions):
  prompt_tokens = sum(len(p) for p in prompts)
  completion_tokens = sum(len(c.token_ids) for c in completions)
  return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
          "total_tokens": prompt_tokens + completion_tokens}


def _completion_logprobs(tokenizer, token_ids, logprobs, offset=0):
  """The completions endpoint's logprobs of tokens whose text starts at offset."""
  tokens = _token_strings(tokenizer, token_ids)
  offsets = []
  for token in tokens:
    offsets.append(offset)
    offset += len(token)
  return {"tokens": tokens, "token_logprobs": list(logprobs),
          "top_logprobs": [{t: p} for t, p in zip(tokens, logprobs)],
          "text_offset": offsets}


def _chat_logprobs(tokenizer, token_ids, logprobs):
  return {"content": [
      {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8")),
       "top_logprobs": []}
      for token, logprob in zip(_token_strings(tokenizer, token_ids), logprobs)]}


async def completions(server, body):
  """The reply dict of POST /v1/completions; streaming, its SSE chunks (an async iterator)."""
  _check_fields(body, COMPLETION_FIELDS)
  prompts = _prompts(body, server.tokenizer)
  params = server.sampling_params(body, [len(p) for p in prompts], 16, chat=False)
  logprobs = _get(body, "logprobs", 0, lambda v: _is_int(v) and 0 <= v <= 1,
                  "0 or 1 (only the sampled token's log-probability is available)")
  _get(body, "echo", False, lambda v: v is False, "false (echo is not supported)")
  _get(body, "suffix", None, lambda v: False, "null (suffix is not supported)")
  guided = _guided_choice(body, server.tokenizer, [len(p) for p in prompts],
                          server.max_context, params)
  if guided is not None:
    completions_list = [await server.guided(prompts[0], *guided)]
  elif body.get("stream"):
    return _streamed(server, body, prompts, params, logprobs, chat=False)
  else:
    completions_list = await server.generate(prompts, params)
  return _reply(server, body, prompts, completions_list, logprobs, chat=False)


async def chat_completions(server, body):
  """The reply dict of POST /v1/chat/completions; streaming, its SSE chunks (an async
  iterator; guided_choice: a list)."""
  _check_fields(body, CHAT_FIELDS)
  messages = _messages(body)
  tools = _get(body, "tools", None, lambda v: isinstance(v, list) and all(
      isinstance(t, dict) for t in v), "a list of tool (function schema) objects")
  _get(body, "tool_choice", None, lambda v: v in ("auto", "none"),
       "'auto' or 'none' (tool calls are not parsed)")
  prompt = server.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                tools=tools)
  params = server.sampling_params(body, [len(prompt)], server.default_max_tokens, chat=True)
  logprobs = _get(body, "logprobs", False, lambda v: isinstance(v, bool), "true or false")
  _get(body, "top_logprobs", 0, lambda v: v == 0,
       "0 (only the sampled token's log-probability is available)")
  guided = _guided_choice(body, server.tokenizer, [len(prompt)], server.max_context, params)
  if guided is not None:
    completions_list = [await server.guided(prompt, *guided)]
  elif body.get("stream"):
    return _streamed(server, body, [prompt], params, logprobs, chat=True)
  else:
    completions_list = await server.generate([prompt], params)
  return _reply(server, body, [prompt], completions_list, logprobs, chat=True)


def _reply(server, body, prompts, completions_list, want_logprobs, chat):
  """The reply dict of finished completions (or its SSE chunks when streaming)."""
  choices = []
  for index, completion in enumerate(completions_list):
    choice = {"index": index, "logprobs": None, "finish_reason": completion.finish_reason}
    if chat:
      choice["message"] = {"role": "assistant", "content": _text(completion)}
      if want_logprobs:
        choice["logprobs"] = _chat_logprobs(server.tokenizer, completion.token_ids,
                                            completion.logprobs)
    else:
      choice["text"] = _text(completion)
      if want_logprobs:
        choice["logprobs"] = _completion_logprobs(server.tokenizer, completion.token_ids,
                                                  completion.logprobs)
    if body.get("return_token_ids"):
      choice["token_ids"] = list(completion.token_ids)
      choice["prompt_token_ids"] = list(completion.prompt_token_ids)
    choices.append(choice)
  reply = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
           "object": "chat.completion" if chat else "text_completion",
           "created": int(time.time()), "model": server.model_name, "choices": choices,
           "usage": _usage(prompts, completions_list)}
  return _finish(server, body, reply, completions_list, chat)


def _finish(server, body, reply, completions_list, chat):
  server.count_served(reply["usage"])
  if not body.get("stream"):
    return reply
  return _stream_chunks(server.tokenizer, body, reply, completions_list, chat)


class _ChoiceText:
  """The text deltas of one streamed choice. Mid-stream it holds back the last characters
  (as many as the longest stop string, at least one: a stop string removed at the end, half
  a character, a tokenizer's space clean-up), so that the deltas add up to the reply's text."""

  def __init__(self, tokenizer, stop_strings):
    self.tokenizer = tokenizer
    self.holdback = max((len(s) for s in stop_strings), default=1)
    self.token_ids, self.emitted, self.offset = [], "", 0

  def delta(self, token_ids, completion):
    self.token_ids.extend(token_ids)
    if completion is not None:
      text, end = _text(completion), None
    else:
      text = self.tokenizer.decode(self.token_ids).rstrip("\ufffd")
      end = len(text) - self.holdback
      if not text.startswith(self.emitted):
        end = len(self.emitted)
    piece = text[len(self.emitted):end]
    self.emitted += piece
    return piece


def _streamed(server, body, prompts, params, want_logprobs, chat):
  """The SSE chunks of a generation, as an async iterator; submits it now (see
  Server.stream)."""
  events = server.stream(prompts, params)
  return _stream_generation(server, body, prompts, params, want_logprobs, chat, events)


async def _stream_generation(server, body, prompts, params, want_logprobs, chat, events):
  tokenizer = server.tokenizer
  base = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
          "created": int(time.time()), "model": server.model_name,
          "object": "chat.completion.chunk" if chat else "text_completion"}
  texts = [_ChoiceText(tokenizer, params.stop) for _ in range(len(prompts) * params.n)]
  finished = []
  if chat:
    for index in range(len(texts)):
      yield {**base, "choices": [{"index": index, "delta": {"role": "assistant", "content": ""},
                                  "logprobs": None, "finish_reason": None}]}
  try:
    async for index, token_ids, logprobs, completion in events:
      text = texts[index]
      entry = {"index": index, "logprobs": None,
               "finish_reason": None if completion is None else completion.finish_reason}
      if want_logprobs:
        if chat:
          entry["logprobs"] = _chat_logprobs(tokenizer, token_ids, logprobs)
        else:
          entry["logprobs"] = _completion_logprobs(tokenizer, token_ids, logprobs, text.offset)
          text.offset += sum(len(t) for t in entry["logprobs"]["tokens"])
      piece = text.delta(token_ids, completion)
      if chat:
        entry["delta"] = {"content": piece}
      else:
        entry["text"] = piece
      if completion is not None:
        finished.append(completion)
      yield {**base, "choices": [entry]}
  except Exception as error:  # pylint: disable=broad-except  # the 200 is already sent
    logging.exception("A streamed generation failed.")
    yield {"error": {"message": f"The generation failed: {error}", "type": "server_error",
                     "param": None, "code": 500}}
    return
  usage = _usage(prompts, finished)
  server.count_served(usage)
  if (body.get("stream_options") or {}).get("include_usage"):
    yield {**base, "choices": [], "usage": usage}


def _stream_chunks(tokenizer, body, reply, completions_list, chat):
  """The SSE chunks of a finished reply: per choice, one per token, then a finishing one."""
  base = {"id": reply["id"], "created": reply["created"], "model": reply["model"],
          "object": "chat.completion.chunk" if chat else "text_completion"}
  include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
  chunks = []
  for choice, completion in zip(reply["choices"], completions_list):
    index = choice["index"]
    text = choice["message"]["content"] if chat else choice["text"]
    pieces = _deltas(tokenizer, completion.token_ids, text)
    if chat:
      chunks.append({**base, "choices": [{"index": index, "delta": {"role": "assistant",
                                                                     "content": ""},
                                          "logprobs": None, "finish_reason": None}]})
    for position, piece in enumerate(pieces):
      last = position == len(pieces) - 1
      logprobs = None
      if choice["logprobs"] is not None and position < len(completion.token_ids):
        # Each chunk carries its token's entry; the last also carries any remaining ones.
        take = slice(position, None if last else position + 1)
        if chat:
          logprobs = {"content": choice["logprobs"]["content"][take]}
        else:
          logprobs = {key: value[take] for key, value in choice["logprobs"].items()}
      entry = {"index": index, "logprobs": logprobs,
               "finish_reason": choice["finish_reason"] if last else None}
      if chat:
        entry["delta"] = {"content": piece}
      else:
        entry["text"] = piece
      chunks.append({**base, "choices": [entry]})
  if include_usage:
    chunks.append({**base, "choices": [], "usage": reply["usage"]})
  return chunks


# ---- HTTP --------------------------------------------------------------------------------


def create_app(server):
  """The FastAPI app of a Server."""
  try:
    import fastapi  # pylint: disable=import-outside-toplevel
    from fastapi import responses  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ImportError(f"whale_jax.serve needs FastAPI and uvicorn: {SERVE_EXTRA}") from None

  application = fastapi.FastAPI(title="whale_jax.serve", docs_url=None, redoc_url=None)

  def error_reply(error):
    headers = {"Retry-After": "1"} if error.status == 429 else None
    return responses.JSONResponse(
        {"error": {"message": error.message, "type": error.kind, "param": error.param,
                   "code": error.status}}, status_code=error.status, headers=headers)

  async def handle(request, endpoint):
    try:
      raw = await request.body()
      try:
        body = json.loads(raw)
      except ValueError as error:
        raise RequestError(400, f"The request body is not valid JSON ({error}).") from None
      result = await endpoint(server, body)
    except RequestError as error:
      if error.status != 429:
        server.count("rejected_requests")
      return error_reply(error)
    if isinstance(result, dict):
      return responses.JSONResponse(result)

    async def events():
      if isinstance(result, list):  # a finished reply's chunks
        for chunk in result:
          yield f"data: {json.dumps(chunk)}\n\n"
      else:
        async for chunk in result:
          yield f"data: {json.dumps(chunk)}\n\n"
      yield "data: [DONE]\n\n"
    return responses.StreamingResponse(events(), media_type="text/event-stream")

  @application.post("/v1/completions")
  async def post_completions(request: fastapi.Request):
    return await handle(request, completions)

  @application.post("/v1/chat/completions")
  async def post_chat_completions(request: fastapi.Request):
    return await handle(request, chat_completions)

  @application.get("/v1/models")
  async def get_models():
    return {"object": "list", "data": [{"id": server.model_name, "object": "model",
                                        "created": server.created, "owned_by": "whale_jax",
                                        "max_model_len": server.max_context}]}

  @application.get("/health")
  async def get_health():
    return server.health()

  return application


_MODEL = flags.DEFINE_string("model", "embedded", "A Hugging Face model directory, 'embedded' "
                             "(the demo solver) or 'preset:NAME' (random weights).")
_TOKENIZER = flags.DEFINE_string("tokenizer", "", "Tokenizer ('byte' or a path); default: the "
                                 "model directory's.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Parameter dtype.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of a preset's random weights.")
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 0, "A preset's vocabulary size (0: the "
                                   "preset's).")
_SERVED_NAME = flags.DEFINE_string("served_model_name", "", "The name clients send as "
                                   "'model' (default: 'embedded', the directory's or preset's "
                                   "name).")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to listen on.")
_PORT = flags.DEFINE_integer("port", 8000, "Port to listen on (0: any free port; the chosen "
                             "one is printed).")
_MAX_PENDING = flags.DEFINE_integer("max_pending_requests", 256, "Prompts in the engine or "
                                    "waiting for it; more get HTTP 429.")
_MAX_SLOTS = flags.DEFINE_integer("max_slots", 64, "Samples decoded at once (engine slots).")
_STEPS_PER_CALL = flags.DEFINE_integer("steps_per_call", 16, "Decode steps per device call: "
                                       "a streamed choice gets a chunk after each call.")
_MAX_CONTEXT = flags.DEFINE_integer("max_cache_length", 0, "Longest prompt + max_tokens (0: "
                                    "the model's max_position_embeddings).")
_DEFAULT_MAX_TOKENS = flags.DEFINE_integer("default_max_tokens", 1024, "max_tokens of chat "
                                           "requests that give none.")
_BUCKET_RATIO = flags.DEFINE_integer("bucket_ratio", 8, "Ratio of neighbouring slot batch "
                                     "sizes and cache lengths, whose grid start-up compiles: "
                                     "larger starts faster and pads more (>= 2).")
_COMPILATION_CACHE_DIR = flags.DEFINE_string(
    "compilation_cache_dir",
    os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "whale_jax", "jax"),
    "Directory where compiled programs persist (JAX's persistent compilation cache), so that "
    "a restart warms up from it in seconds; '' turns it off.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  try:
    import uvicorn  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise SystemExit(f"whale_jax.serve needs FastAPI and uvicorn: {SERVE_EXTRA}") from None
  for name, value in (("max_pending_requests", _MAX_PENDING.value),
                      ("max_slots", _MAX_SLOTS.value),
                      ("steps_per_call", _STEPS_PER_CALL.value),
                      ("default_max_tokens", _DEFAULT_MAX_TOKENS.value)):
    if value < 1:
      raise app.UsageError(f"--{name}={value} must be >= 1.")
  if _BUCKET_RATIO.value < 2:
    raise app.UsageError(f"--bucket_ratio={_BUCKET_RATIO.value} must be >= 2 (2: the finest "
                         "grid, most programs to compile; 8: the default).")
  # Bind first: a port in use fails before the model loads.
  listener = socket.socket(socket.AF_INET6 if ":" in _HOST.value else socket.AF_INET)
  listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  try:
    listener.bind((_HOST.value, _PORT.value))
  except OSError as error:
    raise SystemExit(f"--host={_HOST.value} --port={_PORT.value}: cannot listen there "
                     f"({error}); pick another --port (0 = any free one).") from None
  import jax  # pylint: disable=import-outside-toplevel
  from whale_jax.sampling import Sampler  # pylint: disable=import-outside-toplevel
  from whale_jax.sampling import buckets  # pylint: disable=import-outside-toplevel
  if _COMPILATION_CACHE_DIR.value:  # every program, however small or quick to compile
    jax.config.update("jax_compilation_cache_dir",
                      os.path.expanduser(_COMPILATION_CACHE_DIR.value))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  compilation_counter()  # from here on, every compilation (or load from the cache) is counted
  config, params, tokenizer, name = load_model(_MODEL.value, _TOKENIZER.value, _DTYPE.value,
                                               _SEED.value, _VOCAB_SIZE.value)
  max_cache_length = _MAX_CONTEXT.value or config.max_position_embeddings
  sampler = Sampler(
      config, params, tokenizer=tokenizer, max_slots=_MAX_SLOTS.value,
      steps_per_call=_STEPS_PER_CALL.value, max_cache_length=max_cache_length,
      batch_sizes=buckets.geometric_buckets(1, _MAX_SLOTS.value, _BUCKET_RATIO.value),
      cache_lengths=buckets.geometric_buckets(buckets.MIN_LENGTH_BUCKET, max_cache_length,
                                              _BUCKET_RATIO.value, multiple=16))
  server = Server(sampler, tokenizer, _SERVED_NAME.value or name, _MAX_PENDING.value,
                  _DEFAULT_MAX_TOKENS.value)
  seconds, programs = server.warm_up()
  print(f"whale_jax.serve: warmed {programs} programs ({len(sampler.batch_sizes)} slot "
        f"batches {list(sampler.batch_sizes)} x {len(sampler.cache_lengths)} cache lengths "
        f"{list(sampler.cache_lengths)}, and guided_choice scoring) in {seconds:.1f} s",
        flush=True)
  listener.listen(2048)  # connections wait in the backlog until uvicorn accepts them
  host, port = listener.getsockname()[:2]
  print(f"whale_jax.serve: model {server.model_name!r} on http://{host}:{port}/v1",
        flush=True)
  uvicorn_server = uvicorn.Server(uvicorn.Config(create_app(server), log_level="warning",
                                                 timeout_graceful_shutdown=5))
  try:
    uvicorn_server.run(sockets=[listener])
  finally:
    sampler.close()
    logging.info("whale_jax.serve: stopped after %d requests.", server.counts["served_requests"])


if __name__ == "__main__":
  app.run(main)
