"""Compact tool-workflow seed harness for tiny models: the toolflow loop in few tokens.

No JSON schemas in the prompt, only the tool names: the model writes
<call>tool_name {"argument": "value"}</call> (one call per reply), the app's JSON answer comes
back cut to MAX_RESULT_CHARS characters, and the loop ends at a reply without a call or after
MAX_TURNS model calls; that reply is returned (the apps' end state is what is scored).
"""
import json
import re

SYSTEM_PROMPT = "Do the request with <call>tool {json arguments}</call>. Tools: {names}."
MAX_TURNS = 4
MAX_RESULT_CHARS = 300
CALL = re.compile(r"<call>\s*([\w-]+)\s*(.*?)</call>", re.DOTALL)


def run(task, llm, tools):
  names = ", ".join(tool["function"]["name"] for tool in task["tools"])
  messages = [{"role": "system", "content": SYSTEM_PROMPT.replace("{names}", names)},
              {"role": "user", "content": task["trigger"]}]
  reply = ""
  for _ in range(MAX_TURNS):
    reply = llm.chat(messages)
    messages.append({"role": "assistant", "content": reply})
    match = CALL.search(reply)
    if not match:
      break
    try:
      arguments = json.loads(match.group(2)) if match.group(2).strip() else {}
    except ValueError:
      arguments = None
    if isinstance(arguments, dict):
      result = json.dumps(tools.call(match.group(1), arguments))
    else:
      result = "The arguments must be one JSON object."
    messages.append({"role": "user", "content": result[:MAX_RESULT_CHARS]})
  return reply
