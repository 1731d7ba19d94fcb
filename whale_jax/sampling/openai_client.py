"""A client for any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, hosted APIs).

  client = OpenAICompatibleClient("http://localhost:8000/v1", model="Qwen/Qwen3-8B",
                                  api_key_env="OPENAI_API_KEY")
  reply = client.chat([{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=64)
  reply.text, reply.prompt_tokens, reply.completion_tokens

Used where whale_jax talks to a model outside the process: harness proposers and LLM judges.
Rate limits (HTTP 429, honouring Retry-After), server errors (5xx), timeouts, dropped
connections and malformed replies are retried with exponential backoff; after max_retries the
last failure is raised as ChatError. Client errors (other 4xx) are raised at once.
"""
import dataclasses
import json
import os
import socket
import time
import urllib.error
import urllib.request

SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n")


class ChatError(RuntimeError):
  """The endpoint did not produce a usable reply."""


@dataclasses.dataclass(frozen=True)
class ChatReply:
  text: str
  prompt_tokens: int
  completion_tokens: int
  finish_reason: str
  raw: dict


class OpenAICompatibleClient:
  """POSTs to {base_url}/chat/completions with retries; thread-safe (no shared state)."""

  def __init__(self, base_url, model, api_key_env="OPENAI_API_KEY", timeout_seconds=600.0,
               max_retries=4, initial_backoff_seconds=1.0, max_backoff_seconds=60.0,
               extra_body=None, sleep=time.sleep):
    if not base_url.startswith(("http://", "https://")):
      raise ValueError(f"base_url={base_url!r} must start with http:// or https:// "
                       "(e.g. http://localhost:8000/v1).")
    self.url = base_url.rstrip("/") + "/chat/completions"
    self.model = model
    self.api_key = None
    if api_key_env:
      self.api_key = os.environ.get(api_key_env)
      if not self.api_key:
        raise ValueError(f"Environment variable {api_key_env} holding the API key is not set; "
                         "set it, or pass api_key_env=None for an endpoint without a key.")
    self.timeout_seconds = timeout_seconds
    self.max_retries = max_retries
    self.initial_backoff_seconds = initial_backoff_seconds
    self.max_backoff_seconds = max_backoff_seconds
    self.extra_body = dict(extra_body or {})
    self._sleep = sleep

  def _request(self, body):
    headers = {"Content-Type": "application/json"}
    if self.api_key:
      headers["Authorization"] = f"Bearer {self.api_key}"
    request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
    with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
      return response.read()

  @staticmethod
  def _parse(payload):
    try:
      reply = json.loads(payload)
      choice = reply["choices"][0]
      text = choice["message"]["content"]
      if not isinstance(text, str):
        raise TypeError(f"message content is {type(text).__name__}")
    except (ValueError, KeyError, IndexError, TypeError) as error:
      excerpt = payload[:200].decode("utf-8", errors="replace")
      raise ChatError(f"Malformed chat-completions reply ({error}): {excerpt!r}") from None
    usage = reply.get("usage") or {}
    return ChatReply(text=text, prompt_tokens=int(usage.get("prompt_tokens", 0)),
                     completion_tokens=int(usage.get("completion_tokens", 0)),
                     finish_reason=str(choice.get("finish_reason") or ""), raw=reply)

  def chat(self, messages, **sampling) -> ChatReply:
    """One chat completion. sampling: any of SAMPLING_FIELDS."""
    unknown = set(sampling) - set(SAMPLING_FIELDS)
    if unknown:
      raise TypeError(f"chat() got unknown sampling arguments {sorted(unknown)}; allowed: "
                      f"{', '.join(SAMPLING_FIELDS)}.")
    body = {"model": self.model, "messages": list(messages), **self.extra_body,
            **{k: (list(v) if isinstance(v, tuple) else v) for k, v in sampling.items()
               if v is not None}}
    if body.get("top_k") == 0:
      body.pop("top_k")
    backoff, last_error = self.initial_backoff_seconds, None
    for attempt in range(self.max_retries + 1):
      wait = backoff
      try:
        return self._parse(self._request(body))
      except urllib.error.HTTPError as error:
        if error.code != 429 and error.code < 500:
          detail = error.read()[:300].decode("utf-8", errors="replace")
          raise ChatError(f"{self.url} answered HTTP {error.code}: {detail}") from None
        last_error = ChatError(f"{self.url} answered HTTP {error.code}")
        retry_after = error.headers.get("Retry-After") if error.headers else None
        if retry_after:
          try:
            wait = min(float(retry_after), self.max_backoff_seconds)
          except ValueError:
            pass
      except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError) as error:
        last_error = ChatError(f"{self.url} unreachable or timed out: {error}")
      except ChatError as error:
        last_error = error
      if attempt < self.max_retries:
        self._sleep(wait)
        backoff = min(backoff * 2, self.max_backoff_seconds)
    raise last_error
