"""A sandboxed Python interpreter: each call runs the code in a fresh confined process.

  run_python("x = 6 * 7\nprint(x)")
  # {"status": "ok", "stdout": "42\n", "stderr": "", "seconds": 0.0001}
  tools = {"python": python_tool(timeout_seconds=10.0)}   # inside a harness: tools.python(code)

The process is sandbox.py in exec mode: a fresh interpreter with the confinement of a harness
episode (its own bubblewrap namespaces and seccomp programs, see whale_jax/harness/confinement.py;
an empty working directory, scrubbed environment, address-space and CPU limits, no processes,
no network, no files outside its directory, imports limited to allowed_imports, preloaded
before confinement). Where the machine cannot confine it, run_python raises
confinement.SandboxUnavailable unless allow_weak_sandbox=True. Status:
  ok        the code ran to the end.
  error     it raised; the trimmed traceback is in stderr (MemoryError when it hit the
            memory limit).
  timeout   it ran past timeout_seconds (start-up included) and its process group was killed.
  crashed   its process died without reporting (e.g. a C-level crash).
stdout and stderr keep at most max_output_chars characters each. The reported output comes from
the confined process itself, so code running there could forge it; it is the harness's own
tool, and nothing scores it.
"""
import os
import shutil
import tempfile
import time

from whale_jax.harness import confinement as confinement_lib
from whale_jax.harness import sandbox_process

DEFAULT_ALLOWED_IMPORTS = (
    "bisect", "cmath", "collections", "copy", "dataclasses", "decimal", "fractions",
    "functools", "heapq", "itertools", "json", "math", "numbers", "operator", "random", "re",
    "statistics", "string", "textwrap", "typing")
STATUSES = ("ok", "error", "timeout", "crashed")


def run_python(code, timeout_seconds=10.0, memory_bytes=512 << 20, max_output_chars=10_000,
               allowed_imports=DEFAULT_ALLOWED_IMPORTS, echo_last_expression=False,
               use_site_packages=False, file_size_bytes=16 << 20, max_open_files=64,
               allow_weak_sandbox=False):
  """Runs code in a fresh sandboxed interpreter.

  Args:
    code: Python source.
    timeout_seconds: wall-clock limit, start-up included.
    memory_bytes: address-space limit.
    max_output_chars: most characters kept of stdout and of stderr.
    allowed_imports: modules importable by the code (loaded before confinement).
    echo_last_expression: print the repr of a final expression statement, like a REPL.
    use_site_packages: start the interpreter with site-packages, so that allowed_imports may
      name installed packages (e.g. sympy); start-up then takes longer.
    allow_weak_sandbox: run without namespaces or seccomp where they are unavailable.
  Returns:
    {"status": one of STATUSES, "stdout": str, "stderr": str, "seconds": float}
  """
  if not isinstance(code, str):
    raise TypeError(f"python(code) takes the code as a str; got {type(code).__name__}.")
  confinement = confinement_lib.confinement_for(allow_weak_sandbox)
  started = time.monotonic()
  workdir = tempfile.mkdtemp(prefix="whale_python_")
  os.chmod(workdir, 0o711)
  process = None
  try:
    process = sandbox_process.start("exec", workdir, confinement,
                                    use_site_packages=use_site_packages)
    channel = sandbox_process.Channel(process.stdin.fileno(), process.stdout.fileno(),
                                      4 * max_output_chars + (1 << 16))
    channel.send({"type": "config", "code": code, "allowed_imports": list(allowed_imports),
                  "memory_bytes": int(memory_bytes),
                  "cpu_seconds": int(-(-timeout_seconds // 1)) + 1,
                  "file_size_bytes": int(file_size_bytes), "max_open_files": int(max_open_files),
                  "max_output_chars": int(max_output_chars),
                  "echo_last_expression": bool(echo_last_expression),
                  **sandbox_process.sandbox_config(confinement)},
                 timeout_seconds)
    _, message = channel.receive(timeout_seconds - (time.monotonic() - started))
    if message.get("type") != "result" or message.get("status") not in ("ok", "error"):
      raise ValueError(f"unexpected message {message!r:.200}")
    return {"status": message["status"], "stdout": str(message.get("stdout", "")),
            "stderr": str(message.get("stderr", "")), "seconds": time.monotonic() - started}
  except TimeoutError:
    return {"status": "timeout", "stdout": "", "seconds": time.monotonic() - started,
            "stderr": f"The code ran for more than {timeout_seconds:g} seconds and was killed."}
  except (EOFError, ValueError) as error:
    sandbox_process.stop(process)
    return {"status": "crashed", "stdout": "", "seconds": time.monotonic() - started,
            "stderr": f"The interpreter process died without a result (exit code "
                      f"{process.returncode if process else None}; {error})."}
  finally:
    sandbox_process.stop(process)
    shutil.rmtree(workdir, ignore_errors=True)


def format_result(result):
  """stdout, then stderr, then a note for timeouts and crashes: what a model reads back."""
  text = result["stdout"] + result["stderr"]
  return text if text.strip() else f"(no output; status {result['status']})"


def python_tool(**options):
  """A tool `python(code) -> str` (format_result of run_python(code, **options))."""

  def python(code: str) -> str:
    return format_result(run_python(code, **options))

  return python
