"""A sampler whose params and slots are sharded over 8 devices gives the unsharded results."""
import jax
import numpy as np

from tests.sampling import reference
from tests.sampling import tiny_model
from tests.train import random_params
from whale_jax.models import decoder
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams

CONFIG = tiny_model.CONFIG
STEPS = tiny_model.STEPS_PER_CALL
PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]]


def test_sharded_sampler_matches_unsharded_and_reference():
  mesh = mesh_lib.make_mesh(data=4, fsdp=1, tensor=2)
  host_params = random_params.numpy_params(CONFIG, seed=6)
  params = mesh_lib.place(host_params, decoder.logical_axes(CONFIG), mesh, rules.SAMPLE_RULES)
  sampling = SamplingParams(max_tokens=10, temperature=0.8, seed=3, ignore_eos=True)
  greedy = sampling.replace(temperature=0.0)
  with Sampler(CONFIG, params, mesh=mesh, max_slots=8, steps_per_call=STEPS) as sharded:
    sharded_greedy = sharded.generate(PROMPTS, greedy)
    sharded_sampled = sharded.generate(PROMPTS, sampling)
    slots = sharded._slots  # pylint: disable=protected-access
    assert slots["token"].sharding.spec[0] == ("data", "fsdp")  # slots split over data
    assert slots["cache"]["value"][0].sharding.spec[:2] == (("data", "fsdp"), "tensor")
  with Sampler(CONFIG, jax.tree.map(jax.numpy.asarray, host_params), max_slots=8,
               steps_per_call=STEPS) as plain:
    plain_sampled = plain.generate(PROMPTS, sampling)
  for prompt, out in zip(PROMPTS, sharded_greedy):
    assert out.token_ids == reference.greedy(host_params, CONFIG, prompt, 10)
  for sharded_out, plain_out in zip(sharded_sampled, plain_sampled):
    assert sharded_out.token_ids == plain_out.token_ids
    np.testing.assert_allclose(sharded_out.logprobs, plain_out.logprobs, atol=1e-5)


def test_sharded_prefix_cache_matches_unsharded_uncached():
  """Pages are split over key/value heads like the slot cache and replicated over batch
  shards; a second turn read from them gives the unsharded, uncached engine's results."""
  mesh = mesh_lib.make_mesh(data=4, fsdp=1, tensor=2)
  host_params = random_params.numpy_params(CONFIG, seed=6)
  params = mesh_lib.place(host_params, decoder.logical_axes(CONFIG), mesh, rules.SAMPLE_RULES)
  rng = np.random.default_rng(3)
  prompts = [rng.integers(3, CONFIG.vocab_size, n).tolist() for n in (40, 27, 53)]
  sampling = SamplingParams(max_tokens=10, temperature=1.0, seed=3, ignore_eos=True)

  def two_turns(sampler):
    first = sampler.generate(prompts, sampling)
    second = [p + out.token_ids + [7, 8, 9] for p, out in zip(prompts, first)]
    return first + sampler.generate(second, sampling.replace(seed=4))

  with Sampler(CONFIG, params, mesh=mesh, max_slots=8, steps_per_call=STEPS) as sharded:
    sharded_outs = two_turns(sharded)
    assert sharded.metrics()["prefill_tokens_saved"] > 0
    pool = sharded._pool  # pylint: disable=protected-access
    assert pool["key"].sharding.spec[:4] == (None, None, None, "tensor")
  with Sampler(CONFIG, jax.tree.map(jax.numpy.asarray, host_params), max_slots=8,
               steps_per_call=STEPS, prefix_cache_bytes=0) as plain:
    plain_outs = two_turns(plain)
  for sharded_out, plain_out in zip(sharded_outs, plain_outs):
    assert sharded_out.token_ids == plain_out.token_ids
    np.testing.assert_allclose(sharded_out.logprobs, plain_out.logprobs, atol=1e-5)
