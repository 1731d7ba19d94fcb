"""Same seed and request key, same tokens: alone, in a mixed batch, or among 63 threads."""
import concurrent.futures
import threading

import numpy as np
import pytest

from tests.sampling import tiny_model
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams

CONFIG = tiny_model.CONFIG.replace(eos_token_ids=(3,))
STEPS = tiny_model.STEPS_PER_CALL
NUM_THREADS = 64


@pytest.fixture(scope="module")
def params():
  return tiny_model.params(seed=0)


def _request(i):
  """Request i of the concurrent test: varied prompt, length, seed and truncation."""
  rng = np.random.default_rng(i)
  prompt = rng.integers(4, CONFIG.vocab_size, size=int(rng.integers(1, 16))).tolist()
  params = SamplingParams(max_tokens=int(rng.integers(3, 20)), temperature=[1.0, 0.8, 0.0][i % 3],
                          top_k=[0, 20][i % 2], top_p=[1.0, 0.9, 1.0, 1.0][i % 4], seed=i % 5,
                          n=1 + i % 2)
  return prompt, params, 1000 + i


def test_same_request_same_tokens_alone_and_in_mixed_batch(params):
  target = ([5, 17, 33, 8, 60, 2], SamplingParams(max_tokens=24, temperature=1.0, seed=7, n=2),
            3)
  with Sampler(CONFIG, params, max_slots=32, steps_per_call=STEPS) as sampler:
    alone = sampler.submit(*target).result()
    others = [_request(i) for i in range(9)]
    futures = sampler.submit_many(others[:4] + [target] + others[4:])
    mixed = futures[4].result()
    for future in futures:
      future.result()
    batches = sampler.metrics()["decode_calls_by_batch_size"]
    assert len(batches) >= 2, batches  # alone and mixed in two slot batch shapes
  assert [c.token_ids for c in mixed] == [c.token_ids for c in alone]
  # Other batch shapes round differently (float noise), which must not change a token.
  np.testing.assert_allclose([c.logprobs for c in mixed], [c.logprobs for c in alone], atol=1e-5)
  assert mixed[0].token_ids != mixed[1].token_ids  # sample index changes the stream
  assert all(c.finish_reason == "stop" or len(c.token_ids) == 24 for c in mixed)


def test_different_request_keys_or_seeds_give_different_streams(params):
  prompt, base = [9, 9, 9], SamplingParams(max_tokens=16, temperature=1.0, seed=1,
                                           ignore_eos=True)
  with Sampler(CONFIG, params, max_slots=8, steps_per_call=STEPS) as sampler:
    first = sampler.submit(prompt, base, request_key=0).result()[0].token_ids
    again = sampler.submit(prompt, base, request_key=0).result()[0].token_ids
    other_key = sampler.submit(prompt, base, request_key=1).result()[0].token_ids
    other_seed = sampler.submit(prompt, base.replace(seed=2), request_key=0).result()[0].token_ids
  assert first == again
  assert first != other_key and first != other_seed


def test_64_concurrent_threads_each_get_what_they_get_alone(params):
  requests = [_request(i) for i in range(NUM_THREADS)]
  with Sampler(CONFIG, params, max_slots=2, steps_per_call=STEPS) as sampler:
    alone = [sampler.submit(*request).result() for request in requests]  # one at a time
  with Sampler(CONFIG, params, max_slots=128, steps_per_call=STEPS) as sampler:
    barrier = threading.Barrier(NUM_THREADS)

    def submit_after_barrier(request):
      barrier.wait()
      return sampler.submit(*request).result()

    with concurrent.futures.ThreadPoolExecutor(NUM_THREADS) as pool:
      together = list(pool.map(submit_after_barrier, requests))
    assert sampler.metrics()["slot_occupancy"] > 0
  for i in range(NUM_THREADS):
    assert [c.token_ids for c in together[i]] == [c.token_ids for c in alone[i]], i
    assert [c.finish_reason for c in together[i]] == [c.finish_reason for c in alone[i]], i
