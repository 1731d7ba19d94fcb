"""The prompt-only restriction of the FST control: a candidate may change only prompt strings.

  failure = check_prompt_only(incumbent_source, candidate_source)   # None when allowed
  prompt_names(source)   # ["SYSTEM_PROMPT", "USER_PROMPT_TEMPLATE"] for the SearchQA seed

The prompt strings are the module-level assignments `NAME = "<string>"` whose NAME contains
"PROMPT" (SYSTEM_PROMPT, USER_PROMPT_TEMPLATE, USER_PROMPT, PROMPT_TEMPLATE in the seeds).
Both programs are parsed; in each, the value of every such assignment is replaced by a
placeholder and every docstring is dropped; the candidate is allowed iff the two syntax trees
are then equal and each of its prompt values is still a plain string literal (adjacent
literals count as one). As in WHALE's `--prompt-only` check, which masks SYSTEM_PROMPT and
USER_PROMPT_TEMPLATE. A prompt may say anything, including changed format placeholders.
"""
import ast
import re

PROMPT_NAME = re.compile(r"PROMPT")
_MASK = "<prompt>"


def assigned_name(node):
  """The one name a module-level `NAME = value` (or `NAME: type = value`) statement assigns,
  or None."""
  if isinstance(node, ast.Assign) and len(node.targets) == 1:
    target = node.targets[0]
  elif isinstance(node, ast.AnnAssign) and node.value is not None:
    target = node.target
  else:
    return None
  return target.id if isinstance(target, ast.Name) else None


def _prompt_target(node):
  """The prompt name a module-level statement assigns, or None."""
  name = assigned_name(node)
  return name if name and PROMPT_NAME.search(name) else None


def prompt_names(source):
  """Names of the prompt strings a program defines, in source order."""
  tree = ast.parse(source)
  return [name for name in map(_prompt_target, tree.body) if name]


def _is_docstring(node):
  return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and
          isinstance(node.value.value, str))


def masked_dump(tree, masked):
  """ast.dump of tree with the value of every module-level statement for which masked(node)
  is true replaced by one placeholder, and every docstring dropped."""
  for node in tree.body:
    if masked(node):
      node.value = ast.Constant(_MASK)
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      if node.body and _is_docstring(node.body[0]):
        node.body = node.body[1:] or [ast.Pass()]
  return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _masked_dump(tree):
  """masked_dump with the prompt values masked; also the prompts that are not literals."""
  non_literal = [_prompt_target(node) for node in tree.body
                 if _prompt_target(node) and not (isinstance(node.value, ast.Constant) and
                                                  isinstance(node.value.value, str))]
  return masked_dump(tree, _prompt_target), non_literal


def check_prompt_only(incumbent_source, candidate_source):
  """None when the candidate differs from the incumbent only in prompt strings, else why not.

  Returns a sentence for the proposer naming what may change.
  """
  allowed = ", ".join(prompt_names(incumbent_source)) or "(none: the incumbent has no prompts)"
  try:
    candidate = ast.parse(candidate_source)
  except SyntaxError as error:
    return f"The candidate does not parse (SyntaxError: {error.msg}, line {error.lineno})."
  incumbent_dump, _ = _masked_dump(ast.parse(incumbent_source))
  candidate_dump, non_literal = _masked_dump(candidate)
  if non_literal:
    return (f"Prompt-only mode: {', '.join(non_literal)} must stay a plain string literal; "
            "write the new prompt text out as a string.")
  if candidate_dump != incumbent_dump:
    return ("Prompt-only mode: the candidate changes code other than the prompt strings. "
            f"Change only the text of {allowed}; leave every other line as it is.")
  return None
