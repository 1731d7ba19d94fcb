"""HTTPS out of the CLI agent's jail: a real agent process in the real jail reaches a listed TLS
server through HTTPS_PROXY (TLS checked end to end against a test CA), and nothing else; the
host-side CONNECT proxy refuses other methods and hosts, bounds its tunnels and logs each
request."""
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

from tests.search import fakes
from whale_jax import tasks
from whale_jax import typed_config
from whale_jax.algorithms import sections
from whale_jax.harness import Harness
from whale_jax.search import cli_agent
from whale_jax.search import connect_proxy
from whale_jax.search import meta_harness

NAMES = ("allowed.test", "refused.test")

AGENT = """\
import json, os, socket, sys, urllib.request
allowed_url, refused_url, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def attempt(action):
  try:
    return action()
  except Exception as error:  # the message is the result
    return f"error: {type(error).__name__}: {error}"
def plain_get():
  proxy_port = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
  connection = socket.create_connection(("127.0.0.1", proxy_port), timeout=5)
  connection.sendall(f"GET http://allowed.test:{port}/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
  return connection.recv(4096).decode().split("\\r\\n")[0]
def direct():
  socket.create_connection(("127.0.0.1", port), timeout=2)
  return "CONNECTED"
print(json.dumps({
    "allowed": attempt(lambda: urllib.request.urlopen(allowed_url, timeout=5).read().decode()),
    "refused": attempt(lambda: urllib.request.urlopen(refused_url, timeout=5).read().decode()),
    "plain": attempt(plain_get),
    "direct": attempt(direct),
    "dns": attempt(lambda: str(socket.getaddrinfo("allowed.test", 443)))}))
"""

PROPOSER_AGENT = """\
import json, sys, urllib.request
print(json.dumps({"reply": urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()}))
"""


def _openssl(*args, cwd):
  subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
  """(CA file, server certificate, server key): a test CA and a server certificate it signed
  for NAMES."""
  if shutil.which("openssl") is None:
    pytest.skip("the openssl program is needed to make the test certificates")
  folder = tmp_path_factory.mktemp("pki")
  curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
  _openssl("req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
           "-subj", "/CN=whale_jax test CA", "-addext", "basicConstraints=critical,CA:TRUE",
           "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
  (folder / "server.ext").write_text(
      f"subjectAltName={','.join('DNS:' + name for name in NAMES)}\n"
      "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
      "extendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\n"
      "authorityKeyIdentifier=keyid,issuer\n")
  _openssl("req", *curve, "-keyout", "server.key", "-out", "server.csr", "-subj",
           f"/CN={NAMES[0]}", cwd=folder)
  _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
           "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext",
           cwd=folder)
  return str(folder / "ca.pem"), str(folder / "server.pem"), str(folder / "server.key")


class TlsServer:
  """An HTTPS server on the host's 127.0.0.1 answering every GET with "hello from <name>";
  counts the TCP connections it accepts."""

  def __init__(self, name, certificates):
    _, certificate, key = certificates
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    outer = self
    self.name, self.connections = name, 0

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_GET(self):  # pylint: disable=invalid-name
        body = f"hello from {outer.name}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

      def log_message(self, *args):
        pass

    class Server(http.server.ThreadingHTTPServer):
      daemon_threads = True

      def get_request(self):
        connection, address = self.socket.accept()
        outer.connections += 1
        return context.wrap_socket(connection, server_side=True,
                                   do_handshake_on_connect=False), address

    self.server = Server(("127.0.0.1", 0), Handler)
    self.port = self.server.server_address[1]
    threading.Thread(target=self.server.serve_forever, daemon=True).start()

  def url(self):
    return f"https://{self.name}:{self.port}/"

  def close(self):
    self.server.shutdown()
    self.server.server_close()


@pytest.fixture
def servers(certificates):
  allowed, refused = (TlsServer(name, certificates) for name in NAMES)
  yield allowed, refused
  allowed.close()
  refused.close()


def _resolve(host):
  """The proxy's resolver in these tests: the test names are this machine."""
  if host in NAMES:
    return ["127.0.0.1"]
  raise socket.gaierror(f"{host} is not a test name")


def _python():
  return os.path.realpath(sys.executable)


def _log(path):
  with open(path, encoding="utf-8") as file:
    return [json.loads(line) for line in file]


def _run_agent(tmp_path, certificates, servers, https_allow, environment=None):
  ca_file = certificates[0]
  allowed, refused = servers
  script = tmp_path / "agent.py"
  script.write_text(AGENT)
  workdir = tmp_path / "work"
  workdir.mkdir()
  runner = cli_agent.BwrapRunner(read_only_paths=[str(script), ca_file],
                                 environment={"SSL_CERT_FILE": ca_file, **(environment or {})},
                                 https_allow=https_allow, resolve=_resolve)
  log_path = tmp_path / "session" / "proxy.jsonl"
  result = runner.run([_python(), "-S", str(script), allowed.url(), refused.url(),
                       str(allowed.port)], str(workdir), 20, proxy_log_path=str(log_path))
  assert result.returncode == 0, result.stderr.decode()
  return json.loads(result.stdout.decode().strip().splitlines()[-1]), result, log_path


def test_https_reaches_the_listed_host_and_nothing_else(tmp_path, certificates, servers):
  allowed, refused = servers
  started = time.monotonic()
  output, result, log_path = _run_agent(tmp_path, certificates, servers,
                                        [f"{allowed.name}:{allowed.port}"])
  assert time.monotonic() - started < 10
  assert output["allowed"] == "hello from allowed.test"      # TLS verified against the test CA
  assert "403" in output["refused"] and refused.connections == 0
  assert output["plain"] == "HTTP/1.1 405 Method Not Allowed"
  assert output["direct"].startswith("error: ConnectionRefusedError")
  assert output["dns"].startswith("error: gaierror")          # no names inside the jail
  assert allowed.connections == 1
  assert result.https_proxy == {"allowed": 1, "refused": 2, "failed": 0}
  by_status = {record["status"]: record for record in _log(log_path)}
  assert sorted(by_status) == [200, 403, 405]
  tunnel = by_status[200]
  assert tunnel["verdict"] == "allowed" and tunnel["target"] == f"allowed.test:{allowed.port}"
  assert tunnel["address"] == "127.0.0.1"
  assert tunnel["bytes_to_server"] > 100 and tunnel["bytes_to_agent"] > 100   # TLS records
  assert by_status[403]["verdict"] == "refused"
  assert by_status[403]["target"] == f"refused.test:{refused.port}"
  assert by_status[405]["verdict"] == "refused" and by_status[405]["reason"] == "method GET"
  assert all(record["seconds"] >= 0 and record["time"] for record in by_status.values())


def test_with_the_proxy_off_nothing_leaves(tmp_path, certificates, servers):
  allowed, refused = servers
  # The agent even points HTTPS_PROXY at where the proxy would be: nothing listens, and the
  # jail's seccomp program refuses sockets.
  output, result, log_path = _run_agent(
      tmp_path, certificates, servers, [],
      environment={"HTTPS_PROXY": f"http://127.0.0.1:{cli_agent.PROXY_PORT}"})
  assert output["allowed"].startswith("error:") and output["refused"].startswith("error:")
  assert output["direct"].startswith("error:")
  assert allowed.connections == refused.connections == 0
  assert result.https_proxy is None and not log_path.exists()


def test_the_proposer_logs_the_session_s_https_requests_beside_it(tmp_path, certificates,
                                                                   servers):
  allowed, _ = servers
  domain = tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)
  instances = domain.splits()["harness"]
  script = tmp_path / "agent.py"
  script.write_text(PROPOSER_AGENT)
  proposer = cli_agent.CliAgentProposer(
      [_python(), "-S", str(script), allowed.url()], tmp_path / "archive", domain, instances,
      runner=cli_agent.BwrapRunner(read_only_paths=[str(script), certificates[0]],
                                   environment={"SSL_CERT_FILE": certificates[0]},
                                   https_allow=[f"allowed.test:{allowed.port}"],
                                   resolve=_resolve), wall_clock_seconds=20)
  meta_harness.search(Harness(domain.seed_harness, origin="seed"), fakes.FakeEvaluate(),
                      proposer, tmp_path / "archive", domain=domain, instances=instances,
                      iterations=2, candidates_per_iteration=1, weights_id="w0")
  record = proposer.sessions[0]
  assert '"reply": "hello from allowed.test"' in record["stdout"]
  assert record["https_proxy"] == {"allowed": 1, "refused": 0, "failed": 0,
                                   "log": "cli_session_00.https.jsonl"}
  folder = tmp_path / "archive" / "agent_sessions" / "iteration_002"
  assert sorted(os.listdir(folder)) == ["cli_session_00.https.jsonl", "cli_session_00.json"]
  logged, = _log(folder / "cli_session_00.https.jsonl")
  assert logged["verdict"] == "allowed" and logged["target"] == f"allowed.test:{allowed.port}"
  assert proposer.config()["runner"]["https_allow"] == [f"allowed.test:{allowed.port}"]


# The proxy alone, on the host: a client speaking to its Unix socket.


class EchoServer:
  """A TCP server on 127.0.0.1 sending back what it gets."""

  def __init__(self):
    self.server = socket.create_server(("127.0.0.1", 0))
    self.port = self.server.getsockname()[1]
    threading.Thread(target=self._accept, daemon=True).start()

  def _accept(self):
    while True:
      try:
        connection, _ = self.server.accept()
      except OSError:
        return
      threading.Thread(target=self._echo, args=(connection,), daemon=True).start()

  @staticmethod
  def _echo(connection):
    with connection:
      while data := connection.recv(65536):
        connection.sendall(data)


@pytest.fixture
def echo():
  server = EchoServer()
  yield server
  server.server.close()


def _proxy(tmp_path, allow, **options):
  log_path = tmp_path / "proxy.jsonl"
  proxy = connect_proxy.ConnectProxy(str(tmp_path / "proxy.sock"),
                                     connect_proxy.parse_allow_list(allow), str(log_path),
                                     resolve=_resolve, **options)
  return proxy, log_path


def _send(proxy_path, request):
  """(the answer's status line, the connection) of one request sent to the proxy."""
  client = socket.socket(socket.AF_UNIX)
  client.settimeout(5)
  client.connect(proxy_path)
  client.sendall(request.encode())
  answer = b""
  while b"\r\n\r\n" not in answer:
    chunk = client.recv(4096)
    if not chunk:
      break
    answer += chunk
  return answer.split(b"\r\n")[0].decode(), client


def _connect(tmp_path, target):
  return _send(str(tmp_path / "proxy.sock"), f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")


def test_a_tunnel_copies_bytes_both_ways_and_logs_them(tmp_path, echo):
  proxy, log_path = _proxy(tmp_path, [f"allowed.test:{echo.port}"])
  status, client = _connect(tmp_path, f"ALLOWED.test.:{echo.port}")   # names are normalised
  assert status == "HTTP/1.1 200 Connection established"
  payload = os.urandom(100_000)
  client.sendall(payload)
  received = b""
  while len(received) < len(payload):
    received += client.recv(65536)
  assert received == payload
  client.close()
  deadline = time.monotonic() + 5
  while proxy.counts()["allowed"] == 0 and time.monotonic() < deadline:
    time.sleep(0.02)
  proxy.close()
  record, = _log(log_path)
  assert (record["verdict"], record["bytes_to_server"], record["bytes_to_agent"]) == (
      "allowed", 100_000, 100_000)
  assert record["reason"] == "closed"


@pytest.mark.parametrize("request_text, status", [
    ("GET http://allowed.test:80/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
     "HTTP/1.1 405 Method Not Allowed"),
    ("CONNECT elsewhere.test:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 403 Forbidden"),
    ("CONNECT allowed.test:444 HTTP/1.1\r\n\r\n", "HTTP/1.1 403 Forbidden"),   # another port
    ("CONNECT allowed.test HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    ("hello\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    ("CONNECT allowed.test:443 HTTP/1.1\r\nX: " + "y" * 9000 + "\r\n\r\n",
     "HTTP/1.1 431 Request Header Fields Too Large"),
])
def test_everything_but_a_listed_connect_is_refused(tmp_path, request_text, status):
  proxy, log_path = _proxy(tmp_path, ["allowed.test:443"])
  answer, client = _send(str(tmp_path / "proxy.sock"), request_text)
  client.close()
  proxy.close()
  assert answer == status
  record, = _log(log_path)
  assert record["verdict"] == "refused" and record["status"] == int(status.split()[1])
  assert proxy.counts() == {"allowed": 0, "refused": 1, "failed": 0}


def test_a_listed_host_that_cannot_be_reached_fails_with_502(tmp_path):
  unused = socket.create_server(("127.0.0.1", 0))
  port = unused.getsockname()[1]
  unused.close()
  proxy, log_path = _proxy(tmp_path, [f"allowed.test:{port}", "unknown.test:443"])
  assert _connect(tmp_path, f"allowed.test:{port}")[0] == "HTTP/1.1 502 Bad Gateway"
  assert _connect(tmp_path, "unknown.test:443")[0] == "HTTP/1.1 502 Bad Gateway"
  proxy.close()
  assert [record["verdict"] for record in _log(log_path)] == ["failed", "failed"]


def test_tunnels_over_max_tunnels_are_refused(tmp_path, echo):
  proxy, log_path = _proxy(tmp_path, [f"allowed.test:{echo.port}"], max_tunnels=2)
  first = _connect(tmp_path, f"allowed.test:{echo.port}")
  second = _connect(tmp_path, f"allowed.test:{echo.port}")
  third = _connect(tmp_path, f"allowed.test:{echo.port}")
  assert [first[0], second[0]] == ["HTTP/1.1 200 Connection established"] * 2
  assert third[0] == "HTTP/1.1 503 Service Unavailable"
  proxy.close()        # ends the two open tunnels and logs them
  records = _log(log_path)
  assert sorted(record["status"] for record in records) == [200, 200, 503]
  assert sorted(record["reason"] for record in records if record["status"] == 200) == [
      "proxy closed"] * 2


def test_an_idle_tunnel_and_a_slow_request_are_closed(tmp_path, echo):
  proxy, log_path = _proxy(tmp_path, [f"allowed.test:{echo.port}"], idle_timeout_seconds=0.3,
                           header_timeout_seconds=0.3)
  status, client = _connect(tmp_path, f"allowed.test:{echo.port}")
  assert status == "HTTP/1.1 200 Connection established"
  started = time.monotonic()
  assert client.recv(10) == b""                     # the proxy ended it
  assert time.monotonic() - started < 3
  assert _send(str(tmp_path / "proxy.sock"), "CONNECT allowed")[0] == (
      "HTTP/1.1 408 Request Timeout")
  proxy.close()
  reasons = sorted(record["reason"] for record in _log(log_path))
  assert reasons == ["idle for 0.3 s", "request head too slow"]


def test_the_log_stops_at_max_log_lines_and_the_counts_go_on(tmp_path):
  proxy, log_path = _proxy(tmp_path, ["allowed.test:443"], max_log_lines=2)
  for _ in range(4):
    assert _connect(tmp_path, "elsewhere.test:443")[0] == "HTTP/1.1 403 Forbidden"
  proxy.close()
  assert [record["verdict"] for record in _log(log_path)] == ["refused", "refused", "log_full"]
  assert proxy.counts()["refused"] == 4


def test_the_allow_list_is_host_port_pairs():
  assert connect_proxy.parse_allow_list(["API.Example.com.:443", "[::1]:8443"]) == {
      "api.example.com:443", "[::1]:8443"}
  for bad in ("api.example.com", "api.example.com:0", "api.example.com:65536",
              "https://api.example.com:443", "*.example.com:443", "a b:443", ":443",
              "[nothost]:443"):
    with pytest.raises(ValueError, match="host"):
      connect_proxy.parse_allow_list([bad])
  with pytest.raises(ValueError, match="list"):
    connect_proxy.parse_allow_list("api.example.com:443")


def test_the_config_checks_https_allow():
  section = dict(proposer="cli_agent", command=["agent"], https_allow=("api.example.com:443",))
  typed_config.read(sections.SearchSection, section, "config.search")
  with pytest.raises(typed_config.ConfigError, match=r"config.search.https_allow: .*65535"):
    typed_config.read(sections.SearchSection, dict(section, https_allow=("api.example.com:99999",)),
                      "config.search")
  with pytest.raises(typed_config.ConfigError, match="did you mean 'https_allow'"):
    typed_config.read(sections.SearchSection, dict(section, http_allow=()), "config.search")


PROBE = """
import ctypes, errno, json, socket
found = {}
for name, family in (("unix", socket.AF_UNIX), ("inet", socket.AF_INET),
                     ("netlink", socket.AF_NETLINK), ("packet", socket.AF_PACKET)):
  try:
    socket.socket(family, socket.SOCK_DGRAM if family != socket.AF_INET else socket.SOCK_STREAM)
    found[name] = "created"
  except OSError as error:
    found[name] = errno.errorcode.get(error.errno, str(error.errno))
libc = ctypes.CDLL(None, use_errno=True)
found["ptrace"] = "allowed" if libc.ptrace(16, 1, 0, 0) == 0 else errno.errorcode[ctypes.get_errno()]
print(json.dumps(found))
"""


def test_with_a_relay_the_jail_keeps_seccomp_with_only_unix_and_ip_sockets(tmp_path):
  """A relay needs sockets, so the jail's program allows Unix and IP ones (its network
  namespace has only loopback); every other family and the rest of the sandbox's denials
  (here ptrace) stay refused. Without any relay, no socket at all."""
  script = tmp_path / "probe.py"
  script.write_text(PROBE)
  outputs = {}
  for label, allow in (("relay", ["allowed.test:443"]), ("none", [])):
    workdir = tmp_path / label
    workdir.mkdir()
    runner = cli_agent.BwrapRunner(read_only_paths=[str(script)], https_allow=allow,
                                   resolve=_resolve)
    result = runner.run([_python(), "-S", str(script)], str(workdir), 20,
                        proxy_log_path=str(tmp_path / f"{label}.jsonl"))
    assert result.returncode == 0, result.stderr.decode()
    outputs[label] = json.loads(result.stdout.decode().strip().splitlines()[-1])
  assert outputs["relay"] == {"unix": "created", "inet": "created", "netlink": "EAFNOSUPPORT",
                              "packet": "EAFNOSUPPORT", "ptrace": "EPERM"}
  assert outputs["none"] == {"unix": "EPERM", "inet": "EPERM", "netlink": "EPERM",
                             "packet": "EPERM", "ptrace": "EPERM"}
