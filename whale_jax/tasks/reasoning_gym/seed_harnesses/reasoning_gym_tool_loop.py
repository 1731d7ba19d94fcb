"""Reasoning Gym fixed tool loop (Harness Learning's hand-written baseline): emit code, run it.

The model is asked for a Python program that prints only the final answer; the program runs
in the sandboxed interpreter (tools.python). A traceback goes back to the model, which writes
the program again; at most MAX_ROUNDS interaction rounds. The last line the program printed is
the answer; a reply without a program is taken as the answer itself.
"""
import re

MAX_ROUNDS = 5
CODE_PROMPT = ("{question}\n\nWrite a Python program that prints only the final answer, in "
               "one ```python block.")
RETRY_PROMPT = "Running it failed:\n{output}\nFix the program."
FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)
THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)
TRACEBACK = "Traceback (most recent call last)"


def run(task, llm, tools):
  messages = [{"role": "user", "content": CODE_PROMPT.format(question=task["question"])}]
  output = ""
  for _ in range(MAX_ROUNDS):
    reply = THINKING.sub("", llm.chat(messages)).strip()
    fence = FENCE.search(reply)
    if fence is None:
      return reply
    output = tools.python(fence.group(1))
    if TRACEBACK not in output and output.strip():
      return output.strip().splitlines()[-1]
    messages += [{"role": "assistant", "content": reply},
                 {"role": "user", "content": RETRY_PROMPT.format(output=output or "(nothing)")}]
  lines = output.strip().splitlines()
  return lines[-1] if lines else ""
