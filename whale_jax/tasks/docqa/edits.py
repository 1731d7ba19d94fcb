"""The document QA edit catalogue of the offline edit library (search/edit_library.py).

CATALOGUE: (mechanism name, make) pairs, make(source, tree) -> [(blocks, hypothesis,
prompt_only_safe)] (whale_jax/harness/source_edits.py). Mechanisms: turn_budget, calls_per_turn,
result_length, format_reminder, user_prompt, verify_then_retry.
"""
from whale_jax.harness import source_edits

_DOCQA_REMINDERS = (
    "Copy figures exactly as the table prints them and put only the value, with the unit or % "
    "the question asks for, inside <FINAL_ANSWER>...</FINAL_ANSWER>.",
    "Open the page or table a search hit names before answering; do not answer from the "
    "search snippet alone.")
_DOCQA_USER_REMINDERS = (
    "Search for the table first, open it, and compute with python when figures must be "
    "combined.",)

CATALOGUE = (
    ("turn_budget", source_edits.integer_edit(
        "With MAX_TURNS={old} the model runs out of turns before it has searched, opened "
        "the table and answered; {new} turns give it {direction} rounds of lookups.",
        "MAX_TURNS", (2, 4, 6, 12), limit=16)),
    ("calls_per_turn", source_edits.integer_edit(
        "Only MAX_CALLS_PER_TURN={old} tool calls of a reply run; {new} lets {direction} "
        "lookups of one reply through.", "MAX_CALLS_PER_TURN", (1, 2, 8), limit=16)),
    ("result_length", source_edits.integer_edit(
        "Tool results cut to MAX_RESULT_CHARS={old} characters may lose the table rows "
        "that hold the figure or bury it in text; {new} characters show {direction} of "
        "each result.", "MAX_RESULT_CHARS", (150, 600, 3000, 12000))),
    ("format_reminder", source_edits.append_to_prompt(
        "SYSTEM_PROMPT", _DOCQA_REMINDERS,
        "Answers are scored against the reference figure, and replies without a "
        "<FINAL_ANSWER> tag score 0.")),
    ("user_prompt", source_edits.append_to_prompt(
        "USER_PROMPT_TEMPLATE", _DOCQA_USER_REMINDERS,
        "The model often answers from a search snippet without opening the table.")),
    ("verify_then_retry", source_edits.verify_then_retry(
        "<FINAL_ANSWER>", "Give your final answer now, only inside "
        "<FINAL_ANSWER>...</FINAL_ANSWER>.")),
)
