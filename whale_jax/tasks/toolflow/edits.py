"""The toolflow edit catalogue of the offline edit library (search/edit_library.py).

CATALOGUE: (mechanism name, make) pairs, make(source, tree) -> [(blocks, hypothesis,
prompt_only_safe)] (whale_jax/harness/source_edits.py). Mechanisms: turn_budget, calls_per_turn,
result_length, format_reminder.
"""
from whale_jax.harness import source_edits

_TOOLFLOW_REMINDERS = (
    "Before changing a record, look it up and use its exact id; several records may have "
    "nearly the same name.",
    "Read the policy messages in the inbox first and follow the newest one.")

CATALOGUE = (
    ("turn_budget", source_edits.integer_edit(
        "With MAX_TURNS={old} the workflow stops before every step is done; {new} turns "
        "give the model {direction} rounds of tool calls.", "MAX_TURNS",
        (2, 8, 16, 32), limit=48)),
    ("calls_per_turn", source_edits.integer_edit(
        "Only MAX_CALLS_PER_TURN={old} tool calls of a reply run; {new} lets {direction} "
        "of a reply's calls through.", "MAX_CALLS_PER_TURN", (1, 4, 16), limit=32)),
    ("result_length", source_edits.integer_edit(
        "App answers cut to MAX_RESULT_CHARS={old} characters may lose the record or "
        "policy the next step needs; {new} characters show {direction} of each answer.",
        "MAX_RESULT_CHARS", (150, 600, 2000, 8000))),
    ("format_reminder", source_edits.append_to_prompt(
        "SYSTEM_PROMPT", _TOOLFLOW_REMINDERS,
        "Many lost assertions come from acting on a near-duplicate record or a stale "
        "policy.")),
)
