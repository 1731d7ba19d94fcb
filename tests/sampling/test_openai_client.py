"""OpenAICompatibleClient against a local stub server: success, malformed, timeout, 429."""
import http.server
import json
import threading
import time

import pytest

from whale_jax.sampling.openai_client import ChatError
from whale_jax.sampling.openai_client import OpenAICompatibleClient

OK_REPLY = {"choices": [{"message": {"role": "assistant", "content": "CORRECT"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 1}}


class StubServer:
  """Answers POSTs from a script: each entry is (status, body bytes, headers, delay)."""

  def __init__(self, script):
    self.script, self.requests = list(script), []
    stub = self

    class Handler(http.server.BaseHTTPRequestHandler):

      def do_POST(self):  # pylint: disable=invalid-name
        length = int(self.headers["Content-Length"])
        stub.requests.append((self.path, dict(self.headers), json.loads(self.rfile.read(length))))
        status, body, headers, delay = stub.script.pop(0)
        time.sleep(delay)
        try:
          self.send_response(status)
          for name, value in headers.items():
            self.send_header(name, value)
          self.send_header("Content-Length", str(len(body)))
          self.end_headers()
          self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
          pass

      def log_message(self, *args):
        pass

    self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

  def __enter__(self):
    self.thread.start()
    return f"http://127.0.0.1:{self.server.server_port}/v1"

  def __exit__(self, *exc):
    self.server.shutdown()
    self.server.server_close()


def _client(url, **kwargs):
  sleeps = []
  client = OpenAICompatibleClient(url, model="judge", api_key_env=None, sleep=sleeps.append,
                                  **kwargs)
  return client, sleeps


def test_success_sends_model_messages_and_sampling(monkeypatch):
  monkeypatch.setenv("TEST_KEY", "secret-123")
  with StubServer([(200, json.dumps(OK_REPLY).encode(), {}, 0)]) as url:
    client = OpenAICompatibleClient(url, model="judge", api_key_env="TEST_KEY")
    reply = client.chat([{"role": "user", "content": "q"}], temperature=0.0, max_tokens=8,
                        stop=("\n",), top_k=0)
  assert reply.text == "CORRECT" and reply.prompt_tokens == 11 and reply.finish_reason == "stop"


def test_request_body_and_auth_header(monkeypatch):
  monkeypatch.setenv("TEST_KEY", "secret-123")
  stub = StubServer([(200, json.dumps(OK_REPLY).encode(), {}, 0)])
  with stub as url:
    OpenAICompatibleClient(url, model="judge", api_key_env="TEST_KEY").chat(
        [{"role": "user", "content": "q"}], temperature=0.0, stop=("\n",), top_k=0)
  path, headers, body = stub.requests[0]
  assert path == "/v1/chat/completions"
  assert headers["Authorization"] == "Bearer secret-123"
  assert body == {"model": "judge", "messages": [{"role": "user", "content": "q"}],
                  "temperature": 0.0, "stop": ["\n"]}


def test_malformed_reply_is_retried_then_raised():
  script = [(200, b"not json", {}, 0), (200, b'{"choices": []}', {}, 0)]
  with StubServer(script) as url:
    client, sleeps = _client(url, max_retries=1)
    with pytest.raises(ChatError, match="Malformed chat-completions reply"):
      client.chat([{"role": "user", "content": "q"}])
  assert sleeps == [1.0]


def test_malformed_then_good_reply_succeeds():
  script = [(200, b'{"choices": [{"message": {}}]}', {}, 0),
            (200, json.dumps(OK_REPLY).encode(), {}, 0)]
  with StubServer(script) as url:
    client, sleeps = _client(url)
    assert client.chat([{"role": "user", "content": "q"}]).text == "CORRECT"
  assert len(sleeps) == 1


def test_timeout_is_retried_then_raised():
  script = [(200, json.dumps(OK_REPLY).encode(), {}, 1.0)] * 2
  with StubServer(script) as url:
    client, sleeps = _client(url, timeout_seconds=0.2, max_retries=1)
    with pytest.raises(ChatError, match="timed out"):
      client.chat([{"role": "user", "content": "q"}])
  assert sleeps == [1.0]


def test_429_honours_retry_after_then_succeeds():
  script = [(429, b"slow down", {"Retry-After": "7"}, 0), (503, b"busy", {}, 0),
            (200, json.dumps(OK_REPLY).encode(), {}, 0)]
  with StubServer(script) as url:
    client, sleeps = _client(url)
    assert client.chat([{"role": "user", "content": "q"}]).text == "CORRECT"
  assert sleeps == [7.0, 2.0]  # Retry-After, then the doubled backoff


def test_client_error_is_not_retried():
  with StubServer([(400, b'{"error": "bad model"}', {}, 0)]) as url:
    client, sleeps = _client(url)
    with pytest.raises(ChatError, match="HTTP 400.*bad model"):
      client.chat([{"role": "user", "content": "q"}])
  assert sleeps == []


def test_bad_arguments_are_named(monkeypatch):
  monkeypatch.delenv("MISSING_KEY", raising=False)
  with pytest.raises(ValueError, match="MISSING_KEY"):
    OpenAICompatibleClient("http://x/v1", model="m", api_key_env="MISSING_KEY")
  with pytest.raises(ValueError, match="must start with http"):
    OpenAICompatibleClient("localhost:8000", model="m", api_key_env=None)
  client = OpenAICompatibleClient("http://x/v1", model="m", api_key_env=None)
  with pytest.raises(TypeError, match="temprature"):
    client.chat([{"role": "user", "content": "q"}], temprature=1.0)
