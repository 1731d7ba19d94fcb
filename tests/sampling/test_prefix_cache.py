"""The prefix cache: its index (by hand), and the cached engine against the uncached one.

Cached and uncached engines serve the same calls in the same order, so the only difference
between them is where a prompt's prefix KV comes from (the block pool or a fresh prefill).
Every prefill computes a position with the same operations (fixed-size chunks, with or
without a cached prefix), so KV cached from prompts is bitwise what a fresh prefill makes:
tokens and float32 logprobs must be identical; that is the engine's default, which caches
prompt blocks only. KV cached from completions (prefix_cache_completions=True) was made by decode
steps, whose products have other shapes than a prefill's and so round differently; there
tokens must be identical and logprobs within 1e-6 of each other relative to their size
(|a - b| <= 1e-6 * max(1, |b|)). That is the engine's own rounding noise: the uncached engine
serving the same calls with one slot instead of eight differs by up to 2.4e-6 in a logprob
near -5 (5e-7 relative), and the cache's difference is of that size (docs/design.md).
"""
import jax
import numpy as np
import pytest

from tests.sampling import tiny_model
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.sampling import prefix_cache

CONFIG = tiny_model.CONFIG
STEPS = tiny_model.STEPS_PER_CALL
TOLERANCE = 1e-6  # relative, where completions' decode-step KV is cached; else 0 (bitwise)


@pytest.fixture(scope="module")
def params():
  return tiny_model.params(seed=3)


def _assert_same(cached, uncached, tolerance=TOLERANCE):
  assert len(cached) == len(uncached)
  for a, b in zip(cached, uncached):
    assert a.token_ids == b.token_ids
    assert a.finish_reason == b.finish_reason
    a, b = np.asarray(a.logprobs), np.asarray(b.logprobs)
    assert np.all(np.abs(a - b) <= tolerance * np.maximum(1.0, np.abs(b))), np.max(
        np.abs(a - b) / np.maximum(1.0, np.abs(b)))


def _sampler(config, params, max_slots=8, **options):
  """A Sampler on a coarse bucket grid (one slot batch, cache lengths 64 and 256): every
  engine here compiles a few programs instead of the default grid's, and a conversation that
  outgrows 64 positions still moves its slots to the longer cache."""
  return Sampler(config, params, max_slots=max_slots, steps_per_call=STEPS,
                 batch_sizes=(max_slots,), cache_lengths=(64, 256), **options)


def test_index_finds_longest_cached_run_and_evicts_least_recent_leaf():
  index = prefix_cache.PrefixIndex(block_size=2, max_blocks=4, min_blocks=2)
  assert index.insert([1, 2, 3, 4, 5], set()) == [(0, 0), (1, 1)]  # the 5 is a partial block
  assert index.pool_blocks == 2
  assert index.lookup([1, 2, 3, 4, 9, 9]) == [0, 1]
  assert index.lookup([1, 2, 7, 7]) == [0]
  assert index.lookup([2, 1]) == []
  assert index.insert([1, 2, 7, 7], set()) == [(1, 2)]  # shares block 0; the pool doubled
  assert index.pool_blocks == 4
  assert index.insert([5, 5], set()) == [(0, 3)]
  index.lookup([1, 2, 3, 4])  # [1, 2] [7, 7] is now the least recently used leaf
  assert index.insert([6, 6], set()) == [(0, 2)] and index.evictions == 1
  assert index.lookup([1, 2, 7, 7]) == [0]
  # Pinned pages are never evicted: [5, 5] and [6, 6] pinned, [1, 2] [3, 4] the only other
  # leaf; its parent [1, 2] becomes a leaf only after it goes, and [9, 9] [8, 8] then takes it.
  assert index.insert([9, 9, 8, 8], {3, 2}) == [(0, 1), (1, 0)]
  assert index.lookup([1, 2]) == [] and index.lookup([9, 9, 8, 8]) == [1, 0]
  assert index.insert([4, 4], {0, 1, 2, 3}) == []  # everything pinned: nothing cached
  with pytest.raises(ValueError, match="max_blocks=0"):
    prefix_cache.PrefixIndex(block_size=2, max_blocks=0)


def test_pool_grows_only_when_the_block_it_would_evict_was_reused():
  """Sequences that share nothing evict at the first pool's size; once the least recently
  used leaf has served a hit, the pool doubles instead (up to max_blocks)."""
  index = prefix_cache.PrefixIndex(block_size=2, max_blocks=8, min_blocks=2)
  assert index.insert([1, 1], set()) == [(0, 0)]
  assert index.insert([2, 2], set()) == [(0, 1)]
  assert index.insert([3, 3], set()) == [(0, 0)]  # [1, 1] never reused: evicted
  assert index.pool_blocks == 2 and index.evictions == 1
  assert index.lookup([2, 2, 5]) == [1]  # [2, 2] reused, and now the most recent
  assert index.insert([4, 4], set()) == [(0, 0)]  # the LRU leaf [3, 3] was never reused
  assert index.lookup([4, 4]) == [0]  # now both leaves have served a hit
  assert index.insert([6, 6], set()) == [(0, 2)]  # so the pool doubles instead
  assert index.pool_blocks == 4 and index.evictions == 2


def test_group_of_eight_prefills_once_and_matches_uncached(params):
  rng = np.random.default_rng(0)
  prompt = rng.integers(3, CONFIG.vocab_size, 41).tolist()
  sampling = SamplingParams(max_tokens=12, seed=5)
  outputs, metrics = [], []
  for cache_bytes in (None, 0):
    with _sampler(CONFIG, params, max_slots=16, prefix_cache_bytes=cache_bytes) as sampler:
      # Eight requests of one prompt (one sample each, as G episodes send), then one n=8 one.
      group = sampler.generate([prompt] * 8, sampling, request_keys=list(range(8)))
      group += sampler.generate([prompt], sampling.replace(n=8), request_keys=[9])
      outputs.append(group)
      metrics.append(sampler.metrics())
  _assert_same(*outputs, tolerance=0.0)  # only prompt blocks are read: bitwise
  assert len({tuple(out.token_ids) for out in outputs[0]}) > 1  # the samples differ
  # Uncached: the first call prefills its 40 positions once for all eight (identical prompts
  # admitted together), and once more in the second call. Cached: the second call reads the
  # two full 16-token blocks and computes the last 8 positions.
  assert metrics[1]["prefill_tokens"] == 40 + 40
  assert metrics[0]["prefill_tokens"] == 40 + 8
  assert metrics[0]["prefill_tokens_saved"] == 7 * 40 + 32


def _episodes(num_episodes, rng):
  """Per episode: first prompt and, per later turn, the tokens appended after the completion."""
  return [(rng.integers(3, CONFIG.vocab_size, int(rng.integers(18, 46))).tolist(),
           [rng.integers(3, CONFIG.vocab_size, int(rng.integers(10, 40))).tolist()
            for _ in range(2)]) for _ in range(num_episodes)]


def _run_episodes(sampler, episodes, sampling):
  """Three turns per episode, each turn's prompt = the conversation so far (batched per turn)."""
  conversations = [list(first) for first, _ in episodes]
  completions = []
  for turn in range(3):
    outs = sampler.generate(conversations, sampling.replace(seed=turn),
                            request_keys=list(range(len(conversations))))
    completions += outs
    if turn < 2:
      for conversation, out, (_, tools) in zip(conversations, outs, episodes):
        conversation += out.token_ids + tools[turn]
  return completions


def _full_blocks(length, block_size):
  return length // block_size * block_size


@pytest.mark.parametrize("block_size, cache_bytes, completions, unrolled", [
    (16, None, True, None),
    (4, 12 * 2 * 2 * 4 * 2 * 8 * 4, True, None),  # 12 blocks of key + value, 2 layers: evictions
    (16, None, False, None),  # only prefilled prompt blocks: bitwise
    pytest.param(8, None, True, False, marks=pytest.mark.slow),  # the stacked layout (TPU's)
])
def test_ragged_multi_turn_episodes_match_uncached(params, block_size, cache_bytes, completions,
                                                   unrolled):
  episodes = _episodes(6, np.random.default_rng(1))
  sampling = SamplingParams(max_tokens=20, temperature=1.0)
  outputs, metrics = [], []
  for budget in (cache_bytes, 0):
    with _sampler(CONFIG, params, max_slots=8, prefix_cache_bytes=budget,
                 prefix_block_size=block_size, prefix_cache_completions=completions,
                 unrolled=unrolled) as sampler:
      outputs.append(_run_episodes(sampler, episodes, sampling))
      metrics.append(sampler.metrics())
  _assert_same(*outputs, tolerance=TOLERANCE if completions else 0.0)
  cached, uncached = metrics
  needed = uncached["prefill_tokens"]
  assert needed == sum(len(out.prompt_token_ids) - 1 for out in outputs[1])
  assert cached["prefill_tokens"] + cached["prefill_tokens_saved"] == needed
  assert uncached["prefill_tokens_saved"] == 0
  # Without evictions, turn k + 1 reads every full block of turn k's prompt (positions but
  # the last), and with completions cached also those of turn k's prompt and completion.
  num = len(episodes)
  previous = [(len(out.prompt_token_ids) - 1 + (len(out.token_ids) if completions else 0))
              for out in outputs[1][:2 * num]]
  expected = sum(_full_blocks(length, block_size) for length in previous)
  if cache_bytes is None:
    assert cached["prefix_cache_evictions"] == 0
    assert cached["prefill_tokens_saved"] == expected
  else:
    assert cached["prefix_cache_pool_blocks"] == 12
    assert cached["prefix_cache_evictions"] > 0
    assert 0 < cached["prefill_tokens_saved"] < expected


def test_prompt_blocks_stay_bitwise_after_evictions(params):
  """Other episodes first fill a 12-block pool, so serving these evicts their blocks (default
  engine: prompt blocks only)."""
  filler, episodes = (_episodes(6, np.random.default_rng(seed)) for seed in (5, 1))
  sampling = SamplingParams(max_tokens=20, temperature=1.0)
  outputs, metrics = [], []
  for budget in (12 * 2 * 2 * 4 * 2 * 8 * 4, 0):
    with _sampler(CONFIG, params, max_slots=8, prefix_cache_bytes=budget,
                 prefix_block_size=4) as sampler:
      _run_episodes(sampler, filler, sampling)
      before = sampler.metrics()
      outputs.append(_run_episodes(sampler, episodes, sampling))
      metrics.append({k: sampler.metrics()[k] - before[k]
                      for k in ("prefix_cache_evictions", "prefill_tokens_saved")})
  _assert_same(*outputs, tolerance=0.0)
  assert metrics[0]["prefix_cache_evictions"] > 0 and metrics[0]["prefill_tokens_saved"] > 0


@pytest.mark.parametrize("cache_bytes", [None, 12 * 2 * 2 * 4 * 2 * 8 * 2])  # 2-byte entries
def test_bfloat16_prompt_blocks_are_bitwise_too(params, cache_bytes):
  """In bfloat16 the pool stores the KV's bits (uint16), so a cached prefix is exactly the
  prefill's KV: tokens and logprobs identical to the uncached bfloat16 engine, also after
  evictions (other episodes first fill a 12-block pool of 2-byte entries)."""
  config = CONFIG.replace(param_dtype="bfloat16", compute_dtype="bfloat16")
  bf16 = jax.tree.map(lambda x: x.astype("bfloat16"), params)
  filler, episodes = (_episodes(6, np.random.default_rng(seed)) for seed in (5, 2))
  sampling = SamplingParams(max_tokens=20, temperature=1.0)
  outputs, metrics = [], []
  for budget in (cache_bytes, 0):
    with _sampler(config, bf16, max_slots=8, prefix_cache_bytes=budget,
                 prefix_block_size=4) as sampler:
      if cache_bytes is not None:
        _run_episodes(sampler, filler, sampling)
      before = sampler.metrics()
      outputs.append(_run_episodes(sampler, episodes, sampling))
      metrics.append({k: sampler.metrics()[k] - before[k]
                      for k in ("prefix_cache_evictions", "prefill_tokens_saved")})
      metrics[-1]["pool_blocks"] = sampler.metrics()["prefix_cache_pool_blocks"]
  _assert_same(*outputs, tolerance=0.0)
  assert metrics[0]["prefill_tokens_saved"] > 0 and metrics[1]["prefill_tokens_saved"] == 0
  if cache_bytes is not None:
    assert metrics[0]["pool_blocks"] == 12 and metrics[0]["prefix_cache_evictions"] > 0


def test_new_weights_drop_the_cache(params):
  prompt = list(range(3, 40))
  sampling = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
  other = tiny_model.params(seed=4)
  with _sampler(CONFIG, params, max_slots=4) as sampler:
    sampler.generate([prompt], sampling)
    sampler.update_params(other)
    cached = sampler.generate([prompt], sampling)
    assert sampler.metrics()["prefill_tokens_saved"] == 0
  with _sampler(CONFIG, other, max_slots=4, prefix_cache_bytes=0) as sampler:
    _assert_same(cached, sampler.generate([prompt], sampling))


def test_pool_starts_at_one_prefill_and_doubles_and_warm_up_takes_the_budget(params):
  """The default budget, by hand: 2 layers x 2 KV heads x 8 dims x 2 (key, value) x 4 bytes
  = 256 bytes a token; 4 x 8 slots x 256 positions of it = 2 MiB = 512 blocks of 16 tokens.
  The pool starts with room for one prefill call (max_prefill_tokens=64: 4 blocks), grows to
  8 blocks for three 40-token prompts (2 full blocks each), and serves them again the same
  as an engine without a cache; warm_up() allocates all 512."""
  rng = np.random.default_rng(5)
  prompts = [rng.integers(3, CONFIG.vocab_size, 40).tolist() for _ in range(3)]
  sampling = SamplingParams(max_tokens=4, seed=1)
  with _sampler(CONFIG, params, max_prefill_tokens=64) as sampler:
    assert sampler.metrics()["prefix_cache_pool_blocks"] == 0
    sampler.generate(prompts, sampling)
    again = sampler.generate(prompts, sampling)
    metrics = sampler.metrics()
  assert metrics["prefix_cache_pool_blocks"] == 8
  assert metrics["prefill_tokens_saved"] == 3 * 32
  with _sampler(CONFIG, params, max_prefill_tokens=64, prefix_cache_bytes=0) as uncached:
    _assert_same(again, uncached.generate(prompts, sampling), tolerance=0)
  with _sampler(CONFIG, params, max_prefill_tokens=64) as warmed:
    warmed.warm_up(max_cache_length=64)
    warmed.generate(prompts, sampling)
    assert warmed.metrics()["prefix_cache_pool_blocks"] == 512


def test_bad_cache_settings_raise():
  params = tiny_model.params(seed=3)
  with pytest.raises(ValueError, match="prefix_block_size=3"):
    Sampler(CONFIG, params, prefix_block_size=3)
  with pytest.raises(ValueError, match="less than one block"):
    Sampler(CONFIG, params, prefix_cache_bytes=100)


@pytest.mark.slow  # ~60 s: some 60 compilations of the tiny model
def test_warm_up_compiles_every_shape_that_ragged_episodes_meet(params):
  """After warm_up over the batch and length range of the calls, serving them compiles
  nothing: counted by the engine and, independently, by JAX's backend-compile events."""
  rng = np.random.default_rng(2)
  episodes = [(rng.integers(3, CONFIG.vocab_size, int(rng.integers(60, 90))).tolist(),
               [rng.integers(3, CONFIG.vocab_size, int(rng.integers(5, 20))).tolist()
                for _ in range(2)]) for _ in range(4)]
  compiled = []

  def listener(event, duration, **kwargs):
    del duration
    if event == "/jax/core/compile/backend_compile_duration":
      compiled.append(kwargs.get("fun_name"))

  with Sampler(CONFIG, params, max_slots=4, min_slots=2, steps_per_call=STEPS) as sampler:
    # Turn 1 needs at least 60 + 8 positions, turn 3 at most 90 + 3 * 16 + 2 * 20 (< 192).
    made = sampler.warm_up(max_cache_length=192, min_cache_length=68)
    assert made > 0 and sampler.metrics()["compilations"] == made
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
      # Staggered arrivals too: one episode alone first, then all four.
      _run_episodes(sampler, episodes[:1], SamplingParams(max_tokens=16))
      _run_episodes(sampler, episodes, SamplingParams(max_tokens=16))
    finally:
      jax.monitoring.unregister_event_duration_listener(listener)
    metrics = sampler.metrics()
  assert metrics["prefill_tokens_saved"] > 0
  assert metrics["compilations"] == made, metrics["compilations_by_function"]
  assert compiled == []
