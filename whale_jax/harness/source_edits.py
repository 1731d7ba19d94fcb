"""Building blocks of the offline edit library: SEARCH/REPLACE edits anchored by parsing a harness.

A domain's edit catalogue (whale_jax/tasks/<family>/edits.py) is a tuple of (mechanism name,
make) pairs; make(source, tree) returns [(blocks, hypothesis, prompt_only_safe)], blocks being
SEARCH/REPLACE text against source (tree = ast.parse(source)). The helpers here find the
anchors (module-level constants, statements of run()) and write the blocks; integer_edit,
append_to_prompt, replace_prompt and verify_then_retry make whole mechanisms.
search/edit_library.py applies, checks and chooses among the edits.
"""
import ast
import re

LINE_WIDTH = 96


# ---- Locating anchors ------------------------------------------------------------------


def block(search, replace):
  return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


def statement_lines(source, node):
  """The exact source lines of a statement (with their newlines)."""
  lines = source.splitlines(keepends=True)
  text = "".join(lines[node.lineno - 1:node.end_lineno])
  return text if text.endswith("\n") else text + "\n"


def constant(tree, name):
  """(node, value) of a module-level `name = <literal>`, or (None, None)."""
  for node in tree.body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and
        isinstance(node.targets[0], ast.Name) and node.targets[0].id == name):
      try:
        return node, ast.literal_eval(node.value)
      except ValueError:
        return None, None
  return None, None


def function(tree, name):
  for node in tree.body:
    if isinstance(node, ast.FunctionDef) and node.name == name:
      return node
  return None


def quoted(text):
  """repr(text), in double quotes when the text has none."""
  literal = repr(text)
  if literal.startswith("'") and '"' not in text:
    literal = '"' + literal[1:-1] + '"'
  return literal


def string_literal(value, indent):
  """A Python literal for value: one line, or adjacent literals in parentheses."""
  literal = quoted(value)
  if len(literal) + indent <= LINE_WIDTH:
    return literal
  chunks = [""]
  for word in re.split(r"(?<= )", value):
    if chunks[-1] and len(quoted(chunks[-1] + word)) + indent + 1 > LINE_WIDTH:
      chunks.append("")
    chunks[-1] += word
  inner = ("\n" + " " * (indent + 1)).join(quoted(chunk) for chunk in chunks)
  return f"({inner})"


def set_constant(source, tree, name, value):
  """A block setting module-level constant `name` to value, or None when it is absent."""
  node, current = constant(tree, name)
  if node is None or current == value or type(current) is not type(value):
    return None
  literal = string_literal(value, len(name) + 3) if isinstance(value, str) else repr(value)
  return block(statement_lines(source, node), f"{name} = {literal}\n")


def statement(function, predicate):
  """The first statement (at any depth) of a function for which predicate(node) holds."""
  if function is None:
    return None
  for node in ast.walk(function):
    if isinstance(node, ast.stmt) and node is not function and predicate(node):
      return node
  return None


def indent_of(source, node):
  line = source.splitlines()[node.lineno - 1]
  return line[:len(line) - len(line.lstrip())]


def indented(code, indent):
  code = code.rstrip("\n")
  return "".join(indent + line + "\n" if line else "\n" for line in code.split("\n"))


def defines(tree, *names):
  defined = {target.id for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets if isinstance(target, ast.Name)}
  defined |= {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
  return all(name in defined for name in names)


def is_assign_to(node, name):
  return (isinstance(node, ast.Assign) and len(node.targets) == 1 and
          isinstance(node.targets[0], ast.Name) and node.targets[0].id == name)


def calls(node, dotted):
  """Whether node is a call of e.g. "llm.chat"."""
  owner, attribute = dotted.split(".")
  return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and
          node.func.attr == attribute and isinstance(node.func.value, ast.Name) and
          node.func.value.id == owner)


def final_return(function, name):
  """The last top-level `return <name>` of a function, or None."""
  if function is None or not function.body:
    return None
  last = function.body[-1]
  if isinstance(last, ast.Return) and isinstance(last.value, ast.Name) and last.value.id == name:
    return last
  return None


# ---- Edits: each returns [(blocks, hypothesis, prompt_only_safe)] ------------------------


def integer_edit(mechanism_text, name, values, limit=None):
  """Edits setting the constant `name` to one of values (at most limit).

  The hypothesis argues for more (turns, passages, words): the values above the current one
  are offered while there are any, the smaller ones only once none is left above.
  """
  def edit(source, tree):
    node, current = constant(tree, name)
    if node is None or not isinstance(current, int):
      return []
    allowed = [v for v in values if v != current and (limit is None or v <= limit)]
    larger = [v for v in allowed if v > current]
    options = []
    for value in larger or allowed:
      direction = "more" if value > current else "fewer"
      options.append((set_constant(source, tree, name, value),
                      mechanism_text.format(old=current, new=value, direction=direction),
                      False))
    return options
  return edit


def append_to_prompt(name, reminders, why):
  def edit(source, tree):
    node, current = constant(tree, name)
    if node is None or not isinstance(current, str):
      return []
    options = []
    for reminder in reminders:
      if reminder.strip() in current:
        continue
      separator = "\n" if "\n" in current or name != "SYSTEM_PROMPT" else " "
      options.append((set_constant(source, tree, name, current + separator + reminder),
                      f"{why} Adding to {name}: {reminder.strip()!r}.", True))
    return options
  return edit


def replace_prompt(name, values, why):
  def edit(source, tree):
    node, current = constant(tree, name)
    if node is None or not isinstance(current, str):
      return []
    return [(set_constant(source, tree, name, value), f"{why} New {name}: {value!r}.",
             True) for value in values if value != current]
  return edit


def verify_then_retry(tag, instruction):
  def edit(source, tree):
    run = function(tree, "run")
    node = final_return(run, "reply")
    if node is None or statement(run, lambda n: is_assign_to(n, "messages")) is None:
      return []
    if f"{tag!r} not in reply" in ast.unparse(run) or f"{quoted(tag)} not in reply" in source:
      return []
    indent = indent_of(source, node)
    code = (f"if {quoted(tag)} not in reply:\n"
            f"  messages.append({{\"role\": \"user\",\n"
            f"                   \"content\": {quoted(instruction)}}})\n"
            f"  reply = llm.chat(messages)\n"
            f"return reply")
    return [(block(statement_lines(source, node), indented(code, indent)),
             f"Some episodes end without a final {tag} answer; when the last reply has none, "
             "asking once more for the final answer turns them into scored answers.", False)]
  return edit
