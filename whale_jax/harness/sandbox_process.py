"""The host side of a sandboxed process: start it, talk to it in JSON lines, kill it.

  process = sandbox_process.start("worker", workdir)     # python -S -s -B sandbox.py worker
  channel = sandbox_process.Channel(process, max_message_bytes=16 << 20, control_fd=None)
  channel.send({"type": "config", ...}, timeout_seconds=5)
  source, message = channel.receive(timeout_seconds=1.0)  # TimeoutError, EOFError, ...
  sandbox_process.kill_group(process.pid)

The process is a fresh interpreter (exec, never a fork of the host, which may hold JAX state) in
a session of its own, with SCRUBBED_ENVIRONMENT as its whole environment (a fixed hash seed, no
HOME or TMPDIR: tempfile falls back to the working directory), stdin/stdout as its protocol pipes and stderr
discarded. Everything it sends is untrusted: messages are size-limited and must be JSON objects
with a "type".
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

SANDBOX_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox.py")
READ_CHUNK_BYTES = 1 << 16


class MessageTooLarge(ValueError):
  """The sandbox sent a line longer than max_message_bytes."""


SCRUBBED_ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                        "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"}


def start(mode, workdir, use_site_packages=False, pass_fds=()):
  """Starts `sandbox.py mode` ("worker" or "exec") in workdir; returns the Popen."""
  flags = ["-B", "-s"] + ([] if use_site_packages else ["-S"])
  return subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, *flags, SANDBOX_SCRIPT, mode], stdin=subprocess.PIPE,
      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=workdir,
      env=dict(SCRUBBED_ENVIRONMENT), start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds))


def kill_group(pid):
  """SIGKILL to the process group led by pid and to pid itself; quiet if already gone."""
  if not pid:
    return
  for kill in (os.killpg, os.kill):
    try:
      kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass


class ProcessHandle:
  """A process that is not the host's child (an episode's child of a zygote), pinned by a
  pidfd so that a kill can never reach another process that reused its pid."""

  def __init__(self, pid):
    self.pid = pid
    try:
      self.pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
      self.pidfd = None

  def alive(self):
    if self.pidfd is None:
      return True
    try:
      signal.pidfd_send_signal(self.pidfd, 0)
      return True
    except ProcessLookupError:
      return False

  def kill(self):
    """SIGKILL to its process group and to it, if it still runs."""
    if self.pidfd is None:
      kill_group(self.pid)
      return
    if self.alive():
      try:
        os.killpg(self.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
      try:
        signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
      except ProcessLookupError:
        pass

  def close(self):
    if self.pidfd is not None:
      os.close(self.pidfd)
      self.pidfd = None


def stop(process, timeout_seconds=5.0):
  """Kills a started process's group and reaps it."""
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
    chunk = os.read(self.fd, READ_CHUNK_BYTES)
    if chunk:
      self.data += chunk
    else:
      self.closed = True


def _parse(line):
  message = json.loads(line)
  if not isinstance(message, dict) or not isinstance(message.get("type"), str):
    raise ValueError(f"expected a JSON object with a 'type'; got {line[:200]!r}")
  return message


class Channel:
  """JSON lines to and from a sandboxed process, every operation bounded by a timeout.

  Input comes from two pipes: "data" (the process's stdout, which an episode's child shares)
  and optionally "control" (a pipe only the trusted zygote holds). receive() prefers control.
  """

  def __init__(self, process, max_message_bytes, control_fd=None):
    self.write_fd = process.stdin.fileno()
    os.set_blocking(self.write_fd, False)
    self._data = _LineBuffer(process.stdout.fileno(), max_message_bytes)
    self._control = None if control_fd is None else _LineBuffer(control_fd, max_message_bytes)

  def send(self, message, timeout_seconds):
    """Writes one message; raises TimeoutError if the process stops reading, EOFError if gone."""
    view = memoryview(json.dumps(message).encode() + b"\n")
    deadline = time.monotonic() + timeout_seconds
    while view:
      remaining = deadline - time.monotonic()
      if remaining <= 0:
        raise TimeoutError("the sandboxed process stopped reading its input")
      _, writable, _ = select.select([], [self.write_fd], [], remaining)
      if writable:
        try:
          view = view[os.write(self.write_fd, view):]
        except BlockingIOError:
          continue
        except OSError as error:
          raise EOFError("the sandboxed process closed its input") from error

  def receive(self, timeout_seconds):
    """The next message as (source, dict), source being "control" or "data".

    Raises TimeoutError when none arrives in time; EOFError when the control pipe closes (or,
    without one, the data pipe); MessageTooLarge for a data line over max_message_bytes (the
    rest of it is skipped); ValueError for a line that is not a JSON object with a "type".
    """
    deadline = time.monotonic() + max(0.0, timeout_seconds)
    buffers = [("control", self._control), ("data", self._data)]
    buffers = [(source, buffer) for source, buffer in buffers if buffer is not None]
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
      if self._data.closed:
        return None
      readable, _, _ = select.select([self._data.fd], [], [], 0)
      if not readable:
        return None
      self._data.fill()
