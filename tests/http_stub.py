"""A stub HTTP server on 127.0.0.1 for the tests of real HTTP clients (OpenAI-compatible
endpoints, judges, retrievers, code sandboxes): what it received is the tests' independent
observation of what a client sent."""
import http.server
import json
import threading
import time


class StubServer:
  """Serves each POST with respond(path, body) until close() (or the end of a with block).

  Args:
    respond: respond(path, body) -> (status, reply[, headers]): body is the request's parsed
      JSON; reply is a JSON-able object, raw bytes (e.g. a malformed reply), or None for an
      empty body; headers, a dict of extra response headers. It may sleep (a slow server).
  Attributes:
    requests: (path, body) of every POST received, in order.
    headers: the request headers of each, in the same order.
    base: "http://127.0.0.1:<port>".
  """

  def __init__(self, respond):
    self.requests, self.headers = [], []
    stub = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_POST(self):  # pylint: disable=invalid-name
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        stub.requests.append((self.path, body))
        stub.headers.append(dict(self.headers))
        status, reply, *extra = respond(self.path, body)
        if reply is None or isinstance(reply, bytes):
          payload = reply or b""
        else:
          payload = json.dumps(reply).encode()
        try:
          self.send_response(status)
          for name, value in (extra[0] if extra else {"Content-Type": "application/json"}
                              if payload else {}).items():
            self.send_header(name, value)
          self.send_header("Content-Length", str(len(payload)))
          self.end_headers()
          self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
          return

      def log_message(self, *args):
        """Keeps the request log out of the test output."""

    self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
    threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

  @property
  def bodies(self):
    return [body for _, body in self.requests]

  def close(self):
    self.server.shutdown()
    self.server.server_close()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()


def chat_reply(content, usage=None, **message):
  """A chat.completion reply whose one choice says content (and any other message fields)."""
  reply = {"id": "stub", "object": "chat.completion", "model": "stub",
           "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content, **message}}]}
  if usage is not None:
    reply["usage"] = usage
  return reply


class ScriptedServer(StubServer):
  """Answers POSTs in order from a script of (status, body bytes, headers, delay seconds);
  `with ScriptedServer(script) as url` gives its base URL with /v1."""

  def __init__(self, script):
    self.script = list(script)

    def respond(path, body):
      status, payload, headers, delay = self.script.pop(0)
      time.sleep(delay)
      return status, payload, headers
    super().__init__(respond)

  def __enter__(self):
    return self.base + "/v1"
