"""Cheap static checks a harness must pass before it costs a rollout.

  failures = check_harness(source, allowed_imports=DEFAULT_ALLOWED_IMPORTS, max_lines=200)
  if failures:
    feedback = describe_failures(failures)   # text a proposer model can act on

Checks: the source parses; it has at most max_lines lines; it defines a top-level
`def run(task, llm, tools)` with three positional parameters; it imports only allowed modules
(absolute imports); it uses none of eval, exec, compile, __import__, open, globals, locals,
vars, breakpoint, input, exit, quit, help; no dunder names other than __name__, no dunder or
frame/code-introspection attributes, no attribute named like a module that reaches the
interpreter or the system (`dataclasses.sys`, `.modules`, `.ctypes`, ...) unless that module is
allowed, and getattr/setattr/delattr/hasattr only with a literal, non-underscore attribute name.
These keep honest mistakes and obvious escapes out with readable feedback; they are not a
security boundary: the sandbox's namespaces and seccomp programs
(whale_jax/harness/confinement.py) contain whatever gets past them, native code included.
"""
import ast
import dataclasses

DEFAULT_MAX_LINES = 200
DEFAULT_ALLOWED_IMPORTS = (
    "__future__", "bisect", "collections", "copy", "dataclasses", "decimal", "difflib", "enum",
    "fractions", "functools", "heapq", "itertools", "json", "math", "operator", "random", "re",
    "statistics", "string", "textwrap", "time", "typing", "unicodedata")
FORBIDDEN_NAMES = ("eval", "exec", "compile", "__import__", "open", "globals", "locals", "vars",
                   "breakpoint", "input", "exit", "quit", "help")
ATTRIBUTE_FUNCTIONS = ("getattr", "setattr", "delattr", "hasattr")
INTROSPECTION_ATTRIBUTES = frozenset({
    "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "f_trace", "tb_frame", "tb_next",
    "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "co_code", "co_consts",
    "func_globals", "func_code"})
ALLOWED_DUNDER_NAMES = frozenset({"__name__"})
# Attributes through which an allowed module reaches modules that are not (dataclasses.sys,
# json.codecs.sys.modules, random._os, ...); refused, with or without leading underscores,
# unless the module of that name is itself allowed.
SYSTEM_ATTRIBUTES = frozenset({
    "sys", "modules", "os", "posix", "nt", "builtins", "ctypes", "_ctypes", "gc", "importlib",
    "subprocess", "socket", "_socket", "signal", "_signal", "resource", "mmap", "marshal",
    "pty", "shutil", "tempfile", "threading", "_thread", "multiprocessing", "runpy", "pickle",
    "inspect", "_imp", "meta_path", "path_hooks"})


@dataclasses.dataclass(frozen=True)
class CheckFailure:
  """One reason a harness is refused.

  Attributes:
    code: a stable identifier, e.g. "syntax_error", "import_not_allowed", "missing_run".
    message: what is wrong and what to do instead, written for a proposer model.
    line: 1-based source line, or None when the failure is about the whole file.
  """
  code: str
  message: str
  line: int | None = None


def _is_dunder(name):
  return name.startswith("__") and name.endswith("__") and len(name) > 4


def _check_run(tree):
  runs = [node for node in tree.body
          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "run"]
  if not runs:
    return [CheckFailure("missing_run", "The harness defines no top-level function "
                         "`def run(task, llm, tools):`. Define one that returns the final "
                         "answer as a str.")]
  run = runs[-1]
  if isinstance(run, ast.AsyncFunctionDef):
    return [CheckFailure("run_signature", "run must be a plain `def`, not `async def`.",
                         run.lineno)]
  arguments = run.args
  positional = arguments.posonlyargs + arguments.args
  required = len(positional) - len(arguments.defaults)
  if (required > 3 or (len(positional) < 3 and arguments.vararg is None) or
      any(default is None for default in arguments.kw_defaults)):
    names = ", ".join(argument.arg for argument in positional)
    return [CheckFailure("run_signature", f"run({names}) must take exactly three positional "
                         "parameters: `def run(task, llm, tools):`.", run.lineno)]
  return []


def _check_node(node, allowed):
  """Failures for one AST node (imports, names, attributes, attribute functions)."""
  allowed_text = ", ".join(sorted(allowed))
  if isinstance(node, ast.Import):
    return [CheckFailure("import_not_allowed", f"import {alias.name}: module "
                         f"{alias.name.split('.')[0]!r} is not allowed. Allowed modules: "
                         f"{allowed_text}.", node.lineno)
            for alias in node.names if alias.name.split(".")[0] not in allowed]
  if isinstance(node, ast.ImportFrom):
    if node.level:
      return [CheckFailure("import_not_allowed", "Relative imports are not allowed; a harness "
                           f"is one file. Allowed modules: {allowed_text}.", node.lineno)]
    if (node.module or "").split(".")[0] not in allowed:
      return [CheckFailure("import_not_allowed", f"from {node.module} import ...: module "
                           f"{node.module.split('.')[0]!r} is not allowed. Allowed modules: "
                           f"{allowed_text}.", node.lineno)]
    return []
  if isinstance(node, ast.Name):
    if node.id in FORBIDDEN_NAMES:
      return [CheckFailure("forbidden_name", f"{node.id} is not allowed in a harness; call the "
                           "model through llm and the outside world through tools.",
                           node.lineno)]
    if _is_dunder(node.id) and node.id not in ALLOWED_DUNDER_NAMES:
      return [CheckFailure("forbidden_name", f"{node.id} is not allowed in a harness (dunder "
                           "names reach interpreter internals).", node.lineno)]
    return []
  if isinstance(node, ast.Attribute):
    if _is_dunder(node.attr) or node.attr in INTROSPECTION_ATTRIBUTES:
      return [CheckFailure("forbidden_attribute", f".{node.attr} is not allowed in a harness "
                           "(it reaches interpreter internals).", node.lineno)]
    bare = node.attr.lstrip("_")  # the stdlib's private aliases too: random._os, os._sys
    if bare in SYSTEM_ATTRIBUTES and bare not in allowed and node.attr not in allowed:
      return [CheckFailure("forbidden_attribute", f".{node.attr} is not allowed in a harness "
                           "(it reaches modules outside the allowed imports); use only the "
                           f"allowed modules: {allowed_text}.", node.lineno)]
    return []
  if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
      node.func.id in ATTRIBUTE_FUNCTIONS):
    name = node.args[1] if len(node.args) > 1 else None
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and
            not name.value.startswith("_")):
      return [CheckFailure("forbidden_attribute", f"{node.func.id}() needs a literal attribute "
                           "name that does not start with '_'; write the attribute out "
                           "(obj.name) instead.", node.lineno)]
  return []


def check_harness(source, allowed_imports=DEFAULT_ALLOWED_IMPORTS,
                  max_lines=DEFAULT_MAX_LINES):
  """All static check failures of a harness source, in source order ([] when it passes).

  Args:
    source: the program text.
    allowed_imports: top-level module names the harness may import (the domain's allowlist).
    max_lines: most lines the file may have.
  """
  if not isinstance(source, str) or not source.strip():
    return [CheckFailure("empty", "The harness is empty; write a Python file that defines "
                         "`def run(task, llm, tools):`.")]
  failures = []
  num_lines = len(source.splitlines())
  if num_lines > max_lines:
    failures.append(CheckFailure("too_long", f"The harness has {num_lines} lines; at most "
                                 f"{max_lines} are allowed. Remove code rather than adding "
                                 "it."))
  try:
    tree = ast.parse(source, "harness.py")
  except SyntaxError as error:
    return failures + [CheckFailure("syntax_error", f"SyntaxError: {error.msg} (line "
                                    f"{error.lineno}, column {error.offset}).", error.lineno)]
  except (ValueError, RecursionError, MemoryError) as error:
    return failures + [CheckFailure("syntax_error", f"The source does not parse: {error}.")]
  failures += _check_run(tree)
  allowed = frozenset(allowed_imports)
  node_failures = []
  for node in ast.walk(tree):
    node_failures += _check_node(node, allowed)
  failures += sorted(node_failures, key=lambda failure: failure.line or 0)
  return failures


def describe_failures(failures):
  """The failures as a short text a proposer model can act on."""
  if not failures:
    return "The harness passed all static checks."
  lines = [f"The harness failed {len(failures)} static check(s):"]
  for failure in failures:
    where = f"line {failure.line}: " if failure.line else ""
    lines.append(f"- [{failure.code}] {where}{failure.message}")
  return "\n".join(lines)
