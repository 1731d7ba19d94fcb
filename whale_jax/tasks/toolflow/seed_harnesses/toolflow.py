"""Tool-workflow seed harness: the trigger, the apps' tool schemas, and a tool loop.

The model sees a system prompt (act alone, look things up in the apps, follow the company's
policies), the trigger message, and the task's tool schemas. A reply may call tools in Qwen's
XML format (<tool_call><function=inbox_search><parameter=query>policy</parameter></function>
</tool_call>) or as JSON {"name", "arguments"} inside <tool_call>; up to MAX_CALLS_PER_TURN
calls of a reply go to tools.call(name, arguments), and each JSON answer (errors included, as
the apps return them) goes back as <tool_response>{"name": ..., "result": ...}</tool_response>.
The loop ends at a reply without tool calls or after MAX_TURNS model calls; that reply is
returned (the end state of the apps is what is scored).
"""
import json
import re

SYSTEM_PROMPT = (
    "You are a workflow automation agent for a small company. Carry out the request with the "
    "tools, alone: do not ask clarifying questions. Policies, rosters and reference data the "
    "request mentions are in the apps (search the inbox, list spreadsheets, read channels). "
    "Use the most recent version of any policy or rate, and check names and ids exactly. When "
    "everything is done, reply with a short summary and no tool call.")
MAX_TURNS = 24
MAX_CALLS_PER_TURN = 8
MAX_RESULT_CHARS = 4000
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
FUNCTION = re.compile(r"<function=([\w.-]+)>(.*?)</function>", re.DOTALL)
PARAMETER = re.compile(r"<parameter=([\w.-]+)>(.*?)</parameter>", re.DOTALL)


def parse_tool_calls(text):
  """[(name, arguments)] for each tool call in a reply (Qwen XML or JSON in <tool_call>)."""
  calls = []
  for body in TOOL_CALL.findall(text):
    function = FUNCTION.search(body)
    if function:
      arguments = {}
      for name, value in PARAMETER.findall(function.group(2)):
        try:
          arguments[name] = json.loads(value.strip())
        except ValueError:
          arguments[name] = value.strip()
      calls.append((function.group(1), arguments))
      continue
    try:
      call = json.loads(body.strip())
    except ValueError:
      continue
    if isinstance(call, dict) and isinstance(call.get("name"), str):
      arguments = call.get("arguments")
      calls.append((call["name"], arguments if isinstance(arguments, dict) else {}))
  return calls


def run(task, llm, tools):
  messages = [{"role": "system", "content": SYSTEM_PROMPT},
              {"role": "user", "content": task["trigger"]}]
  reply = ""
  for _ in range(MAX_TURNS):
    reply = llm.chat(messages, tools=task["tools"])
    messages.append({"role": "assistant", "content": reply})
    calls = parse_tool_calls(reply)
    if not calls:
      break
    responses = []
    for name, arguments in calls[:MAX_CALLS_PER_TURN]:
      result = json.dumps(tools.call(name, arguments))[:MAX_RESULT_CHARS]
      responses.append('{"name": %s, "result": %s}' % (json.dumps(name), result))
    messages.append({"role": "user", "content": "\n".join(
        f"<tool_response>{response}</tool_response>" for response in responses)})
  return reply
