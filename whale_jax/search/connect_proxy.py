"""An HTTP CONNECT proxy on a Unix socket that opens tunnels to listed host:port pairs only.

  proxy = ConnectProxy(socket_path, allow=parse_allow_list(["api.anthropic.com:443"]),
                       log_path="agent_sessions/iteration_002/cli_session_00.https.jsonl")
  ...  # a jailed agent's HTTPS_PROXY leads here (search/cli_agent.py relays it)
  proxy.close()
  proxy.counts()   # {"allowed": 3, "refused": 1, "failed": 0}

The one request it serves is `CONNECT host:port HTTP/1.1` with host:port on the allow list:
it resolves host on this side (resolve(host) -> addresses; the jail has no DNS), connects,
answers `200 Connection established` and from then on only copies bytes both ways, so TLS
stays between the agent and the server (the proxy never sees a key or a plaintext byte).
Everything else is answered and closed: another method (`GET http://...` proxying) 405, a
host:port off the list 403, a malformed request 400, a request head not complete within
header_timeout_seconds or over MAX_HEADER_BYTES 408/431, more than max_tunnels connections
at once 503, a listed host that cannot be reached 502. A tunnel with no byte either way for
idle_timeout_seconds is closed; close() ends the tunnels still open.

Each request is one JSON line of log_path, written when it ends: time (UTC, when it came),
verdict ("allowed": a tunnel was opened; "refused": the policy said no; "failed": listed but
unreachable), status, target, reason, address (the one connected to), bytes_to_server,
bytes_to_agent (the tunnel's bytes, TLS records included) and seconds; after max_log_lines
lines one "log_full" line, and the requests are only counted (counts()).
"""
import collections
import datetime
import ipaddress
import json
import os
import re
import selectors
import socket
import threading
import time

MAX_HEADER_BYTES = 8192
CHUNK_BYTES = 65536
LINGER_SECONDS = 1.0   # after a refusal, what the agent still sends is read (and dropped) this long
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?$")
_REASONS = {200: "Connection established", 400: "Bad Request", 403: "Forbidden",
            405: "Method Not Allowed", 408: "Request Timeout", 431:
            "Request Header Fields Too Large", 502: "Bad Gateway", 503: "Service Unavailable"}


def parse_target(text):
  """(host, port) of "host:port" ("[v6]:port" for an IPv6 address), host lower-cased and
  without a trailing dot; raises ValueError saying what is wrong."""
  if not isinstance(text, str):
    raise ValueError(f"{text!r} is not a 'host:port' string")
  host, colon, port = text.strip().rpartition(":")
  if not colon or not port.isdigit() or not 1 <= int(port) <= 65535:
    raise ValueError(f"{text!r} is not host:port with a port from 1 to 65535 "
                     "(e.g. 'api.anthropic.com:443')")
  host = host.lower().rstrip(".") if not host.startswith("[") else host
  if host.startswith("[") and host.endswith("]"):
    try:
      host = f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
    except ValueError:
      raise ValueError(f"{text!r} has a bracketed host that is not an IPv6 address") from None
  elif not _HOST_NAME.match(host) or ".." in host:
    raise ValueError(f"{text!r} does not start with a host name or address (letters, digits, "
                     "'.', '-'; no wildcards, schemes or paths; '[v6]:port' for IPv6)")
  return host, int(port)


def parse_allow_list(entries):
  """The frozenset of normalised "host:port" strings of entries (a list or tuple of them);
  raises ValueError naming the first bad one."""
  if isinstance(entries, str) or not isinstance(entries, (list, tuple, frozenset, set)):
    raise ValueError(f"the allow list {entries!r} must be a list of 'host:port' strings, e.g. "
                     "('api.anthropic.com:443',)")
  allowed = set()
  for entry in entries:
    host, port = parse_target(entry)
    allowed.add(f"{host}:{port}")
  return frozenset(allowed)


def resolve_host(host):
  """The host's addresses by this machine's resolver, in its order, without repeats."""
  if host.startswith("["):
    return [host[1:-1]]
  infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
  return list(dict.fromkeys(info[4][0] for info in infos))


def _answer(connection, status, text=""):
  body = (text + "\n").encode() if text else b""
  head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
          + ("Allow: CONNECT\r\n" if status == 405 else "")
          + ("" if status == 200 else
             f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n")
          + "\r\n")
  connection.sendall(head.encode() + (b"" if status == 200 else body))


def _linger(connection):
  """Ends the answer and reads what the agent still sends for up to LINGER_SECONDS, so that it
  reads the answer instead of failing to write the rest of its request."""
  deadline = time.monotonic() + LINGER_SECONDS
  try:
    connection.shutdown(socket.SHUT_WR)
    received = 0
    while received < 16 * CHUNK_BYTES and (remaining := deadline - time.monotonic()) > 0:
      connection.settimeout(remaining)
      chunk = connection.recv(CHUNK_BYTES)
      if not chunk:
        return
      received += len(chunk)
  except OSError:
    pass


class ConnectProxy:
  """Serves CONNECT requests on a Unix socket (see the module docstring).

  Args:
    socket_path: where the proxy listens (a path whose folder only its clients can reach).
    allow: the "host:port" strings a tunnel may go to (parse_allow_list's result).
    log_path: the JSON-lines log (created, or emptied); None for no log file.
    resolve: host -> list of addresses (default resolve_host; tests map names to 127.0.0.1).
    max_tunnels: the most connections served at once (tunnels and requests being read).
    idle_timeout_seconds: a tunnel with no byte either way for this long is closed.
    connect_timeout_seconds: the longest the connection to one address may take.
    header_timeout_seconds: the longest the request head may take to arrive.
    max_log_lines: lines written to the log at most (then one line saying so); the counts go
      on.
  """

  def __init__(self, socket_path, allow, log_path=None, resolve=None, max_tunnels=16,
               idle_timeout_seconds=120.0, connect_timeout_seconds=10.0,
               header_timeout_seconds=10.0, max_log_lines=10_000):
    self.allow = parse_allow_list(allow)
    self.resolve = resolve or resolve_host
    self.max_tunnels = max_tunnels
    self.idle_timeout_seconds = idle_timeout_seconds
    self.connect_timeout_seconds = connect_timeout_seconds
    self.header_timeout_seconds = header_timeout_seconds
    self.log_path, self.max_log_lines = log_path, max_log_lines
    self._log, self._log_lines = None, 0
    if log_path is not None:
      os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
      self._log = open(log_path, "w", encoding="utf-8")  # pylint: disable=consider-using-with
    self._lock = threading.Lock()
    self._counts = {"allowed": 0, "refused": 0, "failed": 0}
    self._open_sockets, self._threads = set(), set()
    self._turned_away = collections.deque()   # answered 503, kept open so the answer is read
    self._closed = False
    self._server = socket.socket(socket.AF_UNIX)
    self._server.bind(socket_path)
    self._server.listen(64)
    self._accepter = threading.Thread(target=self._accept, daemon=True)
    self._accepter.start()

  def counts(self):
    """{"allowed", "refused", "failed"}: the requests so far by verdict (logged ones)."""
    with self._lock:
      return dict(self._counts)

  def close(self, join_seconds=5.0):
    """Stops accepting, ends the open tunnels, waits for their log lines, closes the log."""
    with self._lock:
      self._closed = True
      sockets = list(self._open_sockets)
      while self._turned_away:
        self._turned_away.popleft().close()
    try:
      self._server.shutdown(socket.SHUT_RDWR)   # wakes accept()
    except OSError:
      pass
    self._server.close()
    for connection in sockets:
      try:
        connection.shutdown(socket.SHUT_RDWR)
      except OSError:
        pass
    deadline = time.monotonic() + join_seconds
    self._accepter.join(max(0.0, deadline - time.monotonic()))
    with self._lock:
      threads = list(self._threads)
    for thread in threads:
      thread.join(max(0.0, deadline - time.monotonic()))
    with self._lock:
      if self._log is not None:
        self._log.close()
        self._log = None

  def _accept(self):
    while True:
      try:
        connection, _ = self._server.accept()
      except OSError:
        if self._closed:
          return
        time.sleep(0.05)    # e.g. out of file descriptors: tunnels will end
        continue
      with self._lock:
        if self._closed:
          connection.close()
          return
        busy = len(self._threads) >= self.max_tunnels
        if not busy:
          thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
          self._threads.add(thread)
          self._open_sockets.add(connection)
      if busy:  # answered at once, without a thread; the socket is closed when more come
        record, started = self._record(), time.monotonic()
        try:
          connection.setblocking(False)
          _answer(connection, 503, f"The proxy already serves max_tunnels={self.max_tunnels} "
                  "connections; close one and retry.")
          connection.shutdown(socket.SHUT_WR)
        except OSError:
          pass
        with self._lock:
          self._turned_away.append(connection)
          if len(self._turned_away) > self.max_tunnels:
            self._turned_away.popleft().close()
        self._finish(record, started, "refused", 503, f"over max_tunnels={self.max_tunnels}")
      else:
        thread.start()

  @staticmethod
  def _record():
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
    return {"time": now, "target": "", "address": "", "bytes_to_server": 0,
            "bytes_to_agent": 0}

  def _finish(self, record, started, verdict, status, reason):
    record.update(verdict=verdict, status=status, reason=reason,
                  seconds=round(time.monotonic() - started, 3))
    with self._lock:
      self._counts[verdict] += 1
      if self._log is None or self._log_lines > self.max_log_lines:
        return
      self._log_lines += 1
      if self._log_lines > self.max_log_lines:
        record = {"time": record["time"], "verdict": "log_full", "reason":
                  f"max_log_lines={self.max_log_lines} reached; later requests are only counted"}
      self._log.write(json.dumps(record, sort_keys=True) + "\n")
      self._log.flush()

  def _serve(self, connection):
    record, started = self._record(), time.monotonic()
    upstream = None
    try:
      try:
        verdict, status, reason, upstream, rest = self._open_tunnel(connection, record)
      except OSError as error:      # the agent went away before its answer
        verdict, status, reason, rest = "refused", 400, f"connection error: {error}", b""
      if upstream is not None:
        with self._lock:
          self._open_sockets.add(upstream)
          closed = self._closed
        if not closed:
          reason = self._pipe(connection, upstream, rest, record)
        with self._lock:
          reason = "proxy closed" if self._closed else reason
      else:
        _linger(connection)
      self._finish(record, started, verdict, status, reason)
    finally:
      with self._lock:
        self._open_sockets.discard(connection)
        self._open_sockets.discard(upstream)
        self._threads.discard(threading.current_thread())
      for each in (connection, upstream):
        if each is not None:
          each.close()

  def _read_head(self, connection):
    """(head bytes, bytes after it) or (None, status) when it is too slow or too big."""
    deadline = time.monotonic() + self.header_timeout_seconds
    data = b""
    while b"\r\n\r\n" not in data:
      if len(data) > MAX_HEADER_BYTES:
        return None, 431
      remaining = deadline - time.monotonic()
      if remaining <= 0:
        return None, 408
      connection.settimeout(remaining)
      try:
        chunk = connection.recv(MAX_HEADER_BYTES)
      except socket.timeout:
        return None, 408
      if not chunk:
        return None, 400
      data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > MAX_HEADER_BYTES:
      return None, 431
    return head, rest

  def _open_tunnel(self, connection, record):
    """(verdict, status, reason, upstream socket or None, bytes the agent already sent)."""
    head, rest = self._read_head(connection)
    if head is None:
      why = {400: "closed before a whole request", 408: "request head too slow",
             431: f"request head over {MAX_HEADER_BYTES} bytes"}[rest]
      _answer(connection, rest, f"Refused: {why}.")
      return "refused", rest, why, None, b""
    request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = request_line.split(" ")
    record["target"] = (parts[1] if len(parts) == 3 else request_line)[:300]
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
      _answer(connection, 400, "Refused: not an HTTP/1.x request line.")
      return "refused", 400, "malformed request line", None, b""
    method, target = parts[0], parts[1]
    if method != "CONNECT":
      _answer(connection, 405, f"Refused: this proxy only opens CONNECT tunnels (HTTPS) to "
              f"{sorted(self.allow)}; {method} is not proxied.")
      return "refused", 405, f"method {method[:20]}", None, b""
    try:
      host, port = parse_target(target)
    except ValueError as error:
      _answer(connection, 400, f"Refused: {error}.")
      return "refused", 400, "malformed target", None, b""
    record["target"] = f"{host}:{port}"
    if record["target"] not in self.allow:
      _answer(connection, 403, f"Refused: {record['target']} is not on this session's allow "
              f"list {sorted(self.allow)}.")
      return "refused", 403, "not on the allow list", None, b""
    try:
      addresses = self.resolve(host)
    except OSError as error:
      _answer(connection, 502, f"{host} could not be resolved: {error}.")
      return "failed", 502, f"resolve: {error}", None, b""
    errors = []
    for address in addresses:
      try:
        upstream = socket.create_connection((address, port), self.connect_timeout_seconds)
      except OSError as error:
        errors.append(f"{address}: {error}")
        continue
      record["address"] = address
      try:
        _answer(connection, 200)
      except OSError:
        upstream.close()
        raise
      return "allowed", 200, "closed", upstream, rest
    why = "; ".join(errors) or "no address"
    _answer(connection, 502, f"{record['target']} could not be reached: {why}.")
    return "failed", 502, f"connect: {why}"[:500], None, b""

  def _pipe(self, agent, server, rest, record):
    """Copies bytes both ways until both sides end, one fails or both are idle; returns why it
    stopped. A side that ends its sending is passed on as a half close."""
    peers = {agent: (server, "bytes_to_server"), server: (agent, "bytes_to_agent")}
    for each in (agent, server):
      each.settimeout(self.idle_timeout_seconds)   # bounds a sendall to a stalled reader
    if rest:
      try:
        server.sendall(rest)
      except OSError as error:
        return f"send error: {error}"
      record["bytes_to_server"] += len(rest)
    with selectors.DefaultSelector() as selector:
      for each in (agent, server):
        selector.register(each, selectors.EVENT_READ)
      reading = 2
      while reading:
        events = selector.select(self.idle_timeout_seconds)
        if not events:
          return f"idle for {self.idle_timeout_seconds:g} s"
        for key, _ in events:
          source = key.fileobj
          target, counter = peers[source]
          try:
            data = source.recv(CHUNK_BYTES)
          except OSError as error:
            return f"receive error: {error}"
          if not data:
            selector.unregister(source)
            reading -= 1
            try:
              target.shutdown(socket.SHUT_WR)
            except OSError:
              pass
            continue
          try:
            target.sendall(data)
          except OSError as error:
            return f"send error: {error}"
          record[counter] += len(data)
    return "closed"
