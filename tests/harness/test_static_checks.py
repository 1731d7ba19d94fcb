"""Static checks: each kind of failure on its own, and a clean seed harness that passes."""
import pytest

from whale_jax.harness import static_checks

SEED = '''import re

def run(task, llm, tools):
    reply = llm.chat([{"role": "user", "content": task["question"]}])
    match = re.search(r"<answer>(.*?)</answer>", reply)
    return match.group(1) if match else reply
'''


def codes(source, **kwargs):
  return [failure.code for failure in static_checks.check_harness(source, **kwargs)]


def test_seed_harness_passes():
  assert static_checks.check_harness(SEED) == []


def test_syntax_error_names_the_line():
  failures = static_checks.check_harness("def run(task, llm, tools)\n    return ''\n")
  assert [f.code for f in failures] == ["syntax_error"]
  assert failures[0].line == 1


def test_missing_run_is_reported():
  assert codes("def solve(task, llm, tools):\n    return ''\n") == ["missing_run"]


@pytest.mark.parametrize("signature", ["run(task, llm)", "run(task, llm, tools, extra)",
                                       "run(*, task, llm, tools)"])
def test_run_must_take_three_positional_parameters(signature):
  assert codes(f"def {signature}:\n    return ''\n") == ["run_signature"]


def test_run_with_defaults_or_varargs_is_accepted():
  assert codes("def run(task, llm, tools, retries=2):\n    return ''\n") == []
  assert codes("def run(*args):\n    return ''\n") == []


def test_async_run_is_refused():
  assert codes("async def run(task, llm, tools):\n    return ''\n") == ["run_signature"]


def test_line_limit_is_configurable():
  source = SEED + "\n" * 5 + "# end\n"
  num_lines = len(source.splitlines())
  assert codes(source, max_lines=num_lines) == []
  failures = static_checks.check_harness(source, max_lines=num_lines - 1)
  assert [f.code for f in failures] == ["too_long"]
  assert f"{num_lines} lines" in failures[0].message


@pytest.mark.parametrize("statement", ["import os", "import os.path", "from subprocess import run",
                                       "import json, socket", "from . import sibling"])
def test_imports_outside_the_allowlist_are_refused(statement):
  failures = static_checks.check_harness(f"{statement}\n\ndef run(task, llm, tools):\n  return ''\n")
  assert [f.code for f in failures] == ["import_not_allowed"]
  assert "Allowed modules: " in failures[0].message and "json" in failures[0].message


def test_allowlist_is_per_domain():
  source = "import chess\n\ndef run(task, llm, tools):\n  return ''\n"
  assert codes(source) == ["import_not_allowed"]
  assert codes(source, allowed_imports=("chess",)) == []


@pytest.mark.parametrize("name", ["eval", "exec", "compile", "__import__", "open", "globals",
                                  "vars", "breakpoint", "__builtins__"])
def test_forbidden_names_are_refused(name):
  source = f"def run(task, llm, tools):\n    x = {name}\n    return ''\n"
  failures = static_checks.check_harness(source)
  assert [(f.code, f.line) for f in failures] == [("forbidden_name", 2)]


@pytest.mark.parametrize("expression", ["().__class__", "run.__globals__", "error.tb_frame",
                                        "frame.f_back", "getattr(task, name)",
                                        "getattr(task, '_secret')", "setattr(llm, '__call__', 1)"])
def test_introspection_tricks_are_refused(expression):
  source = f"def run(task, llm, tools):\n    x = {expression}\n    return ''\n"
  assert codes(source) == ["forbidden_attribute"]


def test_literal_getattr_and_dunder_name_guard_are_allowed():
  source = ("def run(task, llm, tools):\n    return getattr(tools, 'search')('q')\n\n"
            "if __name__ == '__main__':\n    pass\n")
  assert codes(source) == []


def test_describe_failures_lists_each_reason_with_its_line():
  failures = static_checks.check_harness("import os\n\ndef run(task, llm):\n    return eval('1')\n")
  text = static_checks.describe_failures(failures)
  assert text.startswith("The harness failed 3 static check(s):")
  assert "- [import_not_allowed] line 1: " in text
  assert "- [run_signature] line 3: " in text
  assert "- [forbidden_name] line 4: eval is not allowed" in text


@pytest.mark.parametrize("reach", ["dataclasses.sys.modules['ctypes']",
                                   "json.codecs.sys.modules", "random._os", "re.copyreg.sys"])
def test_reaching_other_modules_through_an_allowed_one_is_refused(reach):
  source = ("import dataclasses, json, random, re\n\ndef run(task, llm, tools):\n"
            f"    return str({reach})\n")
  failures = static_checks.check_harness(source)
  assert failures and {f.code for f in failures} == {"forbidden_attribute"}
  assert all(f.line == 4 for f in failures)


def test_a_system_attribute_is_fine_when_its_module_is_allowed():
  source = "import os\n\ndef run(task, llm, tools):\n    return os.sep + str(task.os)\n"
  assert codes(source, allowed_imports=("os",)) == []
