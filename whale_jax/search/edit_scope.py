"""What a harness revision may change: VACE's scope, "skills and execution guidance" (SPEC 2.1).

  problem = check_scope("guidance", incumbent_source, candidate_source)   # None when allowed

Scopes (SCOPES):
  any        anything the static checks allow (WHALE, Meta-Harness, Harness Learning).
  guidance   only the values of the program's module-level constants: every top-level
             `NAME = <literal>` (a string, number, boolean, None, or a tuple / list / dict /
             set of literals) may take another literal value. In the seed harnesses these
             constants are the instructions the model reads (SYSTEM_PROMPT,
             USER_PROMPT_TEMPLATE: where a skill or a piece of guidance is written) and the
             execution rules (MAX_TURNS, TOPK, MAX_DOC_TOKENS, MAX_RESULT_CHARS, ...: turn
             budgets, how much of a tool's answer is shown). Everything else stays as the
             incumbent's: the functions (how the model and the tools are called, how replies
             are parsed, when the episode stops), the imports, and which constants exist; a
             docstring may change. So the tools' semantics, the answer the harness returns and
             the environment's rules are fixed, as VACE fixes them.
Both programs are parsed; each literal constant's value is replaced by a placeholder and every
docstring dropped; the candidate is in scope iff the two syntax trees are then equal (a
constant turned into an expression is not masked, so it differs). Prompt-only (FST,
search/prompt_only.py) is the narrower scope of the prompt strings alone.
"""
import ast

from whale_jax.search import prompt_only

SCOPES = ("any", "guidance")


def _literal(node):
  try:
    ast.literal_eval(node)
  except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
    return False
  return True


def _constant_target(node):
  """The name a top-level `NAME = <literal>` assigns, or None."""
  name = prompt_only.assigned_name(node)
  return name if name and _literal(node.value) else None


def _masked_dump(source):
  return prompt_only.masked_dump(ast.parse(source), _constant_target)


def constant_names(source):
  """The module-level literal constants a program defines, in source order."""
  return [name for name in map(_constant_target, ast.parse(source).body) if name]


def check_scope(scope, reference_source, candidate_source):
  """None when candidate_source changes only what scope allows of reference_source, else a
  message for the proposer naming what may change."""
  if scope not in SCOPES:
    raise ValueError(f"edit scope {scope!r}; use one of {', '.join(SCOPES)}.")
  if scope == "any":
    return None
  if _masked_dump(candidate_source) == _masked_dump(reference_source):
    return None
  names = ", ".join(constant_names(reference_source)) or "(none)"
  return ("The harness-edit scope is skills and execution guidance: change only the values of "
          f"the module-level constants ({names}) to other literal values (text, numbers); "
          "keep every function, import and statement, and add or remove no constant.")
