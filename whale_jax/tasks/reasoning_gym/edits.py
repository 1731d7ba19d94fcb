"""The reasoning-gym edit catalogue of the offline edit library (search/edit_library.py).

CATALOGUE: (mechanism name, make) pairs, make(source, tree) -> [(blocks, hypothesis,
prompt_only_safe)] (whale_jax/harness/source_edits.py). Mechanisms: format_reminder,
think_then_answer, voting.
"""
import ast

from whale_jax.harness import source_edits


def _reasoning_gym_voting(source, tree):
  run = source_edits.function(tree, "run")
  if run is None or len(run.body) < 2:
    return []
  call, final = run.body[-2], run.body[-1]
  if not (source_edits.is_assign_to(call, "reply") and
          source_edits.calls(call.value, "llm.chat") and
          isinstance(final, ast.Return) and final.value is not None):
    return []
  if any(keyword.arg == "n" for keyword in call.value.keywords):
    return []
  indent = source_edits.indent_of(source, call)
  answer = ast.get_source_segment(source, final.value)
  original = (source_edits.statement_lines(source, call) +
              source_edits.statement_lines(source, final))
  options = []
  call_text = ast.get_source_segment(source, call.value)
  for votes in (3, 5):
    code = (f"replies = {call_text[:-1]}, n={votes})\n"
            f"answers = [{answer} for reply in replies]\n"
            "return max(answers, key=answers.count)")
    options.append((source_edits.block(original, source_edits.indented(code, indent)),
                    f"One sample's answer is noisy; returning the most common of {votes} "
                    "sampled answers (self-consistency) corrects occasional slips.", False))
  return options


_REASONING_GYM_TEMPLATES = (
    "{question}\n\nThink it through step by step inside <think>...</think>, then write only "
    "the final answer after </think>.",)
_REASONING_GYM_REMINDERS = (
    "Answer in exactly the format the question asks for.",
    "Double-check the answer against every condition in the question before you reply.")

CATALOGUE = (
    ("format_reminder", source_edits.append_to_prompt(
        "PROMPT_TEMPLATE", _REASONING_GYM_REMINDERS,
        "Answers in the wrong format get no or partial credit.")),
    ("think_then_answer", source_edits.replace_prompt(
        "PROMPT_TEMPLATE", _REASONING_GYM_TEMPLATES,
        "Asked for the bare answer, the model answers without working it out; letting it "
        "think first (the thinking is stripped from the answer) makes fewer errors.")),
    ("voting", _reasoning_gym_voting),
)
