"""A scripted teacher for synthetic QA under the compact seed harness: the replies an expert
model would give, for warm-starting a tiny solver by supervised fine-tuning.

  replies = teacher_replies(questions, corpus)      # prompt text -> reply
  backend = harness.ScriptedBackend(tokenizer, replies=replies)
  harness = Harness(teacher_harness_source())       # enough turns and passage to finish

For a question with hops h, the teacher searches the title of each supporting passage in turn
(`<search> Title</search>`) and then answers (`<answer> value</answer>`); it reads the
question from the prompt and counts the tool messages already there. Names follow a space so
that they tokenize the same way in passages, queries and answers.
"""
import re

from whale_jax.tasks import seed_harnesses

QUESTION = re.compile(r"Question: (.*?)<\|im_end\|>")
TOOL_TURN = "<|im_start|>tool"


def teacher_harness_source(max_turns=3, max_doc_tokens=64):
  """The compact seed harness with enough turns and passage for every question."""
  source = seed_harnesses.source("searchqa_compact")
  source = source.replace("MAX_TURNS = 2", f"MAX_TURNS = {max_turns}")
  return source.replace("MAX_DOC_TOKENS = 12", f"MAX_DOC_TOKENS = {max_doc_tokens}")


def teacher_replies(questions, corpus):
  """prompt_text -> the teacher's next reply (see the module docstring)."""
  by_question = {question["question"]: question for question in questions}
  titles = {passage["id"]: passage["title"] for passage in corpus}

  def reply(prompt_text):
    match = QUESTION.search(prompt_text)
    if match is None or match.group(1) not in by_question:
      raise ValueError("The teacher found no known question in the prompt; it serves the "
                       "compact seed harness of the world it was built for.")
    question = by_question[match.group(1)]
    searched = prompt_text.count(TOOL_TURN)
    if searched < question["hops"]:
      return f"<search> {titles[question['supporting_ids'][searched]]}</search>"
    return f"<answer> {question['golden_answers'][0]}</answer>"
  return reply
