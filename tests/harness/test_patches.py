"""SEARCH/REPLACE blocks and whole programs: exact, whitespace-shifted, indentation-shifted,
ambiguous, missing, malformed and no-change proposals."""
from whale_jax.harness import patches

SOURCE = '''import re

SYSTEM = "Answer briefly."

def run(task, llm, tools):
    reply = llm.chat([{"role": "user", "content": task["question"]}])
    if reply:
        return reply
    return ""
'''


def block(search, replace):
  return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


def test_exact_block_applies():
  proposal = "Shorter prompt.\n```python\n" + block('SYSTEM = "Answer briefly."\n',
                                                     'SYSTEM = "Answer."\n') + "```\n"
  result = patches.apply_proposal(SOURCE, proposal)
  assert result.ok and result.kind == "blocks"
  assert result.source == SOURCE.replace("Answer briefly.", "Answer.")
  assert [(r.status, r.match) for r in result.reports] == [("applied", "exact")]


def test_trailing_whitespace_differences_are_tolerated():
  search = '    if reply:   \n        return reply\t\n'
  result = patches.apply_proposal(SOURCE, block(search, "    if reply.strip():\n        return reply\n"))
  assert result.ok
  assert [r.match for r in result.reports] == ["whitespace"]
  assert "    if reply.strip():\n        return reply\n    return \"\"\n" in result.source


def test_indentation_shift_is_tolerated_and_replacement_reindented():
  search = "if reply:\n    return reply\n"          # written at column 0
  replace = "if reply:\n    return reply.strip()\n"
  result = patches.apply_proposal(SOURCE, block(search, replace))
  assert [r.match for r in result.reports] == ["indentation"]
  expected = SOURCE.replace("        return reply\n", "        return reply.strip()\n")
  assert result.source == expected


def test_ambiguous_block_changes_nothing_and_says_where():
  source = "def run(task, llm, tools):\n    x = 1\n    x = 1\n    return str(x)\n"
  result = patches.apply_proposal(source, block("    x = 1\n", "    x = 2\n"))
  assert not result.ok and not result.changed
  assert result.source == source
  assert [r.status for r in result.reports] == ["ambiguous"]
  assert "occurs 2 times" in result.message


def test_ambiguous_after_normalization_lists_the_lines():
  source = "def run(task, llm, tools):\n  if a:\n    x = 1\n  if b:\n        x = 1\n  return ''\n"
  result = patches.apply_proposal(source, block("x  =  1\n", "x = 2\n"))
  assert [r.status for r in result.reports] == ["ambiguous"]
  assert "(lines 3, 5)" in result.message


def test_missing_block_is_reported_and_the_others_still_apply():
  proposal = (block("this line does not exist\n", "anything\n") +
              block('SYSTEM = "Answer briefly."\n', 'SYSTEM = "Be terse."\n'))
  result = patches.apply_proposal(SOURCE, proposal)
  assert [r.status for r in result.reports] == ["not_found", "applied"]
  assert result.changed and not result.ok
  assert 'SYSTEM = "Be terse."' in result.source
  assert "Block 1: the SEARCH text matches nothing" in result.message


def test_blocks_apply_in_sequence():
  proposal = block("import re\n", "import re\nimport json\n") + block("import json\n", "import math\n")
  result = patches.apply_proposal(SOURCE, proposal)
  assert result.ok
  assert result.source.startswith("import re\nimport math\n\nSYSTEM")


def test_no_change_patch_is_refused():
  result = patches.apply_proposal(SOURCE, block("import re\n", "import re\n"))
  assert not result.ok and not result.changed
  assert result.source == SOURCE
  assert "changed nothing" in result.message


def test_unclosed_block_is_malformed():
  result = patches.apply_proposal(SOURCE, "<<<<<<< SEARCH\nimport re\n=======\nimport json\n")
  assert (result.kind, result.ok) == ("malformed", False)
  assert "no '>>>>>>> REPLACE' line" in result.message


def test_whole_program_in_a_fence_replaces_the_source():
  program = "def run(task, llm, tools):\n    return 'fixed'\n"
  result = patches.apply_proposal(SOURCE, f"Here it is:\n```python\n{program}```\nDone.")
  assert (result.kind, result.ok, result.source) == ("program", True, program)


def test_identical_whole_program_is_refused():
  result = patches.apply_proposal(SOURCE, f"```python\n{SOURCE}```")
  assert (result.kind, result.changed) == ("program", False)
  assert "refused" in result.message


def test_text_without_an_edit_is_reported():
  result = patches.apply_proposal(SOURCE, "I think the prompt is fine as it is.")
  assert (result.kind, result.ok) == ("none", False)


def test_parse_blocks_reads_search_and_replace_verbatim():
  [parsed] = patches.parse_blocks("intro\n" + block("  a\n\n  b\n", "c\n") + "outro")
  assert (parsed.search, parsed.replace) == ("  a\n\n  b\n", "c\n")
