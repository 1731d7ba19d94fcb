"""The engine's host-side slot bookkeeping: requests, their samples, and the padded arrays
that go with them into the slot programs (programs.py), as plain functions.

A Request is one submitted prompt with its params.n Samples; a Sample occupies one decode slot
while it generates. A PrefillRow is one distinct prompt of an admission round: the requests
with that prompt share its prefill row.
"""
import concurrent.futures
import dataclasses
import time

from absl import logging
import numpy as np

from whale_jax.sampling import api
from whale_jax.sampling import decode
from whale_jax.sampling import stops

NO_PAGE = 2**30  # a page index past any pool: gathers read zeros, saves are dropped


@dataclasses.dataclass
class Request:
  prompt: tuple
  params: api.SamplingParams
  request_key: int
  stop_ids: tuple
  future: concurrent.futures.Future
  submitted_seconds: float
  samples: list = dataclasses.field(default_factory=list)
  on_tokens: object = None  # see engine.Engine.submit


@dataclasses.dataclass
class PrefillRow:
  """One distinct prompt of an admission round: its requests share one prefill row."""
  prompt: tuple
  requests: list
  pages: list  # pool pages of its cached prefix

  def prefix_length(self, block_size):
    return len(self.pages) * block_size


@dataclasses.dataclass
class Sample:
  request: Request
  index: int
  watcher: stops.StopStringWatcher | None
  slot: int = -1
  cacheable: bool = True  # its KV came from the weights the prefix cache holds
  token_ids: list = dataclasses.field(default_factory=list)
  logprobs: list = dataclasses.field(default_factory=list)
  completion: api.Completion | None = None
  reported: int = 0  # tokens handed to request.on_tokens so far

  @property
  def cache_length(self):  # positions written: the prompt but its last token, one per step
    return len(self.request.prompt) - 1 + len(self.token_ids)

  @property
  def final_cache_length(self):
    return len(self.request.prompt) - 1 + self.request.params.max_tokens


def new_request(prompt_ids, params, request_key, on_tokens, *, tokenizer, vocab_size,
                max_cache_length, max_slots, eos_ids, num_stop_ids):
  """A checked Request with its params.n Samples, or a TypeError / ValueError naming the
  bad value and what to change (the engine's limits are its keyword arguments)."""
  params = api.SamplingParams() if params is None else params
  if not isinstance(params, api.SamplingParams):
    raise TypeError(f"params must be a whale_jax.sampling.SamplingParams; got "
                    f"{type(params).__name__}.")
  if isinstance(prompt_ids, str):
    if tokenizer is None:
      raise TypeError("A text prompt needs a tokenizer: build the Sampler with "
                      "tokenizer=..., or pass token ids.")
    prompt_ids = tokenizer.encode(prompt_ids)
  try:
    prompt = tuple(int(i) for i in prompt_ids)
  except (TypeError, ValueError):
    raise TypeError(f"prompt_ids must be a sequence of ints; got {prompt_ids!r:.80}.") from None
  if not prompt:
    raise ValueError("prompt_ids is empty; a prompt needs at least one token (e.g. BOS).")
  bad = [i for i in prompt if not 0 <= i < vocab_size]
  if bad:
    raise ValueError(f"prompt_ids contains {bad[:5]}, outside the vocabulary "
                     f"[0, {vocab_size}).")
  if len(prompt) + params.max_tokens > max_cache_length:
    raise ValueError(
        f"A prompt of {len(prompt)} tokens plus max_tokens={params.max_tokens} exceeds "
        f"max_cache_length={max_cache_length}. Lower max_tokens, shorten the prompt, "
        "or build the sampler with a larger max_cache_length.")
  if params.n > max_slots:
    raise ValueError(f"SamplingParams.n={params.n} exceeds max_slots={max_slots}; "
                     "lower n or build the sampler with more max_slots.")
  for name, value in (("seed", params.seed), ("request_key", request_key)):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not (
        0 <= value < 2**64):
      raise ValueError(f"{name}={value!r} must be an integer in [0, 2**64).")
  if params.stop and tokenizer is None:
    raise ValueError(f"SamplingParams.stop={params.stop!r} needs a tokenizer to read text; "
                     "build the sampler with tokenizer=... or use stop_token_ids.")
  stop_ids = tuple(dict.fromkeys((() if params.ignore_eos else eos_ids) +
                                 params.stop_token_ids))
  if len(stop_ids) > num_stop_ids:
    raise ValueError(f"{len(stop_ids)} stop token ids (end-of-sequence ids included) exceed "
                     f"num_stop_ids={num_stop_ids}; build the sampler with a larger "
                     "num_stop_ids.")
  if on_tokens is not None and not callable(on_tokens):
    raise TypeError(f"on_tokens must be callable or None; got {type(on_tokens).__name__}.")
  request = Request(prompt, params, int(request_key), stop_ids, concurrent.futures.Future(),
                    time.perf_counter(), on_tokens=on_tokens)
  request.samples = [Sample(request, i, stops.StopStringWatcher(tokenizer, params.stop)
                            if params.stop else None) for i in range(params.n)]
  return request


def cache_length(slots, layout):
  """The slots' cache length (positions per slot)."""
  cache = slots["cache"]
  return cache["value"][0].shape[2] if layout.unrolled else cache["value"].shape[2]


def empty_insert(batch_size, num_stop_ids):
  """insert()'s arrays for as many samples as slots, all padding (slot batch_size)."""
  return {"slot": np.full((batch_size,), batch_size, np.int32),
          "row": np.zeros((batch_size,), np.int32), "token": np.zeros((batch_size,), np.int32),
          "rng": np.zeros((batch_size, 2), np.uint32),
          "remaining": np.zeros((batch_size,), np.int32),
          "temperature": np.ones((batch_size,), np.float32),
          "top_k": np.zeros((batch_size,), np.int32),
          "top_p": np.ones((batch_size,), np.float32),
          "stop_ids": np.full((batch_size, num_stop_ids), decode.NO_TOKEN, np.int32)}


def fill_insert(new, m, slot, row, sample, rng):
  """Writes sample's start (in slot, from prefill row `row`, drawing from rng) as entry m of
  empty_insert()'s arrays."""
  request = sample.request
  new["slot"][m], new["row"][m], new["token"][m] = slot, row, request.prompt[-1]
  new["rng"][m] = rng
  new["remaining"][m] = request.params.max_tokens
  new["temperature"][m] = request.params.temperature
  new["top_k"][m] = request.params.top_k
  new["top_p"][m] = request.params.top_p
  new["stop_ids"][m, :len(request.stop_ids)] = request.stop_ids


def save_arrays(writes, count):
  """(rows, blocks, pages) of a block save: writes' (slot, block, page) triples padded to
  count with saves that are dropped."""
  rows = np.zeros((count,), np.int32)
  blocks = np.zeros((count,), np.int32)
  pages = np.full((count,), NO_PAGE, np.int32)
  for m, (row, block, page) in enumerate(writes):
    rows[m], blocks[m], pages[m] = row, block, page
  return rows, blocks, pages


def report_tokens(sample):
  """Hands a sample's newly settled tokens (and its Completion once done) to on_tokens."""
  request = sample.request
  if request.on_tokens is None or (sample.completion is None and
                                   len(sample.token_ids) == sample.reported):
    return
  start, end = sample.reported, len(sample.token_ids)
  sample.reported = end
  try:
    request.on_tokens(sample.index, sample.token_ids[start:end],
                      sample.logprobs[start:end], sample.completion)
  except Exception:  # pylint: disable=broad-except  # a caller's bug must not stop decoding
    logging.exception("on_tokens of a request raised; it gets no more progress calls.")
    request.on_tokens = None


def finish_if_done(sample, new_count, tokenizer):
  """Sets sample.completion if the sample has ended (by a stop token, its length, or a stop
  string seen on the host). Returns (done, cancel): cancel when a stop string ended it while
  the device still generates in its slot."""
  request, params = sample.request, sample.request.params
  ids = sample.token_ids
  ended_by_token = bool(ids) and new_count > 0 and ids[-1] in request.stop_ids
  ended_by_length = len(ids) >= params.max_tokens
  finish = ("stop", ids[-1]) if ended_by_token else ("length", None) if ended_by_length \
      else None
  if sample.watcher is not None:
    found = sample.watcher.check(ids)
    if found is not None:
      keep, text, stop = found
      del sample.token_ids[keep:], sample.logprobs[keep:]
      sample.completion = api.Completion(list(sample.token_ids), list(sample.logprobs), text,
                                         "stop", list(request.prompt), stop)
      return True, finish is None
  if finish is None:
    return False, False
  text = stops.completion_text(tokenizer, ids, ended_by_token)
  sample.completion = api.Completion(list(ids), list(sample.logprobs), text, finish[0],
                                     list(request.prompt), finish[1])
  return True, False
