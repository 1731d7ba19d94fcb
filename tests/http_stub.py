"""A stub HTTP server on 127.0.0.1 for the tests of real HTTP clients (OpenAI-compatible
endpoints, judges, retrievers, code sandboxes): what it received is the tests' independent
observation of what a client sent."""
import http.server
import json
import threading


class StubServer:
  """Serves each POST with respond(path, body) until close() (or the end of a with block).

  Args:
    respond: respond(path, body) -> (status, reply): body is the request's parsed JSON; reply
      is a JSON-able object, raw bytes (e.g. a malformed reply), or None for an empty body.
  Attributes:
    requests: (path, body) of every POST received, in order.
    base: "http://127.0.0.1:<port>".
  """

  def __init__(self, respond):
    self.requests = []
    stub = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_POST(self):  # pylint: disable=invalid-name
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        stub.requests.append((self.path, body))
        status, reply = respond(self.path, body)
        if reply is None or isinstance(reply, bytes):
          payload = reply or b""
        else:
          payload = json.dumps(reply).encode()
        self.send_response(status)
        if payload:
          self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

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
