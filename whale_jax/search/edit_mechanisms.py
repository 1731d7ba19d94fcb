"""The offline edit library's mechanism names, importable without the harness runtime.

algorithms/sections.SearchSection refuses an unknown name in config.search.mechanisms before
anything heavy is imported; the domains' edit catalogues (tasks/<family>/edits.py) define the
mechanisms (tests/search/test_edit_library.py keeps the two equal).
"""

NAMES = (
    "turn_budget", "retrieval_topk", "passage_length", "query_rewrite", "retrieve_first",
    "format_reminder", "user_prompt", "verify_then_retry", "interpreter_feedback", "nudge",
    "voting", "board_presentation", "format_retry_budget", "illegal_move_retry_budget",
    "calls_per_turn", "result_length", "think_then_answer",
)


def check(mechanisms, key_path="config.search.mechanisms"):
  """ValueError naming key_path unless mechanisms is a non-empty list of known names."""
  if isinstance(mechanisms, str) or not mechanisms:
    raise ValueError(f"{key_path}={mechanisms!r} must be a non-empty list of mechanism names, "
                     f"e.g. ('passage_length', 'turn_budget'); known: {', '.join(NAMES)}.")
  for name in mechanisms:
    if name not in NAMES:
      raise ValueError(f"{key_path} names {name!r}, which is not an edit-library mechanism; "
                       f"use some of: {', '.join(NAMES)}.")
