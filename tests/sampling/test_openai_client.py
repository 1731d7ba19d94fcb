"""OpenAICompatibleClient against real local HTTP servers on 127.0.0.1 that inject faults:
refused connections, 429 then success, a hang past the timeout, garbage JSON, a truncated
reply, a server process killed mid-sequence, and the consecutive-failure stop."""
import http.server
import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests import http_stub
from whale_jax.sampling.openai_client import ChatError
from whale_jax.sampling.openai_client import EndpointUnavailable
from whale_jax.sampling.openai_client import OpenAICompatibleClient

OK_REPLY = {"choices": [{"message": {"role": "assistant", "content": "CORRECT"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 1}}


class StubServer(http_stub.ScriptedServer):
  """Answers POSTs from a script: each entry is (status, body bytes, headers, delay)."""

  @property
  def received(self):
    """(path, headers, body) of each request."""
    return [(path, headers, body) for (path, body), headers in zip(self.requests, self.headers)]


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
  path, headers, body = stub.received[0]
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


def _free_port():
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def test_refused_connection_is_retried_then_stops_the_run():
  url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
  client, sleeps = _client(url, max_retries=2, max_consecutive_failures=2)
  started = time.perf_counter()
  with pytest.raises(ChatError, match="unreachable.*refused"):
    client.chat([{"role": "user", "content": "q"}])
  assert sleeps == [1.0, 2.0]  # two retries, backoff doubling
  with pytest.raises(EndpointUnavailable) as raised:
    client.chat([{"role": "user", "content": "q"}])
  assert time.perf_counter() - started < 5
  message = str(raised.value)
  assert url + "/chat/completions" in message and "2 calls in a row" in message
  assert "refused" in message and "same --workdir" in message
  assert not isinstance(raised.value, ChatError)  # recorders of ChatError let it through
  assert (client.num_calls, client.num_failed_calls, client.num_attempts) == (2, 2, 6)


def test_a_429_then_success_resets_the_failure_count():
  script = [(429, b"busy", {}, 0), (200, json.dumps(OK_REPLY).encode(), {}, 0)]
  with StubServer(script) as url:
    client, sleeps = _client(url, max_retries=0, max_consecutive_failures=2)
    with pytest.raises(ChatError, match="HTTP 429"):
      client.chat([{"role": "user", "content": "q"}])
    assert client.consecutive_failures == 1
    assert client.chat([{"role": "user", "content": "q"}]).text == "CORRECT"
  assert client.consecutive_failures == 0 and sleeps == []


def test_hang_past_the_timeout_fails_each_attempt_in_time():
  script = [(200, json.dumps(OK_REPLY).encode(), {}, 3.0)] * 2
  with StubServer(script) as url:
    client, sleeps = _client(url, timeout_seconds=0.3, max_retries=1, max_consecutive_failures=1)
    started = time.perf_counter()
    with pytest.raises(EndpointUnavailable, match="timed out"):
      client.chat([{"role": "user", "content": "q"}])
    elapsed = time.perf_counter() - started
  assert 0.5 < elapsed < 2.0, elapsed  # two attempts of ~0.3 s, not the 3 s hang
  assert sleeps == [1.0]


def test_garbage_json_is_retried():
  script = [(200, b"\x00\xffgarbage{", {}, 0), (200, b'{"choices": "x"}', {}, 0),
            (200, json.dumps(OK_REPLY).encode(), {}, 0)]
  with StubServer(script) as url:
    client, sleeps = _client(url)
    assert client.chat([{"role": "user", "content": "q"}]).text == "CORRECT"
  assert len(sleeps) == 2


def test_truncated_reply_is_a_transient_failure():
  class Truncating(http.server.BaseHTTPRequestHandler):
    calls = []

    def do_POST(self):  # pylint: disable=invalid-name
      self.rfile.read(int(self.headers["Content-Length"]))
      Truncating.calls.append(1)
      body = json.dumps(OK_REPLY).encode()
      self.send_response(200)
      self.send_header("Content-Length", str(len(body)))
      self.end_headers()
      if len(Truncating.calls) == 1:
        self.wfile.write(body[:10])  # then the connection closes: an incomplete read
        self.close_connection = True
      else:
        self.wfile.write(body)

    def log_message(self, *args):
      pass
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Truncating)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  try:
    client, sleeps = _client(f"http://127.0.0.1:{server.server_port}/v1")
    assert client.chat([{"role": "user", "content": "q"}]).text == "CORRECT"
  finally:
    server.shutdown()
    server.server_close()
  assert len(Truncating.calls) == 2 and len(sleeps) == 1


SERVER_PROCESS = """
import http.server, json, sys
REPLY = json.dumps({"choices": [{"message": {"content": "CORRECT"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
class Handler(http.server.BaseHTTPRequestHandler):
  def do_POST(self):
    self.rfile.read(int(self.headers["Content-Length"]))
    self.send_response(200)
    self.send_header("Content-Length", str(len(REPLY)))
    self.end_headers()
    self.wfile.write(REPLY)
  def log_message(self, *args):
    pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print("ready", flush=True)
server.serve_forever()
"""


def _start_server_process(port):
  process = subprocess.Popen([sys.executable, "-c", SERVER_PROCESS, str(port)],
                             stdout=subprocess.PIPE, text=True)
  assert process.stdout.readline().strip() == "ready"
  return process


def test_server_killed_mid_sequence_stops_then_resumes():
  port = _free_port()
  process = _start_server_process(port)
  client, _ = _client(f"http://127.0.0.1:{port}/v1", max_retries=1, max_consecutive_failures=2)
  try:
    replies = [client.chat([{"role": "user", "content": f"q{i}"}]).text for i in range(3)]
    process.kill()
    process.wait()
    with pytest.raises(ChatError):
      client.chat([{"role": "user", "content": "q3"}])
    with pytest.raises(EndpointUnavailable, match=f"127.0.0.1:{port}"):
      client.chat([{"role": "user", "content": "q3"}])
    process = _start_server_process(port)  # the server is back: the same client goes on
    replies.append(client.chat([{"role": "user", "content": "q3"}]).text)
  finally:
    process.kill()
    process.wait()
  assert replies == ["CORRECT"] * 4 and client.consecutive_failures == 0


def test_client_errors_count_towards_the_stop():
  script = [(404, b'{"error": "no model judge"}', {}, 0)] * 2
  with StubServer(script) as url:
    client, sleeps = _client(url, max_consecutive_failures=2)
    with pytest.raises(ChatError, match="HTTP 404.*no model judge"):
      client.chat([{"role": "user", "content": "q"}])
    with pytest.raises(EndpointUnavailable, match="HTTP 404"):
      client.chat([{"role": "user", "content": "q"}])
  assert sleeps == []


@pytest.mark.parametrize("option, value", [
    ("max_retries", -1), ("max_consecutive_failures", 0), ("timeout_seconds", 0),
    ("initial_backoff_seconds", -1.0)])
def test_bad_client_options_are_named(option, value):
  with pytest.raises(ValueError, match=option):
    OpenAICompatibleClient("http://x/v1", model="m", api_key_env=None, **{option: value})
