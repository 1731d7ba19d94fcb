"""A client for any OpenAI-compatible chat-completions endpoint (whale_jax.serve, vLLM, hosted).

  client = OpenAICompatibleClient("http://127.0.0.1:8000/v1", model="judge", api_key_env=None,
                                  timeout_seconds=60, max_retries=4, max_consecutive_failures=3)
  reply = client.chat([{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=64)
  reply.text, reply.prompt_tokens, reply.completion_tokens, reply.finish_reason

Used where whale_jax talks to a model outside the process: harness proposers and LLM judges.

Failures, in two levels:
  - One call: transient failures (connection refused or reset, HTTP 429 honouring Retry-After,
    5xx, a timeout, a reply that is not a chat completion) are retried with exponential
    backoff (initial_backoff_seconds, doubling, at most max_backoff_seconds), max_retries
    times. Other 4xx answers are not retried. When the call still has no reply it raises
    ChatError: the caller records that call as failed (a proposer's rejected proposal, a
    judge's fallback) and goes on.
  - The endpoint: after max_consecutive_failures failed calls in a row (any thread; a success
    resets the count) the failing call raises EndpointUnavailable instead, naming the
    endpoint, the last failure and how to resume. It is not a ChatError, so code that records
    ChatErrors lets it through and the run stops.
Nothing is cached: every call goes to the endpoint.

timeout_seconds bounds each socket operation (connecting, and each read of the reply), not
the whole call; a server that accepts and then says nothing fails the attempt after it.
"""
import dataclasses
import http.client
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request

SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n")


class ChatError(RuntimeError):
  """One call got no usable reply (after its retries); the caller records it as failed."""


class EndpointUnavailable(RuntimeError):
  """The endpoint failed max_consecutive_failures calls in a row: stop the run.

  Attributes:
    url: the endpoint's URL.
    consecutive_failures: failed calls in a row.
    last_error: the last call's failure (str).
  """

  def __init__(self, url, consecutive_failures, last_error, attempts_per_call):
    self.url, self.consecutive_failures = url, consecutive_failures
    self.last_error = last_error
    super().__init__(
        f"The endpoint {url} failed {consecutive_failures} calls in a row (the last after "
        f"{attempts_per_call} attempt(s)); the last failure: {last_error}. Start or fix the "
        "server (e.g. `python -m whale_jax.serve --model=... --port=...`; check base_url "
        "and the model name), then rerun the same command with the same --workdir: the run resumes "
        "from its last checkpoint and retries the calls that failed.")


def read_api_key(api_key_env):
  """The API key in environment variable api_key_env (None when api_key_env is None or "");
  a named variable that is unset or empty is an error."""
  if not api_key_env:
    return None
  key = os.environ.get(api_key_env)
  if not key:
    raise ValueError(f"Environment variable {api_key_env} holding the API key is not set; "
                     "set it, or pass api_key_env=None for an endpoint without a key.")
  return key


@dataclasses.dataclass(frozen=True)
class ChatReply:
  text: str
  prompt_tokens: int
  completion_tokens: int
  finish_reason: str
  raw: dict


class OpenAICompatibleClient:
  """POSTs to {base_url}/chat/completions with retries; thread-safe.

  Args:
    base_url: the endpoint's API root, e.g. "http://127.0.0.1:8000/v1".
    model: the "model" field of each request.
    api_key_env: environment variable holding the API key (sent as a Bearer token), or None
      for an endpoint without a key (e.g. whale_jax.serve).
    timeout_seconds: limit on connecting and on each read of a reply.
    max_retries: retries of one call after its first attempt (transient failures only).
    initial_backoff_seconds, max_backoff_seconds: wait before the first retry; the wait
      doubles after each retry, capped at the maximum (Retry-After too).
    max_consecutive_failures: failed calls in a row after which a call raises
      EndpointUnavailable (module docstring).
    extra_body: fields added to every request body.
    sleep: the wait function (tests pass a recorder).
  """

  def __init__(self, base_url, model, api_key_env="OPENAI_API_KEY", timeout_seconds=600.0,
               max_retries=4, initial_backoff_seconds=1.0, max_backoff_seconds=60.0,
               max_consecutive_failures=3, extra_body=None, sleep=time.sleep):
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
      raise ValueError(f"base_url={base_url!r} must start with http:// or https:// "
                       "(e.g. http://127.0.0.1:8000/v1).")
    if not isinstance(model, str) or not model:
      raise ValueError(f"model={model!r} must be the non-empty model name the endpoint serves "
                       "(GET {base_url}/models lists them).")
    for name, value, minimum in (("timeout_seconds", timeout_seconds, 0),
                                 ("initial_backoff_seconds", initial_backoff_seconds, 0),
                                 ("max_backoff_seconds", max_backoff_seconds, 0)):
      if not isinstance(value, (int, float)) or value < minimum or (
          name == "timeout_seconds" and value == 0):
        raise ValueError(f"{name}={value!r} must be a number > 0 (>= 0 for backoffs).")
    for name, value, minimum in (("max_retries", max_retries, 0),
                                 ("max_consecutive_failures", max_consecutive_failures, 1)):
      if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an int >= {minimum}.")
    self.url = base_url.rstrip("/") + "/chat/completions"
    self.model = model
    self.api_key = read_api_key(api_key_env)
    self.timeout_seconds = timeout_seconds
    self.max_retries = max_retries
    self.initial_backoff_seconds = initial_backoff_seconds
    self.max_backoff_seconds = max_backoff_seconds
    self.max_consecutive_failures = max_consecutive_failures
    self.extra_body = dict(extra_body or {})
    self._sleep = sleep
    self._lock = threading.Lock()
    self.consecutive_failures = 0
    self.num_calls = self.num_failed_calls = self.num_attempts = 0

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
      usage = reply.get("usage") or {}
      prompt_tokens = int(usage.get("prompt_tokens") or 0)
      completion_tokens = int(usage.get("completion_tokens") or 0)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
      excerpt = payload[:200].decode("utf-8", errors="replace")
      raise ChatError(f"Malformed chat-completions reply ({error}): {excerpt!r}") from None
    return ChatReply(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                     finish_reason=str(choice.get("finish_reason") or ""), raw=reply)

  def _attempt(self, body):
    """(reply, None), or (None, (error message, retryable, wait override or None))."""
    try:
      return self._parse(self._request(body)), None
    except urllib.error.HTTPError as error:
      detail = error.read()[:300].decode("utf-8", errors="replace")
      retryable = error.code == 429 or error.code >= 500
      wait = None
      retry_after = error.headers.get("Retry-After") if error.headers else None
      if retryable and retry_after:
        try:
          wait = min(max(float(retry_after), 0.0), self.max_backoff_seconds)
        except ValueError:
          pass
      return None, (f"HTTP {error.code}: {detail}", retryable, wait)
    except urllib.error.URLError as error:
      reason = error.reason
      kind = "timed out" if isinstance(reason, (socket.timeout, TimeoutError)) else "unreachable"
      return None, (f"{kind} ({reason})", True, None)
    except (socket.timeout, TimeoutError) as error:
      return None, (f"timed out after {self.timeout_seconds} s ({error or 'no reply'})", True,
                    None)
    except (ConnectionError, http.client.HTTPException, OSError) as error:
      return None, (f"connection failed ({type(error).__name__}: {error})", True, None)
    except ChatError as error:
      return None, (str(error), True, None)

  def chat(self, messages, **sampling) -> ChatReply:
    """One chat completion. sampling: any of SAMPLING_FIELDS (None values are left out)."""
    unknown = set(sampling) - set(SAMPLING_FIELDS)
    if unknown:
      raise TypeError(f"chat() got unknown sampling arguments {sorted(unknown)}; allowed: "
                      f"{', '.join(SAMPLING_FIELDS)}.")
    body = {"model": self.model, "messages": list(messages), **self.extra_body,
            **{k: (list(v) if isinstance(v, tuple) else v) for k, v in sampling.items()
               if v is not None}}
    if body.get("top_k") == 0:
      body.pop("top_k")
    backoff, failure = self.initial_backoff_seconds, None
    for attempt in range(self.max_retries + 1):
      with self._lock:
        self.num_attempts += 1
      reply, failure = self._attempt(body)
      if reply is not None:
        with self._lock:
          self.num_calls += 1
          self.consecutive_failures = 0
        return reply
      message, retryable, wait = failure
      if not retryable or attempt == self.max_retries:
        break
      self._sleep(backoff if wait is None else wait)
      backoff = min(backoff * 2, self.max_backoff_seconds)
    with self._lock:
      self.num_calls += 1
      self.num_failed_calls += 1
      self.consecutive_failures += 1
      consecutive = self.consecutive_failures
    message = f"{self.url} {failure[0]}"
    if consecutive >= self.max_consecutive_failures:
      raise EndpointUnavailable(self.url, consecutive, message, attempt + 1)
    raise ChatError(message)
