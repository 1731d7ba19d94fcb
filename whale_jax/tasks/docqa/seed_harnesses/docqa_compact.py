"""Compact document QA seed harness for tiny models: the docqa loop in few tokens.

No tool schemas in the prompt: the model writes <search>query</search> or
<open>document page=n</open> / <open>document table=k</open> (or <open>document</open> for
the outline), each result comes back cut to MAX_RESULT_CHARS characters, and after at most
MAX_TURNS model calls the last reply is returned; the verifier reads its <FINAL_ANSWER>.
"""
import re

SYSTEM_PROMPT = ("Tools: <search>words</search>, <open>document page=1</open>, "
                 "<open>document table=1</open>. Answer with <FINAL_ANSWER>x</FINAL_ANSWER>.")
MAX_TURNS = 3
MAX_RESULT_CHARS = 300
CALL = re.compile(r"<(search|open)>(.*?)</\1>", re.DOTALL)
OPEN = re.compile(r"^\s*(\S+)(?:\s+(page|table)\s*=\s*(\d+))?\s*$")


def call_tool(tools, name, text):
  try:
    if name == "search":
      return tools.search(text.strip(), topk=2)
    match = OPEN.match(text)
    if not match:
      return "Write <open>document page=1</open>."
    document, kind, number = match.groups()
    if kind == "page":
      return tools.open_document(document, page=int(number))
    if kind == "table":
      return tools.open_document(document, table=int(number))
    return tools.open_document(document)
  except Exception as error:  # pylint: disable=broad-except
    return f"Error: {error}"


def run(task, llm, tools):
  messages = [{"role": "system", "content": SYSTEM_PROMPT},
              {"role": "user", "content": task["question"]}]
  reply = ""
  for _ in range(MAX_TURNS):
    reply = llm.chat(messages)
    messages.append({"role": "assistant", "content": reply})
    calls = CALL.findall(reply)
    if not calls or "<final_answer>" in reply.lower():
      break
    name, text = calls[0]
    messages.append({"role": "user",
                     "content": str(call_tool(tools, name, text))[:MAX_RESULT_CHARS]})
  return reply
