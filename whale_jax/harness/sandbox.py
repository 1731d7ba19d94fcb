"""The sandboxed side of the process boundary: the episode worker, the code runner, in-process checks.

Standard library only, and it never imports whale_jax: the host starts this file as a script,
`python -S -s -B sandbox.py worker CONTROL_IN CONTROL_OUT` (or `exec`), normally inside the
bubblewrap namespaces and seccomp program of whale_jax/harness/confinement.py, with a scrubbed
environment, and talks to it in JSON lines (whale_jax/harness/sandbox_process.py is the host
side).

worker  A zygote. It preloads the importable modules, then serves episodes one at a time: it
        compiles the harness (cached by content hash), forks a fresh child per episode, kills it
        when the host asks, and reports the child's wait status once it is gone. The child
        confines itself and runs `run(task, llm, tools)`; each llm or tools call is a JSON
        request answered by the host.
exec    Runs one snippet of Python (the python tool), confined the same way, and writes one JSON
        line with its captured stdout and stderr.

The boundary is the operating system's: namespaces (no network, no other processes, a mount view
of the Python runtime read-only and one writable folder) and seccomp, which hold against native
code. An episode's child gets, in order: death when its parent dies, a fresh empty working
directory (and /tmp; the zygote makes both just before the fork), privileges dropped to nobody
when started as root outside a namespace, the child seccomp program (no new processes or
threads, no exec, no signals or scheduling changes aimed at other processes; plus the base
program when there are no namespaces), resource limits (CPU seconds, no new processes, open
files; address space, file size and no core files are set once on the zygote, so every child
inherits them), a few os/signal functions deleted (_UNAUDITED_FUNCTIONS; the zygote deletes
them once), `import` limited to the allowed modules (even ones already loaded), and an audit
hook refusing sockets, subprocesses, signals, ctypes, tracing, code-object construction and
paths outside the working directory and /tmp. The in-process ones are early refusals with
readable errors, not a boundary. The zygote prepares whatever it can before forking (see
_Episode): each page a child writes is a copy-on-write fault, the bulk of an episode's cost.

Channels. stdin/stdout carry data: requests from the current child and the host's replies
(the worker never reads them; it drains stale bytes before each episode). CONTROL_IN and
CONTROL_OUT are pipes that only the worker holds (each child closes them first thing), so a
harness can neither forge nor read control messages; nor can it signal, trace or inspect the
worker (seccomp, and no /proc in the mount view).
  host -> worker    {"type": "config", ...limits, "host_pid", "seccomp_programs" (hex)}
                                                                                    (control)
  worker -> host    {"type": "ready", "missing"}                                    (control)
  host -> worker    {"type": "episode", "harness_hash", "source", "task", "tool_names",
                     "random_seed"}                                                 (control)
  host -> worker    {"type": "kill"}  (control; SIGKILL to the episode's child, at once if it
                                       is running, else as soon as it is forked; a kill
                                       read between episodes is stale and ignored)
  child -> host     {"type": "llm", "method": "chat" | "generate", "messages" | "prompt",
                     "tools", "sampling"}  or  {"type": "tool", "name", "args", "kwargs"}
  host -> child     {"type": "reply", "ok": true, "value"} or
                    {"type": "reply", "ok": false, "error_type", "error"}
  child -> host     {"type": "done", "answer", "stdout"} or {"type": "failed", "error", "stdout"}
  worker -> host    {"type": "exit", "status", "cpu_seconds", "compile_error",
                     "confine_error", "retire"}   (control; the child's os.wait status, sent
                     once it is reaped; retire: the worker could not clean up and is leaving)
"""
import _thread
import ast
import builtins
import collections
import gc
import importlib
import io
import itertools
import json
import linecache
import os
import resource
import select
import signal
import sys
import time
import traceback
import types

if __name__ == "__main__" and sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(
    os.path.abspath(__file__)):
  del sys.path[0]  # this script's folder is not importable from inside the sandbox

NOBODY = 65534
HARNESS_FILENAME = "harness.py"
CODE_FILENAME = "<code>"
COMPILE_CACHE_SIZE = 64
MAX_ERROR_CHARS = 4000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SOCK_FILTER_BYTES = 8
SIGKILL_NUMBER = int(signal.SIGKILL)  # a plain int: no enum work in the forked child

_REFUSED_EVENTS = frozenset({
    "os.system", "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.chdir", "os.chroot",
    "os.symlink", "os.link", "os.posix_spawn", "os.posix_spawnp", "subprocess.Popen", "pty.spawn",
    "signal.pthread_kill", "resource.setrlimit", "resource.prlimit", "sys.settrace",
    "sys.setprofile", "code.__new__", "marshal.load", "marshal.loads", "function.__new__",
    "sqlite3.enable_load_extension", "sqlite3.load_extension", "_posixsubprocess.fork_exec",
})
_REFUSED_PREFIXES = ("socket.", "ctypes.", "os.exec", "os.spawn", "_ssl.", "ssl.")
# Events whose first argument (both first arguments, for _TWO_PATH_EVENTS) is a path that must
# lie inside the working directory. Frozensets: the hook's state must not be mutable.
_PATH_EVENTS = frozenset({
    "open", "os.listdir", "os.scandir", "os.remove", "os.rmdir", "os.mkdir", "os.rename",
    "os.truncate", "os.utime", "os.chmod", "os.chown", "os.chflags", "os.lchflags",
    "os.setxattr", "os.removexattr", "os.getxattr", "os.listxattr", "glob.glob", "glob.glob/2",
    "sqlite3.connect", "shutil.copyfile", "shutil.copymode", "shutil.copystat",
    "shutil.copytree", "shutil.move", "shutil.rmtree", "shutil.make_archive",
    "shutil.unpack_archive", "tempfile.mkstemp", "tempfile.mkdtemp"})
_TWO_PATH_EVENTS = frozenset({"os.rename", "shutil.copyfile", "shutil.copymode",
                              "shutil.copystat", "shutil.copytree", "shutil.move",
                              "shutil.unpack_archive"})
# Functions that act on other processes or create files without raising an audit event;
# the child deletes them from the modules that hold them before the harness runs.
_UNAUDITED_FUNCTIONS = ("pidfd_open", "pidfd_send_signal", "mkfifo", "mknod", "setpriority",
                        "sched_setaffinity", "sched_setscheduler", "sched_setparam",
                        "process_vm_readv", "process_vm_writev")
_PROTECTED_FUNCTION_ATTRIBUTES = frozenset({"__code__", "__defaults__", "__kwdefaults__"})


def _make_audit_hook(workdir, other_roots=()):
  """An audit hook keeping the process's paths inside workdir (or other_roots); all it uses is
  bound in its defaults."""
  roots = (workdir,) + tuple(other_roots)
  prefixes = tuple(root + "/" for root in roots)

  def audit_hook(event, args, _workdir=workdir, _roots=roots, _root_prefixes=prefixes,
                 _refused=_REFUSED_EVENTS,
                 _prefixes=_REFUSED_PREFIXES, _path_events=_PATH_EVENTS,
                 _two_path_events=_TWO_PATH_EVENTS, _protected=_PROTECTED_FUNCTION_ATTRIBUTES,
                 _type=type, _str=str, _bytes=bytes, _int=int, _len=len,
                 _startswith=str.startswith, _split=str.split, _join=str.join,
                 _decode=bytes.decode, _error=PermissionError):
    if event in _refused or _startswith(event, _prefixes):
      raise _error(f"{event} is refused inside the harness sandbox: a harness reaches the "
                   "outside world only through llm and tools.")
    if event == "object.__setattr__" or event == "object.__delattr__":
      if _len(args) > 1 and _type(args[1]) is _str and args[1] in _protected:
        raise _error(f"Changing a function's {args[1]} is refused inside the harness sandbox.")
      return
    if event not in _path_events:
      return
    for position in ((0, 1) if event in _two_path_events else (0,)):
      if position >= _len(args):
        continue
      path = args[position]
      if path is None or (_type(path) is _int and event != "open"):
        continue  # the working directory itself, or a descriptor opened through this hook
      if _type(path) is _int:
        raise _error(f"open() of file descriptor {path} is refused inside the harness "
                     "sandbox.")
      if _type(path) is _bytes:
        path = _decode(path, "utf-8", "surrogateescape")
      if _type(path) is not _str:
        raise _error(f"{event}: paths inside the harness sandbox must be plain str; got "
                     f"{_type(path).__name__}.")
      if not _startswith(path, "/"):
        path = _workdir + "/" + path
      parts = []
      for part in _split(path, "/"):
        if part == "" or part == ".":
          continue
        if part == "..":
          if parts:
            parts.pop()
          continue
        parts.append(part)
      normalized = "/" + _join("/", parts)
      if normalized not in _roots and not _startswith(normalized, _root_prefixes):
        raise _error(f"{event} on {normalized!r} is refused: a harness may only touch files "
                     f"inside its own working directory ({_join(', ', _roots)}).")

  return audit_hook


class _RefuseNewImports:
  """First meta-path finder: only modules already loaded (preloaded by the host) import."""

  def __init__(self, allowed_imports):
    self.allowed = ", ".join(sorted(allowed_imports))

  def find_spec(self, name, path=None, target=None):
    raise ImportError(f"import of {name!r} is refused inside the harness sandbox; importable "
                      f"modules: {self.allowed}.", name=name)


def _restricted_import(allowed_imports):
  """An __import__ for the untrusted code's builtins: allowed modules (and their submodules)
  only, whether or not they are loaded already."""
  allowed = frozenset(allowed_imports)
  allowed_text = ", ".join(sorted(allowed))

  def restricted_import(name, globals=None, locals=None, fromlist=(), level=0,  # pylint: disable=redefined-builtin
                        _import=builtins.__import__, _allowed=allowed):
    if level or name.partition(".")[0] not in _allowed:
      raise ImportError(f"import of {name!r} is refused inside the harness sandbox; importable "
                        f"modules: {allowed_text}.", name=name)
    return _import(name, globals, locals, fromlist, 0)

  return restricted_import


def _untrusted_builtins(allowed_imports):
  namespace = dict(builtins.__dict__)
  namespace["__import__"] = _restricted_import(allowed_imports)
  return namespace


class _BoundedText(io.TextIOBase):
  """A text stream that keeps the first max_chars characters written to it."""

  def __init__(self, max_chars):
    super().__init__()
    self.max_chars, self.parts, self.kept, self.dropped = max_chars, [], 0, 0

  def writable(self):
    return True

  def write(self, text):
    if not isinstance(text, str):
      raise TypeError(f"write() argument must be str, not {type(text).__name__}")
    room = self.max_chars - self.kept
    if room > 0:
      self.parts.append(text[:room])
      self.kept += min(room, len(text))
    self.dropped += max(0, len(text) - max(room, 0))
    return len(text)

  def getvalue(self):
    text = "".join(self.parts)
    return text + (f"\n[{self.dropped} more characters not kept]" if self.dropped else "")


def _json_functions():
  """(encode, decode) for one JSON line each: json.dumps and json.loads without their
  Python-level layers (each frame an episode's child runs touches, and so copies, pages)."""
  make_encoder = getattr(json.encoder, "c_make_encoder", None)
  scan_once = json.scanner.make_scanner(json.JSONDecoder())
  default = json.JSONEncoder().default
  escape = json.encoder.encode_basestring_ascii

  def encode(message):
    if make_encoder is None:
      return json.dumps(message)
    return "".join(make_encoder({}, default, escape, None, ": ", ", ", False, False, True)(
        message, 0))

  def decode(line):
    text = line.decode().strip()
    try:
      value, end = scan_once(text, 0)
    except StopIteration:
      raise ValueError(f"not a JSON value: {text[:200]!r}") from None
    if end != len(text):
      raise ValueError(f"extra data after a JSON value: {text[:200]!r}")
    return value

  return encode, decode


encode_json, decode_json = _json_functions()  # the host side uses them too


class _Channel:
  """JSON lines over two file descriptors."""

  def __init__(self, read_fd, write_fd):
    self.read_fd, self.write_fd, self.buffer = read_fd, write_fd, bytearray()

  def send(self, message):
    data = encode_json(message).encode() + b"\n"
    view = memoryview(data)
    while view:
      view = view[os.write(self.write_fd, view):]

  def pending(self, read=True):
    """Reads once (the fd is readable; read=False: only what is buffered already) and returns
    the complete messages, or None at EOF."""
    if read:
      chunk = os.read(self.read_fd, 1 << 16)
      if not chunk:
        return None
      self.buffer += chunk
    messages = []
    while (end := self.buffer.find(b"\n")) >= 0:
      line = bytes(self.buffer[:end])
      del self.buffer[:end + 1]
      if line.strip():
        messages.append(decode_json(line))
    return messages

  def receive(self):
    """The next message, or None when the host closed the pipe."""
    while True:
      end = self.buffer.find(b"\n")
      if end >= 0:
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        if line.strip():
          return decode_json(line)
        continue
      chunk = os.read(self.read_fd, 1 << 16)
      if not chunk:
        return None
      self.buffer += chunk


class ToolError(RuntimeError):
  """A tool call the host refused or that failed on the host."""


_ERROR_TYPES = {"ValueError": ValueError, "TypeError": TypeError, "ToolError": ToolError}


class _Host:
  """Sends a request to the host and waits for its reply."""

  def __init__(self, channel, exit_process):
    self._channel, self._exit = channel, exit_process

  def request(self, message):
    try:
      self._channel.send(message)
    except (TypeError, ValueError) as error:
      raise TypeError(f"{message['type']} request arguments must be JSON-serializable: "
                      f"{error}") from None
    while True:
      reply = self._channel.receive()
      if reply is None:
        self._exit(3)  # the host is gone
      if reply.get("type") == "reply":
        break
    if reply.get("ok"):
      return reply.get("value")
    raise _ERROR_TYPES.get(reply.get("error_type"), ToolError)(reply.get("error"))


class LLM:
  """The model, served by the host. Each call is recorded in the episode's trajectory.

  chat(messages, tools=None, **sampling) -> str: messages are [{"role", "content"}] dicts; the
    host renders the chat template (tools: optional JSON function schemas) and samples.
  generate(prompt, **sampling) -> str: samples a continuation of raw prompt text.
  sampling: max_tokens, temperature, top_p, top_k, n, stop, seed. With n > 1 both return a list
    of n strings.
  """
  __slots__ = ("_host",)

  def __init__(self, host):
    self._host = host

  def chat(self, messages, tools=None, **sampling):
    return self._host.request({"type": "llm", "method": "chat", "messages": messages,
                               "tools": tools, "sampling": sampling})

  def generate(self, prompt, **sampling):
    return self._host.request({"type": "llm", "method": "generate", "prompt": prompt,
                               "sampling": sampling})


class Tools:
  """The domain's tools, served by the host: tools.<name>(*args, **kwargs)."""
  __slots__ = ("_host", "_names")

  def __init__(self, host, names):
    self._host, self._names = host, tuple(names)

  def __dir__(self):
    return list(self._names)

  def __getattr__(self, name):
    if name.startswith("_") or name not in self._names:
      raise AttributeError(f"tools has no tool named {name!r}; this domain offers: "
                           f"{', '.join(self._names) or 'no tools'}.")
    host = self._host

    def call(*args, **kwargs):
      return host.request({"type": "tool", "name": name, "args": list(args), "kwargs": kwargs})

    call.__name__ = name
    return call


def _trimmed_traceback(error, filename):
  """The exception with only the frames of the untrusted code, at most MAX_ERROR_CHARS."""
  frames = [frame for frame in traceback.extract_tb(error.__traceback__)
            if frame.filename == filename]
  traceback.clear_frames(error.__traceback__)  # frees what a memory bomb left in its locals
  lines = ["Traceback (most recent call last):\n"] if frames else []
  lines += traceback.format_list(frames)
  lines += traceback.format_exception_only(type(error), error)
  text = "".join(lines)
  if len(text) > MAX_ERROR_CHARS:
    half = MAX_ERROR_CHARS // 2
    text = text[:half] + f"\n[... {len(text) - 2 * half} characters ...]\n" + text[-half:]
  return text


def _set_parent_death_signal(prctl, parent_pid=None):
  """SIGKILL to this process when its parent dies; exits at once if parent_pid (not None) has
  died already."""
  if prctl is not None:
    prctl(PR_SET_PDEATHSIG, SIGKILL_NUMBER, 0, 0, 0)
  if parent_pid is not None and os.getppid() != parent_pid:
    os._exit(4)  # the parent died before the death signal was armed


def _load_fork():
  """fork() -> (pid, by_libc) for the zygote: libc's fork, called with the GIL held and without
  errno handling. It skips CPython's at-fork work (re-creating thread states and locks, running
  os.register_at_fork callbacks such as random's re-seeding), which a process with a single
  thread does not need, and so what that work would write: fewer copy-on-write page faults in
  every child. os.fork (by_libc False: its child's random was re-seeded from the OS) where
  ctypes or libc is missing, once the process has a second thread, or when libc's fork failed
  (os.fork then raises OSError with the reason)."""
  try:
    import ctypes  # pylint: disable=import-outside-toplevel
    libc_fork = ctypes.PyDLL(None).fork
  except (ImportError, OSError, AttributeError):
    return lambda: (os.fork(), False)
  libc_fork.argtypes, libc_fork.restype = [], ctypes.c_int

  def fork():
    if not _thread._count():  # pylint: disable=protected-access
      pid = libc_fork()
      if pid >= 0:
        return pid, True
    return os.fork(), False

  return fork


def _load_prctl():
  """libc's prctl with its argument types declared (a fast call after fork); loaded before
  confinement, since ctypes is refused afterwards."""
  try:
    import ctypes  # pylint: disable=import-outside-toplevel
    # PyDLL: prctl returns at once, so the call keeps the GIL (and, without use_errno, skips
    # the errno swap): fewer pages written in the child that makes the call.
    prctl = ctypes.PyDLL(None).prctl
  except (ImportError, OSError, AttributeError):
    return None
  prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
  prctl.restype = ctypes.c_int
  return prctl


def _seccomp_programs(encoded_programs):
  """struct sock_fprog pointers (with the buffers they point into) for prctl(PR_SET_SECCOMP)."""
  if not encoded_programs:
    return []
  import ctypes  # pylint: disable=import-outside-toplevel

  class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

  programs = []
  for encoded in encoded_programs:
    code = bytes.fromhex(encoded)  # hex, not base64: base64 would map binascii and zlib
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = SockFprog(len(code) // SOCK_FILTER_BYTES, ctypes.addressof(buffer))
    programs.append((ctypes.addressof(fprog), fprog, buffer))
  return programs


def _set_no_new_privs(prctl):
  if prctl is None or prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
    raise OSError("prctl(PR_SET_NO_NEW_PRIVS) failed")


def _install_seccomp(prctl, programs, no_new_privs=False):
  """Installs the seccomp programs on this process, irreversibly (OSError on failure).
  no_new_privs: the process has it already (inherited from the zygote)."""
  if not programs:
    return
  if prctl is None:
    raise OSError("prctl is unavailable, so the seccomp program cannot be installed")
  if not no_new_privs:
    _set_no_new_privs(prctl)
  for address, _, _ in programs:
    if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, address, 0, 0) != 0:
      raise OSError("prctl(PR_SET_SECCOMP) failed")


def _preload(allowed_imports):
  """Imports every allowed module now; returns the names that could not be imported."""
  missing = []
  for name in allowed_imports:
    try:
      importlib.import_module(name)
    except ImportError:
      missing.append(name)
  return missing


def _unaudited_entries():
  """(module namespace, name) of every _UNAUDITED_FUNCTIONS entry present in this process."""
  namespaces = [vars(sys.modules[name]) for name in ("os", "posix", "signal", "_signal")
                if name in sys.modules]
  return [(namespace, name) for namespace in namespaces for name in _UNAUDITED_FUNCTIONS
          if name in namespace]


def _confine(workdir, config, parent_pid, prctl, programs, tmpdir=None):
  """Confines this process to a fresh workdir (and tmpdir): exec mode's whole confinement.
  Irreversible; see the module docstring."""
  prepared = _prepare_confinement(config)
  _set_parent_death_signal(prctl, parent_pid)
  _make_folders(workdir, tmpdir)
  roots = () if tmpdir is None else ("/tmp", tmpdir)
  _confine_child(config, prctl, programs, prepared, os.path.realpath(workdir), roots)


def _make_folders(workdir, tmpdir):
  """Creates the fresh working folder (and tmpdir), owned by nobody when running as root."""
  for path in (workdir, tmpdir):
    if path is not None:
      os.mkdir(path, 0o700)
      if os.geteuid() == 0:  # no namespace: the process drops to nobody
        os.chown(path, NOBODY, NOBODY)


def _process_limits(config):
  """The limits a zygote can take on itself for all its children (address space, file size,
  no core files; SIGXFSZ ignored, so an over-large file fails with EFBIG instead)."""
  signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
  resource.setrlimit(resource.RLIMIT_AS, (config["memory_bytes"],) * 2)
  resource.setrlimit(resource.RLIMIT_FSIZE, (config["file_size_bytes"],) * 2)
  resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _confine_child(config, prctl, programs, prepared, workdir, roots):
  """The rest of the confinement, in the process that will run untrusted code (after the
  death signal, its folders and, unless prepared["limits_inherited"], _process_limits)."""
  os.chdir(workdir)
  if os.geteuid() == 0:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
  _install_seccomp(prctl, programs, prepared["no_new_privs"])
  if not prepared["limits_inherited"]:
    _process_limits(config)
  cpu_seconds = config["cpu_seconds"]
  resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
  resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
  resource.setrlimit(resource.RLIMIT_NOFILE, (config["max_open_files"],) * 2)
  for namespace, name in prepared["unaudited"]:
    namespace.pop(name, None)
  sys.meta_path.insert(0, prepared["finder"])
  # Made here, not in a zygote: a harness's gc.get_objects() sees it (and the zygote would pay
  # a fault per page its defaults touch, twice, for making and dropping it).
  sys.addaudithook(_make_audit_hook(workdir, roots))


def _prepare_confinement(config, no_new_privs=False, limits_inherited=False):
  """What the confinement needs that a zygote can make once instead of in every child."""
  return {"unaudited": _unaudited_entries(), "no_new_privs": no_new_privs,
          "limits_inherited": limits_inherited,
          "finder": _RefuseNewImports(config["allowed_imports"])}


def _redirect_standard_fds():
  """Moves the protocol off fds 0/1 (to fresh fds) and points 0, 1, 2 at /dev/null."""
  read_fd, write_fd = os.dup(0), os.dup(1)
  devnull = os.open(os.devnull, os.O_RDWR)
  for fd in (0, 1, 2):
    os.dup2(devnull, fd)
  os.close(devnull)
  return _Channel(read_fd, write_fd)


def _drain(fd):
  """Discards whatever is waiting on fd (bytes a dead child left unread)."""
  while select.select([fd], [], [], 0)[0]:
    if not os.read(fd, 1 << 16):
      return


class _Episode:
  """What the zygote prepares for one episode's child before forking it (so that the child,
  whose every write to an inherited page is a copy-on-write fault, does less)."""
  __slots__ = ("code", "task", "llm", "tools", "stdout", "module", "workdir", "roots")

  def __init__(self, code, task, llm, tools, stdout, module, workdir, roots):
    self.code, self.task, self.llm, self.tools = code, task, llm, tools
    self.stdout, self.module, self.workdir, self.roots = stdout, module, workdir, roots


def _run_episode_child(channel, private_fds, status_fd, config, episode, parent_pid, prctl,
                       programs, prepared):
  """Runs in the forked child: confine, execute the harness, report, exit. Never returns."""
  exit_process = os._exit
  for fd in private_fds:
    os.close(fd)
  os.setpgid(0, 0)
  try:
    _set_parent_death_signal(prctl, parent_pid)
    _confine_child(config, prctl, programs, prepared, episode.workdir, episode.roots)
  except BaseException as error:  # pylint: disable=broad-except
    os.write(status_fd, f"sandbox confinement failed: {error!r}".encode()[:4096])
    exit_process(0)
  os.close(status_fd)  # end of the confinement report: the harness can no longer write to it
  stdout = episode.stdout
  sys.stdout = sys.stderr = stdout
  try:
    module = episode.module
    exec(episode.code, module.__dict__)  # pylint: disable=exec-used
    run = module.__dict__.get("run")
    if not callable(run):
      raise TypeError("The harness defines no function run(task, llm, tools).")
    answer = run(episode.task, episode.llm, episode.tools)
    if not isinstance(answer, str):
      raise TypeError(f"run() returned {type(answer).__name__}; it must return the final answer "
                      "as a str.")
    if len(answer) > config["max_answer_chars"]:
      raise ValueError(f"run() returned an answer of {len(answer)} characters; at most "
                       f"{config['max_answer_chars']} are allowed.")
    result = {"type": "done", "answer": answer}
  except BaseException as error:  # pylint: disable=broad-except
    if isinstance(error, SystemExit):
      error = SystemExit(f"run() called sys.exit({error.code!r}); return the answer "
                         "instead.").with_traceback(error.__traceback__)
    result = {"type": "failed", "error": _trimmed_traceback(error, HARNESS_FILENAME)}
    del error
  result["stdout"] = stdout.getvalue()
  channel.send(result)
  exit_process(0)


def _compile(cache, harness_hash, source):
  """(code, None) or (None, error text); compiled code objects are cached by content hash."""
  if harness_hash in cache:
    cache.move_to_end(harness_hash)
    return cache[harness_hash], None
  try:
    code = compile(source, HARNESS_FILENAME, "exec", dont_inherit=True)
  except (SyntaxError, ValueError, MemoryError, RecursionError) as error:
    return None, _trimmed_traceback(error, HARNESS_FILENAME)
  cache[harness_hash] = code
  if len(cache) > COMPILE_CACHE_SIZE:
    cache.popitem(last=False)
  return code, None


def _remove_tree(path):
  """Removes path and everything below it as far as it can (shutil.rmtree without importing
  shutil, which would map zlib, bz2 and lzma into every zygote and so into every fork)."""
  for folder, folders, files in os.walk(path, topdown=False):
    for name in files:
      try:
        os.unlink(os.path.join(folder, name))
      except OSError:
        pass
    for name in folders:
      target = os.path.join(folder, name)
      try:
        (os.unlink if os.path.islink(target) else os.rmdir)(target)
      except OSError:
        pass
  try:
    os.rmdir(path)
  except OSError:
    pass


def _clear_folder(root, expected):
  """Removes everything inside root; True when it is empty afterwards."""
  for path in expected:  # the common case: the harness left only its two empty folders
    try:
      os.rmdir(path)
    except OSError:
      pass
  names = os.listdir(root)
  if not names:
    return True
  for name in names:
    path = os.path.join(root, name)
    try:
      if os.path.isdir(path) and not os.path.islink(path):
        for folder, _, _ in os.walk(path):
          os.chmod(folder, 0o700)  # a harness may have made its folders unreadable
        _remove_tree(path)
      else:
        os.unlink(path)
    except OSError:
      pass
  return not os.listdir(root)


def _wait_for_child(control, pid, status_fd, pidfd_functions):
  """Serves kill requests until the child is gone; returns (wait status, rusage, confinement
  error text), or (None, None, "") when the host went away (the child is then killed).
  pidfd_functions: (os.pidfd_open, signal.pidfd_send_signal) or Nones, kept by the zygote
  (the modules no longer have them)."""
  pidfd_open, pidfd_send_signal = pidfd_functions
  try:
    pidfd = pidfd_open(pid) if pidfd_open and pidfd_send_signal else None
  except OSError:
    pidfd = None
  try:
    buffered = control.pending(read=False)  # a kill that came with the episode message
    while True:
      fds = [control.read_fd] + ([pidfd] if pidfd is not None else [])
      readable = [control.read_fd] if buffered else select.select(
          fds, [], [], None if pidfd is not None else 0.05)[0]
      if control.read_fd in readable:
        messages, buffered = buffered or control.pending(), None
        if messages is None or any(m.get("type") == "kill" for m in messages):
          try:
            if pidfd is not None:
              pidfd_send_signal(pidfd, SIGKILL_NUMBER)
            else:
              os.kill(pid, signal.SIGKILL)
          except ProcessLookupError:
            pass
          if messages is None:
            os.wait4(pid, 0)
            return None, None, ""
      if pidfd is None or pidfd in readable:
        reaped, status, usage = os.wait4(pid, 0 if pidfd is not None else os.WNOHANG)
        if reaped:
          # The child is gone, so all it wrote (at most 4 KiB: it fits the pipe) is there.
          report = bytearray()
          while len(report) < 4096 and (chunk := os.read(status_fd, 4096)):
            report += chunk
          return status, usage, report.decode("utf-8", "replace")
  finally:
    if pidfd is not None:
      os.close(pidfd)


def _serve_worker(control_in_fd, control_out_fd):
  data = _redirect_standard_fds()
  prctl = _load_prctl()
  control = _Channel(control_in_fd, control_out_fd)
  config = control.receive()
  if config is None:
    return
  _set_parent_death_signal(prctl)
  host_pid = config.get("host_pid")
  if host_pid is not None and os.getppid() != host_pid:
    return
  if prctl is not None:
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # its memory and /proc files are not its children's
  missing = _preload(config["allowed_imports"])
  programs = _seccomp_programs(config.get("seccomp_programs"))
  untrusted_builtins = _untrusted_builtins(config["allowed_imports"])
  fork = _load_fork()
  if programs:
    _set_no_new_privs(prctl)  # inherited: each child installs its program with one call
  root = os.getcwd()
  namespaced = config.get("namespaced", False)
  if not namespaced:
    os.chmod(root, 0o711)  # nobody may enter its own episode folder, not list the others
  private_fds = (control_in_fd, control_out_fd)
  cache = collections.OrderedDict()
  pidfd_functions = (getattr(os, "pidfd_open", None), getattr(signal, "pidfd_send_signal", None))
  for namespace, name in _unaudited_entries():  # gone from every child's modules, too
    namespace.pop(name, None)
  try:
    _process_limits(config)  # inherited by every child
    limits_inherited = True
  except (OSError, ValueError):
    limits_inherited = False  # each child sets them and reports the failure
  prepared = _prepare_confinement(config, no_new_privs=bool(programs),
                                  limits_inherited=limits_inherited)
  zygote_pid, lines_hash = os.getpid(), None
  # Made once: each child changes only its own copy, so the next child gets them pristine.
  host = _Host(data, os._exit)
  llm, stdout = LLM(host), _BoundedText(config["max_stdout_chars"])
  module = types.ModuleType("harness")
  module.__file__ = HARNESS_FILENAME
  module.__builtins__ = untrusted_builtins
  sys.modules["harness"] = module  # dataclasses and friends look the module up there
  random_module = sys.modules.get("random")
  # Namespaced, the folder is this worker's alone and /tmp points into it.
  paths = (os.path.join(root, "episode"), os.path.join(root, "tmp")) if namespaced else None
  roots = ("/tmp", paths[1]) if namespaced else ()
  control.send({"type": "ready", "missing": missing})
  for count in itertools.count(1):
    message = control.receive()
    if message is None:
      return
    if message.get("type") != "episode":
      continue  # a kill for a child that had already died
    code, error = _compile(cache, message["harness_hash"], message["source"])
    if error is not None:
      control.send({"type": "exit", "status": 0, "cpu_seconds": 0.0, "compile_error": error})
      continue
    if message["harness_hash"] != lines_hash:  # tracebacks quote the harness's lines
      lines_hash = message["harness_hash"]
      linecache.cache[HARNESS_FILENAME] = (len(message["source"]), None,
                                           message["source"].splitlines(True), HARNESS_FILENAME)
    if not namespaced:
      paths = (os.path.join(root, f"episode-{count}"), None)
    try:
      _make_folders(*paths)
    except OSError as error:
      control.send({"type": "exit", "status": 0, "cpu_seconds": 0.0, "retire": True,
                    "confine_error": f"sandbox confinement failed: {error!r}"})
      return  # its folder cannot be made: the host replaces this worker
    if random_module is not None:  # the same stream for every harness run on this task and seed
      random_module.seed(message["random_seed"])
    tools = Tools(host, message["tool_names"])
    _drain(data.read_fd)
    status_read, status_write = os.pipe()
    episode = _Episode(code, message["task"], llm, tools, stdout, module, paths[0], roots)
    gc.freeze()  # keeps the collector from touching (and so copying) the zygote's pages
    pid, by_libc = fork()
    if pid == 0:
      try:
        if random_module is not None and not by_libc:
          random_module.seed(message["random_seed"])  # os.fork's child re-seeded it
        os.close(status_read)
        _run_episode_child(data, private_fds, status_write, config, episode, zygote_pid, prctl,
                           programs, prepared)
      finally:
        os._exit(5)
    os.close(status_write)
    try:
      os.setpgid(pid, pid)
    except OSError:
      pass
    try:
      status, usage, confine_error = _wait_for_child(control, pid, status_read, pidfd_functions)
    finally:
      os.close(status_read)
    gc.unfreeze()  # once the child is gone: its writes copy no page the child still shares
    if status is None:
      return  # the host is gone
    if namespaced:
      clean = _clear_folder(root, paths)
    else:
      _remove_tree(paths[0])
      clean = not os.path.exists(paths[0])
    control.send({"type": "exit", "status": status,
                  "cpu_seconds": usage.ru_utime + usage.ru_stime,
                  "confine_error": confine_error, "retire": not clean})
    if not clean:
      return  # what the harness left cannot be removed: the host replaces this worker


def _run_code():
  """exec mode: {"code", "allowed_imports", limits...} on stdin -> one JSON result line."""
  channel = _redirect_standard_fds()
  prctl = _load_prctl()
  config = channel.receive()
  missing = _preload(config["allowed_imports"])
  programs = _seccomp_programs(config.get("seccomp_programs"))
  stdout, stderr = (_BoundedText(config["max_output_chars"]) for _ in range(2))
  root = os.getcwd()
  tmpdir = os.path.join(root, "tmp") if config.get("namespaced") else None
  _confine(os.path.join(root, "run"), config, config.get("host_pid"), prctl, programs, tmpdir)
  sys.stdout, sys.stderr = stdout, stderr
  status = "ok"
  start = time.monotonic()
  try:
    if missing:
      raise ImportError(f"modules not available to the interpreter: {', '.join(missing)}")
    tree = ast.parse(config["code"], CODE_FILENAME)
    echo = (config["echo_last_expression"] and tree.body and
            isinstance(tree.body[-1], ast.Expr))
    body = ast.Module(body=tree.body[:-1] if echo else tree.body, type_ignores=[])
    namespace = {"__name__": "__main__",
                 "__builtins__": _untrusted_builtins(config["allowed_imports"])}
    exec(compile(body, CODE_FILENAME, "exec"), namespace)  # pylint: disable=exec-used
    if echo:
      value = eval(compile(ast.Expression(tree.body[-1].value), CODE_FILENAME, "eval"),  # pylint: disable=eval-used
                   namespace)
      if value is not None:
        print(repr(value))
  except BaseException as error:  # pylint: disable=broad-except
    status = "error"
    stderr.write(_trimmed_traceback(error, CODE_FILENAME))
    del error
  channel.send({"type": "result", "status": status, "stdout": stdout.getvalue(),
                "stderr": stderr.getvalue(), "seconds": time.monotonic() - start})
  os._exit(0)


if __name__ == "__main__":
  if sys.argv[1:2] == ["worker"] and len(sys.argv) == 4:
    _serve_worker(int(sys.argv[2]), int(sys.argv[3]))
  elif sys.argv[1:] == ["exec"]:
    _run_code()
  else:
    sys.exit(f"usage: {sys.argv[0]} worker CONTROL_IN CONTROL_OUT | exec")
