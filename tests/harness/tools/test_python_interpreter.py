"""The sandboxed python tool: output capture, errors, limits, confinement."""
import os

from whale_jax.harness.tools import python_interpreter

WITH_OS = python_interpreter.DEFAULT_ALLOWED_IMPORTS + ("os",)


def test_stdout_is_captured():
  result = python_interpreter.run_python("import math\nprint(math.factorial(10))")
  assert (result["status"], result["stdout"], result["stderr"]) == ("ok", "3628800\n", "")


def test_exception_gives_a_trimmed_traceback():
  result = python_interpreter.run_python("x = 1\ny = x / 0\n")
  assert result["status"] == "error"
  assert result["stderr"] == ('Traceback (most recent call last):\n  File "<code>", line 2, in '
                              '<module>\nZeroDivisionError: division by zero\n')


def test_last_expression_is_echoed_when_asked():
  assert python_interpreter.run_python("2 ** 10", echo_last_expression=True)["stdout"] == "1024\n"
  assert python_interpreter.run_python("2 ** 10")["stdout"] == ""


def test_timeout_kills_the_process():
  result = python_interpreter.run_python("while True:\n  pass", timeout_seconds=1.0)
  assert result["status"] == "timeout"
  assert 1.0 <= result["seconds"] < 3.0


def test_memory_limit_raises_memory_error():
  result = python_interpreter.run_python("x = bytearray(1 << 30)", memory_bytes=256 << 20)
  assert result["status"] == "error"
  assert result["stderr"].endswith("MemoryError\n")


def test_output_is_trimmed():
  result = python_interpreter.run_python("print('z' * 50_000)", max_output_chars=100)
  assert result["stdout"] == "z" * 100 + f"\n[{50_001 - 100} more characters not kept]"


def test_processes_and_outside_files_are_refused(tmp_path):
  target = tmp_path / "owned.txt"
  code = f"import os\ntry:\n  os.system('true')\nexcept PermissionError as e:\n  print('no spawn')\n" \
         f"open({str(target)!r}, 'w')"
  result = python_interpreter.run_python(code, allowed_imports=WITH_OS)
  assert result["stdout"] == "no spawn\n"
  # refused by the audit hook, or (inside the namespaces) the folder is not there at all
  assert "PermissionError" in result["stderr"] or "FileNotFoundError" in result["stderr"]
  assert not target.exists()


def test_environment_is_scrubbed(monkeypatch):
  monkeypatch.setenv("WHALE_TOOL_SECRET", "hunter2")
  result = python_interpreter.run_python("import os\nprint(sorted(os.environ))",
                                         allowed_imports=WITH_OS)
  assert result["status"] == "ok" and "PATH" in result["stdout"]
  assert "WHALE_TOOL_SECRET" not in result["stdout"]
  assert os.environ["WHALE_TOOL_SECRET"] == "hunter2"


def test_import_outside_the_allowlist_is_refused():
  result = python_interpreter.run_python("import numpy")
  assert "import of 'numpy' is refused" in result["stderr"]
  result = python_interpreter.run_python("import os")  # loaded in the process, not allowed
  assert "import of 'os' is refused" in result["stderr"]


def test_tool_formats_output_for_the_model():
  python = python_interpreter.python_tool(timeout_seconds=5.0)
  assert python("print('hi')") == "hi\n"
  assert python("pass") == "(no output; status ok)"


def test_site_packages_are_mounted_read_only_when_asked(tmp_path):
  code = ("import numpy, os\nprint(int(numpy.arange(4).sum()))\n"
          "try:\n  open(os.path.join(os.path.dirname(numpy.__file__), 'owned'), 'w')\n"
          "except OSError as error:\n  print(type(error).__name__)\n")
  result = python_interpreter.run_python(code, use_site_packages=True,
                                         allowed_imports=("numpy", "os"), timeout_seconds=30)
  assert result["stdout"].splitlines()[0] == "6", result
  import numpy  # pylint: disable=import-outside-toplevel
  assert not os.path.exists(os.path.join(os.path.dirname(numpy.__file__), "owned"))
