"""The chess edit catalogue of the offline edit library (search/edit_library.py).

CATALOGUE: (mechanism name, make) pairs, make(source, tree) -> [(blocks, hypothesis,
prompt_only_safe)] (whale_jax/harness/source_edits.py). Mechanisms: board_presentation,
format_retry_budget, illegal_move_retry_budget, format_reminder.
"""
import ast

from whale_jax.harness import source_edits


def _chess_board_presentation(source, tree):
  function = source_edits.function(tree, "format_observation")
  if function is None:
    return []
  options = []
  legal = source_edits.statement(function, lambda n: source_edits.is_assign_to(n, "legal"))
  if legal is not None and "san" in ast.unparse(legal.value):
    indent = source_edits.indent_of(source, legal)
    code = "legal = \", \".join(move[\"uci\"] for move in observation[\"legal_moves\"])"
    options.append((source_edits.block(source_edits.statement_lines(source, legal),
                                       source_edits.indented(code, indent)),
        "The legal-move list takes most of the prompt; one comma-separated line of UCI moves "
        "is shorter and is exactly the notation the reply must use.", False))
  lines = source.splitlines(keepends=True)
  for marker, why in (("observation['board']", "The ASCII board repeats what the FEN says "
                       "and lengthens the prompt; dropping it leaves the model the FEN and "
                       "the legal moves."),
                      ("observation['fen']", "The FEN string is hard for a small model to "
                       "read; dropping it leaves the ASCII board and the legal moves.")):
    found = [i for i in range(function.lineno - 1, function.end_lineno)
             if marker in lines[i] and lines[i].strip().startswith("f\"")]
    if len(found) == 1:
      options.append((source_edits.block(lines[found[0]], ""), why, False))
  return options


_CHESS_REMINDERS = (
    "Copy your move exactly from the legal moves list, in UCI notation.",
    "Look for checks, captures and threats first; a puzzle's first move is usually forcing.")

CATALOGUE = (
    ("board_presentation", _chess_board_presentation),
    ("format_retry_budget", source_edits.integer_edit(
        "A reply without a readable move ends the puzzle after {old} retries; {new} "
        "retries give {direction} chances to recover from a formatting slip.",
        "FORMAT_RETRY_BUDGET", (0, 2, 3), limit=10)),
    ("illegal_move_retry_budget", source_edits.integer_edit(
        "An illegal move ends the puzzle after {old} retries; {new} retries give "
        "{direction} chances to pick a legal move.", "ILLEGAL_MOVE_RETRY_BUDGET",
        (0, 2, 3), limit=10)),
    ("format_reminder", source_edits.append_to_prompt(
        "SYSTEM_PROMPT", _CHESS_REMINDERS,
        "Many failures are unreadable or illegal moves.")),
)
