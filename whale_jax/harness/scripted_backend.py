"""An LLM backend that answers from a script: for tests and CPU runs without a model.

  backend = ScriptedBackend(tokenizer, replies=lambda prompt_text: "<answer>Paris</answer>")
  backend = ScriptedBackend(tokenizer, replies=["first reply", "second reply"])   # a queue
  completions = backend.submit(prompt_ids, SamplingParams(max_tokens=64)).result()

It implements whale_jax.sampling.api.LLMBackend. A reply is tokenized with the tokenizer and
returned like a model's sample: cut after the first stop string (finish "stop"), else followed
by the end-of-turn token (finish "stop"; text leaves that token out, as the sampler's does), and
cut at max_tokens (finish "length"). Logprobs are
deterministic fakes: -(1 + (7 * token_id + 13 * position + seed) % 50) / 25.
Every completion returned is appended to `completions`, in the order they were made.
"""
import collections
import concurrent.futures
import threading
import time

from whale_jax.sampling import api

END_OF_TURN = "<|im_end|>"


def fake_logprobs(token_ids, seed):
  return [-(1 + (7 * token_id + 13 * position + seed) % 50) / 25
          for position, token_id in enumerate(token_ids)]


class ScriptedBackend:
  """Scripted replies behind the LLMBackend interface.

  Args:
    tokenizer: any whale_jax tokenizer.
    replies: a str (always that reply), a sequence of str (consumed in call order, one per
      sample; running out raises), or a callable prompt_text -> str.
    latency_seconds: if > 0, each submit resolves after this delay on a background thread, so
      that concurrent requests overlap (max_in_flight counts how many did).
    end_token_id: token appended to a reply that ends naturally; defaults to the tokenizer's
      "<|im_end|>" id, else its eos_id.
  """

  def __init__(self, tokenizer, replies, latency_seconds=0.0, end_token_id=None):
    if not (isinstance(replies, str) or callable(replies) or
            all(isinstance(reply, str) for reply in replies)):
      raise TypeError("ScriptedBackend(replies=...) takes a str, a sequence of str or a "
                      "callable prompt_text -> str.")
    self.tokenizer = tokenizer
    self._replies = replies if isinstance(replies, str) or callable(replies) else (
        collections.deque(replies))
    self.latency_seconds = latency_seconds
    if end_token_id is None:
      end_token_id = tokenizer.token_to_id(END_OF_TURN)
    self.end_token_id = tokenizer.eos_id if end_token_id is None else end_token_id
    self.completions = []
    self.in_flight = 0
    self.max_in_flight = 0
    self._lock = threading.Lock()
    self._executor = (concurrent.futures.ThreadPoolExecutor(64, "scripted-backend")
                      if latency_seconds > 0 else None)

  def _next_reply(self, prompt_text):
    if isinstance(self._replies, str):
      return self._replies
    if callable(self._replies):
      return self._replies(prompt_text)
    if not self._replies:
      raise RuntimeError("ScriptedBackend ran out of scripted replies; give more replies or a "
                         "callable.")
    return self._replies.popleft()

  def _complete(self, prompt_ids, params):
    prompt_ids = [int(i) for i in prompt_ids]
    prompt_text = self.tokenizer.decode(prompt_ids)
    completions = []
    for _ in range(params.n):
      with self._lock:
        reply = self._next_reply(prompt_text)
      cuts = [reply.find(stop) + len(stop) for stop in params.stop if stop in reply]
      token_ids = self.tokenizer.encode(reply[:min(cuts)] if cuts else reply)
      if not cuts and not params.ignore_eos:
        token_ids.append(self.end_token_id)
      finish_reason = "stop" if cuts or not params.ignore_eos else "length"
      if len(token_ids) > params.max_tokens:
        token_ids, finish_reason = token_ids[:params.max_tokens], "length"
      ended_by_token = bool(token_ids) and token_ids[-1] == self.end_token_id and not cuts
      completion = api.Completion(
          token_ids=token_ids, logprobs=fake_logprobs(token_ids, params.seed),
          text=self.tokenizer.decode(token_ids[:-1] if ended_by_token else token_ids),
          finish_reason=finish_reason, prompt_token_ids=prompt_ids)
      completions.append(completion)
    with self._lock:
      self.completions.extend(completions)
    return completions

  def generate(self, prompts, params):
    """params.n completions per prompt, prompt-major."""
    return [completion for prompt_ids in prompts
            for completion in self._complete(prompt_ids, params)]

  def submit(self, prompt_ids, params):
    """A Future resolving to params.n completions."""
    with self._lock:
      self.in_flight += 1
      self.max_in_flight = max(self.max_in_flight, self.in_flight)
    if self._executor is None:
      future = concurrent.futures.Future()
      try:
        future.set_result(self._complete(prompt_ids, params))
      except Exception as error:  # pylint: disable=broad-except
        future.set_exception(error)
      self._finish()
      return future

    def delayed():
      try:
        time.sleep(self.latency_seconds)
        return self._complete(prompt_ids, params)
      finally:
        self._finish()

    return self._executor.submit(delayed)

  def _finish(self):
    with self._lock:
      self.in_flight -= 1

  def close(self):
    if self._executor is not None:
      self._executor.shutdown(wait=True)
