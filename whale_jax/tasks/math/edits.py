"""The math edit catalogue of the offline edit library (search/edit_library.py).

CATALOGUE: (mechanism name, make) pairs, make(source, tree) -> [(blocks, hypothesis,
prompt_only_safe)] (whale_jax/harness/source_edits.py). Mechanisms: turn_budget,
format_reminder, interpreter_feedback, nudge, voting, verify_then_retry.
"""
import ast

from whale_jax.harness import source_edits


def _math_interpreter_feedback(source, tree):
  run = source_edits.function(tree, "run")
  node = source_edits.statement(run, lambda n: isinstance(n, ast.Expr) and "<tool_response>" in
                                ast.unparse(n) and "append" in ast.unparse(n))
  if node is None or "output" not in ast.unparse(node):
    return []
  indent = source_edits.indent_of(source, node)
  empty = ("if not output.strip() or \"no output\" in output:\n"
           "  output += \"\\nNothing was printed: end the code with print(...) of the value "
           "you need.\"\n")
  error = ("if \"Traceback\" in output or \"Error\" in output:\n"
           "  output += \"\\nThe code failed: read the error, fix the code and run it "
           "again.\"\n")
  reminder = ("messages.append({\"role\": \"user\", \"content\": f\"<tool_response>{output}"
              "</tool_response>\\nIf this output settles the question, give the final answer "
              "in \\\\boxed{{}}.\"})")
  original = source_edits.statement_lines(source, node)
  return [
      (source_edits.block(original, source_edits.indented(empty.rstrip("\n"), indent) + original),
       "Code that computes a value but prints nothing returns no output; telling the model "
       "to print what it needs lets the next turn use the result.", False),
      (source_edits.block(original, source_edits.indented(error.rstrip("\n"), indent) + original),
       "Failing code returns a traceback the model tends to ignore; an explicit note to fix "
       "and rerun it turns errors into corrected computations.", False),
      (source_edits.block(original, source_edits.indented(reminder, indent)),
       "After seeing the interpreter's output the model keeps computing instead of "
       "answering; reminding it to box the answer when the output settles it ends the "
       "episode with a scored answer.", False)]


def _math_voting(source, tree):
  run = source_edits.function(tree, "run")
  node = source_edits.final_return(run, "reply")
  if node is None or "import re" not in source or "votes" in ast.unparse(run):
    return []
  indent = source_edits.indent_of(source, node)
  options = []
  for votes in (3, 5):
    code = ("votes = llm.chat(messages + [{\"role\": \"user\",\n"
            "                              \"content\": \"State only the final answer in "
            f"\\\\boxed{{}}.\"}}],\n                 n={votes})\n"
            "answers = [found[-1] for found in (re.findall(r\"\\\\boxed\\{([^{}]*)\\}\", text)\n"
            "                                   for text in votes + [reply]) if found]\n"
            "if not answers:\n"
            "  return reply\n"
            "return reply + \"\\n\\\\boxed{\" + max(answers, key=answers.count) + \"}\"")
    options.append((source_edits.block(source_edits.statement_lines(source, node),
                                       source_edits.indented(code, indent)),
                    f"A single sample's final answer is noisy; taking the most common boxed "
                    f"answer over {votes} extra samples and the last reply (self-consistency) "
                    "corrects occasional slips.", False))
  return options


_MATH_REMINDERS = (
    "Write the final answer as a single number or expression inside \\boxed{{}} at the very "
    "end of your reply.",
    "Check your result with the code interpreter before you answer.")
_MATH_NUDGES = (
    "Run Python code with the code_interpreter tool to compute or check the answer, then put "
    "the final answer in \\boxed{}.",
    "Give the final answer now in \\boxed{}.")

CATALOGUE = (
    ("turn_budget", source_edits.integer_edit(
        "With MAX_TURNS={old} the model cannot run code and then answer from its output; "
        "{new} turns give it {direction} rounds with the interpreter.", "MAX_TURNS",
        (3, 4, 6, 8), limit=16)),
    ("format_reminder", source_edits.append_to_prompt(
        "USER_PROMPT_TEMPLATE", _MATH_REMINDERS,
        "Replies without a final \\boxed{} answer score 0.")),
    ("interpreter_feedback", _math_interpreter_feedback),
    ("nudge", source_edits.replace_prompt(
        "NUDGE", _MATH_NUDGES,
        "Replies with neither code nor an answer get a nudge; a sharper one gets an answer "
        "sooner.")),
    ("voting", _math_voting),
    ("verify_then_retry", source_edits.verify_then_retry(
        "\\boxed{", "Give the final answer now in \\boxed{}.")),
)
