"""A stub of a hosted OpenAI-style chat-completions API on 127.0.0.1, for the judge's tests.

It behaves as a hosted API does where that matters to a client at scale: a request field it
does not know is a 400 naming it ({"error": {"message": "Unrecognized request argument
supplied: guided_choice", "type": "invalid_request_error", ...}}), scripted failures (a 429
with Retry-After, a 500) come first, every server_error_every-th request is a 500, each
reply takes latency_seconds, and replies carry usage. What it counts (requests, statuses, the
most requests in flight at once) is the tests' independent observation of the client.

  with HostedAPIStub(latency_seconds=0.05) as stub:
    judge = openai_judge(stub.url, "gpt-5.4-mini")
"""
import http.server
import json
import re
import threading
import time

# The chat-completions request fields the stub knows (OpenAI's, without vLLM's extensions).
KNOWN_FIELDS = frozenset((
    "model", "messages", "temperature", "top_p", "n", "stop", "seed", "stream",
    "stream_options", "max_tokens", "max_completion_tokens", "presence_penalty",
    "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "user", "tools",
    "tool_choice", "response_format", "reasoning_effort", "service_tier"))
_JUDGE_SLOTS = re.compile(r"Reference answer\(s\): (.*) Predicted answer: (.*) Respond with",
                          re.DOTALL)


def judge_like_reply(prompt):
  """CORRECT when the prompt's predicted answer is one of its reference answers (case
  ignored), else INCORRECT; "I cannot tell" for a prompt without the judge's slots."""
  match = _JUDGE_SLOTS.search(prompt)
  if match is None:
    return "I cannot tell"
  golds = {gold.strip().lower() for gold in match.group(1).split(" | ")}
  return "CORRECT" if match.group(2).strip().lower() in golds else "INCORRECT"


class HostedAPIStub:
  """POST /v1/chat/completions answered like a hosted API, until close().

  Args:
    reply: prompt (the last message's content) -> reply text.
    latency_seconds: how long each answer takes (errors included).
    failures: (status, headers) answered, in order, to the first requests that get past the
      field check (e.g. [(429, {"Retry-After": "1"}), (500, {})]).
    server_error_every: every n-th such request after the scripted ones is a 500 (0: never).
    known_fields: the request fields accepted; any other is a 400 naming it.
  Attributes:
    url: the API root, "http://127.0.0.1:<port>/v1".
    bodies: every request body received, in arrival order.
    statuses: the status answered to each request, in answer order.
    max_in_flight: the most requests being answered at once.
  """

  def __init__(self, reply=judge_like_reply, latency_seconds=0.0, failures=(),
               server_error_every=0, known_fields=KNOWN_FIELDS):
    self.bodies, self.statuses, self.max_in_flight = [], [], 0
    self._failures, self._in_flight, self._served = list(failures), 0, 0
    self._lock = threading.Lock()
    stub = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_POST(self):  # pylint: disable=invalid-name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        with stub._lock:
          stub.bodies.append(body)
          stub._in_flight += 1
          stub.max_in_flight = max(stub.max_in_flight, stub._in_flight)
        try:
          time.sleep(latency_seconds)
          status, payload, headers = stub._answer(body, reply, known_fields,
                                                  server_error_every)
        finally:
          with stub._lock:
            stub._in_flight -= 1
            stub.statuses.append(status)
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
          self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

      def log_message(self, *args):
        """Keeps the request log out of the test output."""

    class Server(http.server.ThreadingHTTPServer):
      request_queue_size = 256  # 64+ clients connect at once; the default backlog is 5

    self._server = Server(("127.0.0.1", 0), Handler)
    self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
    threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

  def _answer(self, body, reply, known_fields, server_error_every):
    unknown = [name for name in body if name not in known_fields]
    if unknown:
      plural = "s" if len(unknown) > 1 else ""
      return 400, _error(f"Unrecognized request argument{plural} supplied: "
                         f"{', '.join(unknown)}", "invalid_request_error"), {}
    with self._lock:
      failure = self._failures.pop(0) if self._failures else None
      if failure is None:
        self._served += 1
        failure = ((500, {}) if server_error_every and self._served % server_error_every == 0
                   else None)
    if failure is not None:
      status, headers = failure
      kind = "rate_limit_exceeded" if status == 429 else "server_error"
      return status, _error(f"stub failure {status}", kind), dict(headers)
    prompt = body["messages"][-1]["content"]
    text = reply(prompt)
    return 200, {
        "id": "chatcmpl-stub", "object": "chat.completion", "model": body.get("model"),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 1,
                  "total_tokens": len(prompt.split()) + 1}}, {}

  @property
  def answered(self):
    """Requests answered 200 (verdicts the API was asked for and gave)."""
    with self._lock:
      return self.statuses.count(200)

  def close(self):
    self._server.shutdown()
    self._server.server_close()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()


def _error(message, kind):
  return {"error": {"message": message, "type": kind, "param": None, "code": None}}
