"""Harness edits proposed as text: SEARCH/REPLACE blocks, or a whole program in a code fence.

  result = apply_proposal(source, proposal_text)
  result.ok         # something changed and every block applied
  result.source     # the edited program (the original when nothing changed)
  result.kind       # "blocks", "program", "malformed" or "none"
  result.reports    # one BlockReport per block: applied / not_found / ambiguous
  result.message    # the per-block report as text, to feed back to the proposer

A block (aider's format; fences and file names around it are ignored):

  <<<<<<< SEARCH
  lines copied from the current program
  =======
  the lines to put there instead
  >>>>>>> REPLACE

Blocks apply in order, each to the result of the previous ones. A block's SEARCH text must
match exactly one place: first exactly; else line by line ignoring trailing whitespace; else
line by line ignoring all indentation and repeated spaces, in which case the REPLACE lines are
re-indented by the difference between the matched lines and the SEARCH lines. More than one
match at the first level that matches is "ambiguous", none at any level is "not_found"; either
leaves the program as it was for that block.

Without blocks, the last fenced code block (```python, ```py or ```) that defines `def run(` is
taken as a whole new program (or the whole text, when it is Python defining run). A proposal
that leaves the program unchanged is refused (ok False).
"""
import ast
import dataclasses
import re

_SEARCH = re.compile(r"^\s*<{5,9} ?SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9} ?REPLACE\s*$")
_FENCE = re.compile(r"^```[ \t]*(python|py|python3)?[ \t]*\n(.*?)^```[ \t]*$",
                    re.MULTILINE | re.DOTALL)
STATUSES = ("applied", "not_found", "ambiguous")


class PatchFormatError(ValueError):
  """A SEARCH/REPLACE block that is not closed."""


@dataclasses.dataclass(frozen=True)
class EditBlock:
  search: str
  replace: str


@dataclasses.dataclass(frozen=True)
class BlockReport:
  """What happened to one block: status in STATUSES; match is "exact", "whitespace",
  "indentation" or "" (not applied); detail is the sentence shown to the proposer."""
  index: int
  status: str
  match: str
  detail: str


@dataclasses.dataclass(frozen=True)
class PatchResult:
  source: str
  kind: str
  changed: bool
  reports: tuple[BlockReport, ...] = ()
  message: str = ""

  @property
  def all_applied(self):
    return all(report.status == "applied" for report in self.reports)

  @property
  def ok(self):
    return self.changed and self.all_applied


def parse_blocks(text):
  """The SEARCH/REPLACE blocks in text, in order; raises PatchFormatError for an open block."""
  blocks, lines, index = [], text.splitlines(), 0
  while index < len(lines):
    if not _SEARCH.match(lines[index]):
      index += 1
      continue
    start = index
    search, replace, part = [], [], "search"
    index += 1
    while index < len(lines):
      line = lines[index]
      if part == "search" and _DIVIDER.match(line):
        part = "replace"
      elif part == "replace" and _REPLACE.match(line):
        break
      elif _SEARCH.match(line):
        raise PatchFormatError(f"The SEARCH block opened on line {start + 1} is not closed "
                               f"before another SEARCH on line {index + 1}.")
      else:
        (search if part == "search" else replace).append(line)
      index += 1
    if index >= len(lines):
      missing = "=======" if part == "search" else ">>>>>>> REPLACE"
      raise PatchFormatError(f"The SEARCH block opened on line {start + 1} has no "
                             f"'{missing}' line; close every block with ======= and "
                             ">>>>>>> REPLACE.")
    blocks.append(EditBlock("".join(line + "\n" for line in search),
                            "".join(line + "\n" for line in replace)))
    index += 1
  return blocks


def _defines_run(code):
  try:
    tree = ast.parse(code)
  except (SyntaxError, ValueError):
    return False
  return any(isinstance(node, ast.FunctionDef) and node.name == "run" for node in tree.body)


def extract_program(text):
  """The whole program a proposal contains, or None."""
  fenced = [match.group(2) for match in _FENCE.finditer(text)]
  for code in reversed(fenced):
    if "def run(" in code:
      return code
  if not fenced and _defines_run(text):
    return text
  return None


def _indent(line):
  return line[:len(line) - len(line.lstrip())]


def _collapse(line):
  return " ".join(line.split())


def _find(source_lines, search_lines, normalize):
  keys = [normalize(line) for line in source_lines]
  target = [normalize(line) for line in search_lines]
  size = len(target)
  return [start for start in range(len(keys) - size + 1) if keys[start:start + size] == target]


def _reindent(replace_lines, search_lines, matched_lines):
  search_indent = next((_indent(l) for l in search_lines if l.strip()), "")
  matched_indent = next((_indent(l) for l in matched_lines if l.strip()), "")
  reindented = []
  for line in replace_lines:
    if not line.strip():
      reindented.append(line)
    elif line.startswith(search_indent):
      reindented.append(matched_indent + line[len(search_indent):])
    else:
      reindented.append(matched_indent + line.lstrip())
  return reindented


def _apply_block(source, block, index):
  """(new source, BlockReport) for one block."""
  if not block.search.strip():
    return source, BlockReport(index, "not_found", "", f"Block {index}: the SEARCH part is "
                               "empty; copy the lines to replace from the current program.")
  count = source.count(block.search)
  if count == 1:
    return source.replace(block.search, block.replace, 1), BlockReport(
        index, "applied", "exact", f"Block {index}: applied (exact match).")
  if count > 1:
    return source, BlockReport(index, "ambiguous", "", f"Block {index}: the SEARCH text occurs "
                               f"{count} times; add surrounding lines so that it matches one "
                               "place.")
  source_lines = source.splitlines()
  search_lines = block.search.splitlines()
  while search_lines and not search_lines[0].strip():
    search_lines.pop(0)
  while search_lines and not search_lines[-1].strip():
    search_lines.pop()
  replace_lines = block.replace.splitlines()
  for match, normalize in (("whitespace", str.rstrip), ("indentation", _collapse)):
    starts = _find(source_lines, search_lines, normalize)
    if len(starts) > 1:
      where = ", ".join(str(start + 1) for start in starts)
      return source, BlockReport(index, "ambiguous", "", f"Block {index}: the SEARCH lines "
                                 f"match {len(starts)} places (lines {where}) when "
                                 f"{match} is ignored; add surrounding lines so that it "
                                 "matches one place.")
    if starts:
      start, end = starts[0], starts[0] + len(search_lines)
      new_lines = replace_lines
      if match == "indentation":
        new_lines = _reindent(replace_lines, search_lines, source_lines[start:end])
      lines = source_lines[:start] + new_lines + source_lines[end:]
      trailing = "\n" if source.endswith("\n") else ""
      return "\n".join(lines) + trailing, BlockReport(
          index, "applied", match, f"Block {index}: applied (matched lines {start + 1}-{end} "
          f"ignoring {match}).")
  return source, BlockReport(index, "not_found", "", f"Block {index}: the SEARCH text matches "
                             "nothing in the current program, even ignoring whitespace and "
                             "indentation; copy the lines exactly from the current program.")


def apply_blocks(source, blocks):
  """Applies blocks in order; returns (new source, [BlockReport])."""
  reports = []
  for index, block in enumerate(blocks, 1):
    source, report = _apply_block(source, block, index)
    reports.append(report)
  return source, reports


def apply_proposal(source, text):
  """Applies a proposal (blocks, else a whole program) to source; see the module docstring."""
  try:
    blocks = parse_blocks(text)
  except PatchFormatError as error:
    return PatchResult(source, "malformed", False, message=str(error))
  if blocks:
    new_source, reports = apply_blocks(source, blocks)
    changed = new_source != source
    lines = [report.detail for report in reports]
    if not changed:
      lines.append("The patch changed nothing, so it was refused.")
    return PatchResult(new_source if changed else source, "blocks", changed, tuple(reports),
                       "\n".join(lines))
  program = extract_program(text)
  if program is None:
    return PatchResult(source, "none", False, message=(
        "The proposal has no SEARCH/REPLACE blocks and no fenced ```python program that "
        "defines run(task, llm, tools)."))
  if program.strip() == source.strip():
    return PatchResult(source, "program", False, message=(
        "The proposed program is the current program; it was refused."))
  return PatchResult(program, "program", True, message="Replaced the whole program.")
