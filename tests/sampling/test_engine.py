"""The engine: continuous batching, shared prefill, compilation counts, weight updates, errors."""
import threading
import time
import types

import numpy as np
import pytest

from tests.sampling import reference
from tests.sampling import tiny_model
from whale_jax.sampling import decode as decode_lib
from whale_jax.sampling import Sampler
from whale_jax.sampling import engine as engine_lib
from whale_jax.sampling import SamplingParams

CONFIG = tiny_model.CONFIG
STEPS = tiny_model.STEPS_PER_CALL
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def params():
  return tiny_model.params(seed=1)


@pytest.fixture(scope="module")
def sampler(params):
  with Sampler(CONFIG, params, max_slots=8, steps_per_call=STEPS) as sampler:
    yield sampler


def test_short_requests_pass_a_long_one_through_freed_slots(params):
  finished = {}
  with Sampler(CONFIG, params, max_slots=2, steps_per_call=STEPS) as sampler:
    long = sampler.submit([5, 6], GREEDY.replace(max_tokens=60))
    time.sleep(0.05)
    shorts = [sampler.submit([7 + i], GREEDY.replace(max_tokens=4), request_key=i)
              for i in range(4)]
    for name, future in [("long", long)] + [(f"short{i}", f) for i, f in enumerate(shorts)]:
      future.add_done_callback(lambda _, name=name: finished.setdefault(name, time.monotonic()))
    long.result()
    for future in shorts:
      future.result()
    metrics = sampler.metrics()
  # Two slots: the long request holds one while the four short ones take turns in the other.
  assert all(finished[f"short{i}"] < finished["long"] for i in range(4)), finished
  assert metrics["completed_requests"] == 5
  assert metrics["generated_tokens"] == 60 + 4 * 4
  assert 0.5 < metrics["slot_occupancy"] <= 1.0


def test_calls_shorten_while_requests_arrive_and_grow_back(params):
  """Requests arriving during a decode call halve the next call's steps, down to
  MIN_STEPS_PER_CALL; a call with no arrivals doubles them, up to steps_per_call. A wrapper
  around the decode program submits a one-token request during each of the first three
  calls, as clients between tool calls do; the long request's tokens stay the reference's."""
  long_prompt = [11, 12, 13]
  expected = reference.greedy(params, CONFIG, long_prompt, 60)
  steps_seen, arrivals = [], [True, True, True]
  with Sampler(CONFIG, params, max_slots=8, steps_per_call=16) as sampler:
    programs = sampler._functions
    others = []

    def decode(*args):
      steps_seen.append(int(args[4]))  # (params, layers, slots, cancel, num_steps, stop_early)
      if arrivals and arrivals.pop(0):
        others.append(sampler.submit([30 + len(others)], GREEDY.replace(max_tokens=1),
                                     request_key=len(others) + 1))
      return programs.decode(*args)

    sampler._functions = types.SimpleNamespace(**{**vars(programs), "decode": decode})
    tokens = sampler.submit(long_prompt, GREEDY.replace(max_tokens=60)).result()[0].token_ids
    for future in others:
      assert len(future.result()[0].token_ids) == 1
  assert tokens == expected
  assert engine_lib.MIN_STEPS_PER_CALL == 4
  assert steps_seen[:6] == [16, 8, 4, 4, 8, 16], steps_seen
  assert set(steps_seen[6:]) <= {16}, steps_seen


@pytest.mark.parametrize("prefix_cache_bytes", [None, 0])
def test_requests_arriving_during_a_prefill_join_the_first_decode_call(params,
                                                                       prefix_cache_bytes):
  """A request submitted while the first one's prefill runs (a wrapper around the prefill
  program submits it, as an agent episode returning from its tool call a moment after
  another does) is admitted before the decode call: the first call generates in both slots.
  Without it the second would wait a whole call (12 steps) for a slot batch of one; each
  request's tokens stay the reference's."""
  prompts = [[11, 12, 13], [21, 22]]
  expected = [reference.greedy(params, CONFIG, prompt, 12) for prompt in prompts]
  rows_per_call, second = [], []
  with Sampler(CONFIG, params, max_slots=8, steps_per_call=16,
               prefix_cache_bytes=prefix_cache_bytes) as sampler:
    programs = sampler._functions
    name = "prefill" if prefix_cache_bytes == 0 else "prefill_prefix"

    def prefill(*args):
      if not second:
        second.append(sampler.submit(prompts[1], GREEDY, request_key=1))
      return getattr(programs, name)(*args)

    def decode(*args):
      slots, tokens, logprobs = programs.decode(*args)
      rows_per_call.append(int((np.asarray(tokens) != decode_lib.NO_TOKEN).any(1).sum()))
      return slots, tokens, logprobs

    sampler._functions = types.SimpleNamespace(**{**vars(programs), name: prefill,
                                                  "decode": decode})
    first = sampler.submit(prompts[0], GREEDY).result()[0].token_ids
    assert [first, second[0].result()[0].token_ids] == expected
  assert rows_per_call == [2], rows_per_call


def test_an_idle_engine_waits_for_the_rest_of_a_burst_like_the_last_one(params):
  """Four agent episodes come back from their tool calls tens of milliseconds apart, turn
  after turn. Turn 1: the first request wakes the idle engine and is prefilled alone (the
  wrapper makes a prefill take 0.6 s, as a large model's does; the other three join before
  the decode call). The engine remembers that burst (4 requests over ~0.12 s), so in turn 2
  it waits for all four and prefills them in one call; without the wait that call has one
  row again. A lone request after that waits at most the bound (BURST_SPAN_FACTOR x the last
  burst's span, BURST_WAIT_FRACTION x its first round), and the next lone one not at all.
  Tokens stay the reference's."""
  prompts = [[11 + i, 12, 13] for i in range(4)]
  expected = [reference.greedy(params, CONFIG, prompt, 12) for prompt in prompts]
  prefill_rows = []  # per prefill call: rows with something to compute
  with Sampler(CONFIG, params, max_slots=8, steps_per_call=16,
               prefix_cache_bytes=0) as sampler:
    programs = sampler._functions

    def prefill(weights, tokens, lengths):
      prefill_rows.append(int((np.asarray(lengths) > 0).sum()))
      time.sleep(0.6)
      return programs.prefill(weights, tokens, lengths)

    sampler._functions = types.SimpleNamespace(**{**vars(programs), "prefill": prefill})
    turns = []
    for spacing in (0.04, 0.02):
      del prefill_rows[:]
      futures = []
      for key, prompt in enumerate(prompts):
        futures.append(sampler.submit(prompt, GREEDY, request_key=key))
        time.sleep(spacing)
      assert [future.result()[0].token_ids for future in futures] == expected
      turns.append(list(prefill_rows))
    size, span, first_round = sampler._last_burst
    bound = min(engine_lib.BURST_SPAN_FACTOR * span, engine_lib.BURST_WAIT_FRACTION * first_round)
    waits = []
    for _ in range(2):
      before = sampler.metrics()["burst_wait_seconds"]
      lone = sampler.submit(prompts[0], GREEDY).result()[0].token_ids
      waits.append(sampler.metrics()["burst_wait_seconds"] - before)
      assert lone == expected[0]
  assert turns[0][0] == 1, turns  # the setup: turn 1's first request is prefilled alone
  assert turns[1] == [4], turns
  assert size == 4 and span >= 0.06, (size, span)  # turn 2's: 3 spacings of 0.02 s
  assert 0.0 < waits[0] <= bound + 0.25, (waits, bound)
  assert waits[1] == 0.0, waits


def test_an_empty_engine_starts_fresh_slots_instead_of_relaying_empty_ones(params):
  """After eight samples finish (slot batch 8), a lone request gets new slots of its own
  shape (one init call), not copies of eight empty slots down through 4, 2 and 1 (three
  relayout calls); with a sample active, shrinking still relays it. Counted by wrappers
  around the programs; tokens stay the reference's."""
  calls = []
  with Sampler(CONFIG, params, max_slots=8, steps_per_call=STEPS) as sampler:
    programs = sampler._functions

    def counted(name):
      def call(*args):
        calls.append(name)
        return getattr(programs, name)(*args)
      return call

    sampler._functions = types.SimpleNamespace(
        **{**vars(programs), "init": counted("init"), "relayout": counted("relayout")})
    sampler.generate([[20 + i] for i in range(8)], GREEDY)
    del calls[:]
    lone = sampler.submit([11, 12, 13], GREEDY).result()[0].token_ids
    assert calls == ["init"], calls
    # One long sample with seven short ones: once they finish, the batch shrinks by relayout.
    del calls[:]
    futures = sampler.submit_many([([5, 6], GREEDY.replace(max_tokens=40), 0)] +
                                  [([30 + i], GREEDY.replace(max_tokens=2), i + 1)
                                   for i in range(7)])
    long = futures[0].result()[0].token_ids
  assert lone == reference.greedy(params, CONFIG, [11, 12, 13], 12)
  assert long == reference.greedy(params, CONFIG, [5, 6], 40)
  assert "relayout" in calls, calls


def test_batch_shrinks_when_few_samples_remain_and_results_hold(params):
  """One 40-token request and seven 3-token ones, admitted together into 8 slots: the short
  ones finish in the first decode call (8 steps). Without shrinking, the long one's other 4
  calls would also step 8 slots: 61 tokens over 5 x 8 x 8 = 320 slot steps (occupancy 0.19).
  Shrunk to one slot: 64 + 4 x 8 = 96 slot steps (0.64). Counted by the engine's own slot
  steps, not by compilations, which engines with the same settings share."""
  long_request = ([11, 12, 13], GREEDY.replace(max_tokens=40))
  expected = reference.greedy(params, CONFIG, long_request[0], 40)
  with Sampler(CONFIG, params, max_slots=8, steps_per_call=STEPS) as sampler:
    futures = sampler.submit_many(
        [long_request] + [([20 + i], GREEDY.replace(max_tokens=3), i) for i in range(7)])
    assert futures[0].result()[0].token_ids == expected
    for future in futures[1:]:
      assert len(future.result()[0].token_ids) == 3
    metrics = sampler.metrics()
  assert metrics["generated_tokens"] == 40 + 7 * 3
  assert metrics["slot_occupancy"] > 0.5, metrics


def test_n_samples_share_one_prefill(sampler):
  before = sampler.metrics()["prefill_tokens"]
  outs = sampler.generate([list(range(10, 20))], SamplingParams(max_tokens=6, n=4, seed=2))
  assert sampler.metrics()["prefill_tokens"] - before == 9  # the prompt but its last token, once
  assert len(outs) == 4 and len({tuple(out.token_ids) for out in outs}) > 1


def test_same_shapes_compile_once(sampler):
  prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
  sampler.generate(prompts, GREEDY)
  compiled = sampler.metrics()["compilations"]
  sampler.generate(prompts, GREEDY.replace(temperature=0.9, top_p=0.8, seed=4))
  sampler.generate([[9, 9, 9, 9], [1, 2]], GREEDY)  # other lengths in the same buckets
  assert sampler.metrics()["compilations"] == compiled


def test_update_params_switches_weights_without_copying(params, sampler):
  prompt = [3, 1, 4, 1, 5]
  assert sampler.generate([prompt], GREEDY)[0].token_ids == reference.greedy(
      params, CONFIG, prompt, 12)
  other = tiny_model.params(seed=2)
  sampler.update_params(other)
  try:
    assert sampler.params is other
    assert sampler.generate([prompt], GREEDY)[0].token_ids == reference.greedy(
        other, CONFIG, prompt, 12)
  finally:
    sampler.update_params(params)
  with pytest.raises(ValueError, match="differ in tree, shapes or dtypes"):
    sampler.update_params({**params, "embedding": params["embedding"][:, :16]})


def test_metrics_report_rates_waits_and_compilations(sampler):
  sampler.generate([[1, 2, 3]] * 3, GREEDY)
  metrics = sampler.metrics()
  assert metrics["tokens_per_second"] > 0
  assert 0 <= metrics["mean_queue_wait_seconds"] <= metrics["max_queue_wait_seconds"]
  assert metrics["compilations"] == sum(metrics["compilations_by_function"].values()) > 0
  assert metrics["queued_requests"] == 0


def test_concurrent_submits_all_resolve(sampler):
  results = [None] * 12

  def worker(i):
    results[i] = sampler.submit([i + 1, i + 2], GREEDY.replace(max_tokens=3 + i % 4),
                                request_key=i).result()

  threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert [len(r[0].token_ids) for r in results] == [3 + i % 4 for i in range(12)]


def test_on_tokens_reports_each_decode_call_and_ends_with_the_completion(sampler):
  """Reports come per decode call (at most steps_per_call tokens), add up to the sample's
  tokens and logprobs, and the last one carries the Completion; a raising callback neither
  stops the request nor gets called again."""
  reports = []
  params = GREEDY.replace(max_tokens=3 * STEPS + 2, n=2)
  future = sampler.submit([3, 4], params, request_key=5,
                                 on_tokens=lambda *report: reports.append(report))
  completions = future.result()
  for index, completion in enumerate(completions):
    mine = [r for r in reports if r[0] == index]
    assert len(mine) >= 4 and all(0 < len(ids) <= STEPS for _, ids, _, _ in mine)
    assert [t for _, ids, _, _ in mine for t in ids] == completion.token_ids
    assert [p for _, _, lps, _ in mine for p in lps] == completion.logprobs
    assert [c is None for *_, c in mine] == [True] * (len(mine) - 1) + [False]
    assert mine[-1][3].token_ids == completion.token_ids
  calls = []

  def broken(*report):
    calls.append(report)
    raise RuntimeError("a caller's bug")
  again = sampler.submit([3, 4], params, request_key=5, on_tokens=broken).result()
  assert len(calls) == 1  # the request gets no more calls, from either sample
  assert [c.token_ids for c in again] == [c.token_ids for c in completions]
  with pytest.raises(TypeError, match="on_tokens must be callable"):
    sampler.submit([1], on_tokens=3)


@pytest.mark.parametrize("call, error, message", [
    (lambda s: s.submit([]), ValueError, "prompt_ids is empty"),
    (lambda s: s.submit([5, 268]), ValueError, r"\[268\], outside the vocabulary \[0, 268\)"),
    (lambda s: s.submit("hi"), TypeError, "needs a tokenizer"),
    (lambda s: s.submit([1] * 200, SamplingParams(max_tokens=100)), ValueError,
     "exceeds max_cache_length=256"),
    (lambda s: s.submit([1], SamplingParams(n=9)), ValueError, "n=9 exceeds max_slots=8"),
    (lambda s: s.submit([1], {"max_tokens": 3}), TypeError, "SamplingParams"),
    (lambda s: s.submit([1], SamplingParams(stop=("x",))), ValueError, "needs a tokenizer"),
    (lambda s: s.submit([1], SamplingParams(seed=-1)), ValueError, "seed=-1"),
    (lambda s: s.generate([[1], [2]], request_keys=[0]), ValueError, "one per prompt"),
    (lambda s: s.generate(["text"]), TypeError, "needs a tokenizer"),
])
def test_bad_requests_raise_naming_what_to_change(sampler, call, error, message):
  with pytest.raises(error, match=message):
    call(sampler)


def test_closed_engine_refuses_new_work(params):
  sampler = Sampler(CONFIG, params, max_slots=2)
  sampler.close()
  with pytest.raises(RuntimeError, match="closed"):
    sampler.submit([1])
