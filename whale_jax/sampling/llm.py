"""An in-process LLM client: chat(messages) and generate(text) over a Sampler.

  llm = LLM(sampler, tokenizer, max_tokens=256, temperature=0.7, seed=3, request_key=12)
  reply = llm.chat([{"role": "user", "content": "What is 2 + 2?"}])   # -> str
  llm.calls[-1].prompt_ids, llm.calls[-1].completion.token_ids, .logprobs

Token in, token out: chat() renders the messages with the tokenizer's chat template to ids
once, and the completion's token ids are recorded exactly as generated; the returned text is
only a view of them and is never tokenized again by this client.

Random streams: call number c of a client (counting from 0) uses the request key
(request_key * 2**32 + c) mod 2**64, so an episode that gives its client its own request_key
replays the same streams call by call.
"""
import dataclasses

from whale_jax.sampling import api

SAMPLING_FIELDS = tuple(field.name for field in dataclasses.fields(api.SamplingParams))


@dataclasses.dataclass
class Call:
  """One model call: what was sent and what came back."""
  prompt_ids: list
  params: api.SamplingParams
  request_key: int
  completion: api.Completion


class LLM:
  """chat/generate over a backend whose submit(prompt_ids, params, request_key) -> Future.

  Args:
    backend: a Sampler (or engine) taking request_key in submit.
    tokenizer: renders chat messages and encodes text prompts.
    record: keep every Call in self.calls.
    request_key: names this client's random streams (module docstring).
    **defaults: SamplingParams fields used unless a call overrides them.
  """

  def __init__(self, backend, tokenizer, record=True, request_key=0, **defaults):
    self.backend = backend
    self.tokenizer = tokenizer
    self.record = record
    self.request_key = request_key
    self.calls = []
    self._num_calls = 0
    self.defaults = self._params(defaults)

  def _params(self, overrides, base=None):
    unknown = sorted(set(overrides) - set(SAMPLING_FIELDS))
    if unknown:
      raise TypeError(f"Unknown sampling argument(s) {unknown}; allowed: "
                      f"{', '.join(SAMPLING_FIELDS)}.")
    base = base or api.SamplingParams()
    return base.replace(**overrides)

  def complete(self, prompt_ids, **sampling):
    """Completions (params.n of them) for prompt token ids; the call is recorded."""
    params = self._params(sampling, self.defaults)
    request_key = (self.request_key * 2**32 + self._num_calls) % 2**64
    self._num_calls += 1
    completions = self.backend.submit(list(prompt_ids), params,
                                      request_key=request_key).result()
    if self.record:
      self.calls.extend(Call(list(prompt_ids), params, request_key, c) for c in completions)
    return completions

  def _single(self, prompt_ids, sampling):
    if sampling.get("n", self.defaults.n) != 1:
      raise ValueError("chat() and generate() return one text; for n > 1 samples call "
                       "complete(prompt_ids, n=...) and read each Completion.")
    return self.complete(prompt_ids, **sampling)[0].text

  def chat(self, messages, tools=None, **sampling):
    """The assistant's reply to chat messages ([{"role", "content"}, ...]) as text."""
    prompt_ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                    tools=tools)
    return self._single(prompt_ids, sampling)

  def generate(self, prompt, **sampling):
    """The continuation of a text prompt, as text."""
    if not isinstance(prompt, str):
      raise TypeError(f"generate(prompt) takes text; got {type(prompt).__name__}. For token "
                      "ids call complete(prompt_ids).")
    return self._single(self.tokenizer.encode(prompt), sampling)
