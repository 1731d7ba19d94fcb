"""The host side of a sandboxed process: start it, talk to it in JSON lines, kill it.

  confinement = confinement_lib.confinement_for(allow_weak_sandbox=False)
  process = sandbox_process.start("worker", workdir, confinement, args=(...), pass_fds=(...))
  channel = sandbox_process.Channel(process.stdin.fileno(), process.stdout.fileno(),
                                    max_message_bytes=16 << 20)
  channel.send({"type": "config", ...}, timeout_seconds=5)
  source, message = channel.receive(timeout_seconds=1.0)  # TimeoutError, EOFError, ...
  sandbox_process.stop(process)

The process is a fresh interpreter (exec, never a fork of the host, which may hold JAX state)
inside bubblewrap's namespaces with the base seccomp program (whale_jax/harness/confinement.py;
without them only when weak confinement was allowed), in a session of its own, with
SCRUBBED_ENVIRONMENT as its whole environment (a fixed hash seed, no HOME or TMPDIR),
stdin/stdout as its data pipes and stderr discarded. Killing the bwrap process kills the whole
namespace (--die-with-parent). Everything it sends is untrusted: messages are size-limited and
must be JSON objects with a "type".
"""
import os
import select
import signal
import subprocess
import sys
import threading
import time

from whale_jax.harness import sandbox

READ_CHUNK_BYTES = 1 << 16


class MessageTooLarge(ValueError):
  """The sandbox sent a line longer than max_message_bytes."""


SCRUBBED_ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                        "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"}


def sandbox_config(confinement):
  """The config entries telling sandbox.py how it is confined."""
  return {"namespaced": confinement.namespaced,
          "host_pid": None if confinement.namespaced else os.getpid(),
          "seccomp_programs": [program.hex() for program in confinement.child_programs()]}


def start(mode, workdir, confinement, use_site_packages=False, pass_fds=(), args=(),
          private_folder_bytes=0):
  """Starts `sandbox.py mode *args` ("worker" or "exec") confined in workdir; returns the
  Popen (whose pid is bwrap's when namespaced). private_folder_bytes > 0: when namespaced, the
  writable folder is a tmpfs of that size inside the namespace instead of workdir."""
  flags = ["-B", "-s"] + ([] if use_site_packages else ["-S"])
  python_argv = [sys.executable, *flags, "SANDBOX", mode, *[str(arg) for arg in args]]
  fds = list(pass_fds)
  program_fd = None
  if confinement.namespaced:
    from whale_jax.harness import confinement as confinement_lib  # pylint: disable=import-outside-toplevel
    program_fd, write_fd = os.pipe()
    try:
      os.write(write_fd, confinement_lib.base_program())  # a few KiB: fits the pipe
    finally:
      os.close(write_fd)
    fds.append(program_fd)
  try:
    return subprocess.Popen(  # pylint: disable=consider-using-with
        confinement.wrap(python_argv, workdir, program_fd, SCRUBBED_ENVIRONMENT,
                         use_site_packages, private_folder_bytes),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=workdir,
        env=dict(SCRUBBED_ENVIRONMENT), start_new_session=True, close_fds=True,
        pass_fds=tuple(fds))
  finally:
    if program_fd is not None:
      os.close(program_fd)


def kill_group(pid):
  """SIGKILL to the process group led by pid and to pid itself; quiet if already gone."""
  if not pid:
    return
  for kill in (os.killpg, os.kill):
    try:
      kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass


def stop(process, timeout_seconds=5.0):
  """Kills a started process's group (with bwrap, its whole namespace) and reaps it."""
  if process is None:
    return
  kill_group(process.pid)
  for stream in (process.stdin, process.stdout):
    try:
      stream.close()
    except OSError:
      pass
  try:
    process.wait(timeout_seconds)
  except subprocess.TimeoutExpired:
    pass


class _LineBuffer:
  """Bytes from one pipe, cut into lines of at most max_message_bytes."""

  def __init__(self, fd, max_message_bytes):
    self.fd, self.max_message_bytes = fd, max_message_bytes
    self.data, self.closed, self.discarding = bytearray(), False, False

  def next_line(self):
    """A complete line, or None; raises MessageTooLarge once per over-long line."""
    while True:
      end = self.data.find(b"\n")
      if self.discarding:
        if end < 0:
          self.data.clear()
          return None
        del self.data[:end + 1]
        self.discarding = False
        continue
      if end < 0:
        if len(self.data) > self.max_message_bytes:
          self.data.clear()
          self.discarding = True
          raise MessageTooLarge(f"sent a message over {self.max_message_bytes} bytes")
        return None
      line = bytes(self.data[:end])
      del self.data[:end + 1]
      if len(line) > self.max_message_bytes:
        raise MessageTooLarge(f"sent a message of {len(line)} bytes; at most "
                              f"{self.max_message_bytes} are allowed")
      if line.strip():
        return line

  def fill(self):
    """Reads what the (non-blocking) pipe holds; False when it held nothing or closed."""
    try:
      chunk = os.read(self.fd, READ_CHUNK_BYTES)
    except BlockingIOError:
      return False
    if chunk:
      self.data += chunk
      return True
    self.closed = True
    return False


def _parse(line):
  message = sandbox.decode_json(line)  # UTF-8 (a UnicodeDecodeError is a ValueError)
  if not isinstance(message, dict) or not isinstance(message.get("type"), str):
    raise ValueError(f"expected a JSON object with a 'type'; got {line[:200]!r}")
  return message


class Channel:
  """JSON lines to and from a sandboxed process, every operation bounded by a timeout.

  Input comes from two pipes: "data" (the process's stdout, which an episode's child shares)
  and optionally "control" (a pipe only the trusted zygote holds). receive() prefers control.
  Output goes to data (stdin) or, with control=True, to the control input pipe.
  """

  def __init__(self, data_write_fd, data_read_fd, max_message_bytes, control_read_fd=None,
               control_write_fd=None):
    self._writers = {False: data_write_fd, True: control_write_fd}
    self._locks = {False: threading.Lock(), True: threading.Lock()}
    for fd in (data_write_fd, control_write_fd, data_read_fd, control_read_fd):
      if fd is not None:
        os.set_blocking(fd, False)
    self._data = _LineBuffer(data_read_fd, max_message_bytes)
    self._control = (None if control_read_fd is None else
                     _LineBuffer(control_read_fd, max_message_bytes))
    self._buffers = [(source, buffer) for source, buffer in
                     (("control", self._control), ("data", self._data)) if buffer is not None]

  def send(self, message, timeout_seconds, control=False):
    """Writes one message; raises TimeoutError if the process stops reading, EOFError if gone."""
    write_fd = self._writers[control]
    view = memoryview(sandbox.encode_json(message).encode() + b"\n")
    deadline = time.monotonic() + timeout_seconds
    with self._locks[control]:
      writable = True  # try the write first: a pipe with room takes it in one call
      while view:
        if writable:
          try:
            view = view[os.write(write_fd, view):]
            continue
          except BlockingIOError:
            pass
          except (OSError, ValueError) as error:
            raise EOFError("the sandboxed process closed its input") from error
        remaining = deadline - time.monotonic()
        if remaining <= 0:
          raise TimeoutError("the sandboxed process stopped reading its input")
        try:
          writable = bool(select.select([], [write_fd], [], remaining)[1])
        except (OSError, ValueError) as error:
          raise EOFError("the sandboxed process's input is closed") from error

  def receive(self, timeout_seconds):
    """The next message as (source, dict), source being "control" or "data".

    Raises TimeoutError when none arrives in time; EOFError when the control pipe closes (or,
    without one, the data pipe); MessageTooLarge for a data line over max_message_bytes (the
    rest of it is skipped); ValueError for a line that is not a JSON object with a "type".
    """
    deadline = time.monotonic() + max(0.0, timeout_seconds)
    buffers = self._buffers
    while True:
      for source, buffer in buffers:
        line = buffer.next_line()
        if line is not None:
          return source, _parse(line)
      primary = buffers[0][1]
      if primary.closed:
        raise EOFError("the sandboxed process closed its output")
      open_fds = [buffer.fd for _, buffer in buffers if not buffer.closed]
      remaining = deadline - time.monotonic()
      if remaining <= 0:
        raise TimeoutError("no message from the sandboxed process in time")
      readable, _, _ = select.select(open_fds, [], [], remaining)
      for _, buffer in buffers:
        if buffer.fd in readable:
          buffer.fill()

  def receive_data_now(self):
    """A data message already sent (read without waiting), or None."""
    while True:
      line = self._data.next_line()
      if line is not None:
        return _parse(line)
      if self._data.closed or not self._data.fill():
        return None

  def discard_data(self):
    """Drops every data byte sent so far, partial lines included (between two episodes)."""
    self._data.data.clear()
    self._data.discarding = False
    while not self._data.closed and self._data.fill():
      self._data.data.clear()
