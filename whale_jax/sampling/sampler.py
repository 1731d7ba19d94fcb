"""Sampler: the generate API (api.py) served by the generation engine (engine.py, where the
class lives; Sampler is engine.Engine).

  sampler = Sampler(config, params, tokenizer=None, mesh=None)
  outs = sampler.generate([prompt_ids, ...], SamplingParams(max_tokens=64, seed=0))
  future = sampler.submit(prompt_ids, SamplingParams(seed=3), request_key=7)  # any thread
  sampler.update_params(train_state.params)   # next decode call uses the new weights
  sampler.metrics()                           # tokens/s, slot occupancy, queue wait, compiles

Request keys name random streams: generate() gives prompt r the key r (its index in that
call), submit() takes an explicit key (default 0). Sample i of a request with seed s and key k
draws from (s, k, i) only, so it gets the same tokens alone or among any other requests.
"""
from whale_jax.sampling.engine import Sampler  # pylint: disable=unused-import
