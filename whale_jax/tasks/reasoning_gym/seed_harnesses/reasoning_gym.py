"""Reasoning Gym seed harness (Harness Learning's seed): one direct model call.

The question goes to the model as it is, with a request for the bare final answer; the reply,
less any thinking block, is the answer the dataset's own scorer reads.
"""
import re

PROMPT_TEMPLATE = "{question}\n\nGive only the final answer, with no explanation."
THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)


def run(task, llm, tools):
  reply = llm.chat([{"role": "user", "content": PROMPT_TEMPLATE.format(question=task["question"])}])
  return THINKING.sub("", reply).strip()
