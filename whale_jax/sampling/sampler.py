"""Sampler: the generate API (api.py) served by the generation engine (engine.py).

  sampler = Sampler(config, params, tokenizer=None, mesh=None)
  outs = sampler.generate([prompt_ids, ...], SamplingParams(max_tokens=64, seed=0))
  future = sampler.submit(prompt_ids, SamplingParams(seed=3), request_key=7)  # any thread
  sampler.update_params(train_state.params)   # next decode call uses the new weights
  sampler.metrics()                           # tokens/s, slot occupancy, queue wait, compiles

Request keys name random streams: generate() gives prompt r the key r (its index in that
call), submit() takes an explicit key (default 0). Sample i of a request with seed s and key k
draws from (s, k, i) only, so it gets the same tokens alone or among any other requests.
"""
from whale_jax.sampling import engine as engine_lib


class Sampler:
  """Generates from a decoder whose params tree it holds by reference; an api.LLMBackend.

  Args:
    config: models.ModelConfig.
    params: the params tree (the trainer's, when they share a mesh).
    tokenizer: optional; needed for text prompts, stop strings and Completion.text.
    mesh: optional Mesh the params live on.
    **engine_options: see engine.Engine (max_slots, steps_per_call, max_cache_length, ...).
  """

  def __init__(self, config, params, tokenizer=None, mesh=None, **engine_options):
    self.config = config
    self.tokenizer = tokenizer
    self.engine = engine_lib.Engine(config, params, tokenizer=tokenizer, mesh=mesh,
                                    **engine_options)

  @property
  def params(self):
    return self.engine.params

  def update_params(self, params):
    """Uses params (same tree, shapes, dtypes; no copy) from the next decode call on."""
    self.engine.update_params(params)

  def _prompt_ids(self, prompt):
    if isinstance(prompt, str):
      if self.tokenizer is None:
        raise TypeError("A text prompt needs a tokenizer: build the Sampler with "
                        "tokenizer=..., or pass token ids.")
      return self.tokenizer.encode(prompt)
    return prompt

  def generate(self, prompts, params=None, request_keys=None):
    """Completions for each prompt (token ids, or text with a tokenizer), params.n each,
    prompt-major. request_keys default to each prompt's index in `prompts`."""
    if isinstance(prompts, str):
      raise TypeError("generate takes a list of prompts; wrap the single prompt in a list.")
    return self.engine.generate([self._prompt_ids(p) for p in prompts], params, request_keys)

  def submit(self, prompt_ids, params=None, request_key=0):
    """A concurrent.futures.Future of the list of params.n Completions for one prompt."""
    return self.engine.submit(self._prompt_ids(prompt_ids), params, request_key)

  def metrics(self):
    return self.engine.metrics()

  def close(self):
    self.engine.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()
