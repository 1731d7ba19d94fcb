"""Math seed harness (WHALE's ReTool h0): the question, a boxed-answer instruction and a
Python tool, in at most two turns.

A reply may call `code_interpreter` (Qwen XML or JSON inside <tool_call>); the harness takes
the first ```python block of the code (or the code itself), prints the last line when it is a
bare expression, runs it with tools.python and returns the output in a <tool_response>. A reply
with neither a tool call nor a \\boxed{} answer gets a nudge to use the tool. The last reply is
returned: the verifier reads its last \\boxed{...}.
"""
import json
import re

USER_PROMPT_TEMPLATE = ("{question}\nThe answer format must be: \\boxed{{'The final answer goes "
                        "here.'}}")
NUDGE = ("Use the code_interpreter tool for useful calculations or verification, then provide "
         "the final answer in \\boxed{}.")
MAX_TURNS = 2
CODE_TOOL = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "Run Python code and return what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python code to run."}},
            "required": ["code"],
        },
    },
}
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
FUNCTION = re.compile(r"<function=([\w.-]+)>(.*?)</function>", re.DOTALL)
PARAMETER = re.compile(r"<parameter=([\w.-]+)>\n?(.*?)\n?</parameter>", re.DOTALL)
FENCE = re.compile(r"```(?:python|py)?\n(.*?)```", re.DOTALL)
STATEMENT = re.compile(r"^(import|from|def|class|for|while|if|elif|else|try|except|finally|"
                       r"with|return|raise|assert|pass|del|global|nonlocal|print|@|#)\b")
ASSIGNMENT = re.compile(r"^[\w\[\]\.\s,'\"]+\s*([-+*/%&|^]|//|\*\*|>>|<<)?=(?!=)")


def parse_tool_calls(text):
  """[(name, arguments)] for each tool call in a reply (Qwen XML or JSON in <tool_call>)."""
  calls = []
  for body in TOOL_CALL.findall(text):
    function = FUNCTION.search(body)
    if function:
      calls.append((function.group(1), dict(PARAMETER.findall(function.group(2)))))
      continue
    try:
      call = json.loads(body.strip())
    except ValueError:
      continue
    if isinstance(call, dict) and isinstance(call.get("name"), str):
      arguments = call.get("arguments")
      calls.append((call["name"], arguments if isinstance(arguments, dict) else {}))
  return calls


def prepare_code(code):
  """The first ```python block (or all of it), with a bare last expression printed."""
  fence = FENCE.search(code)
  lines = (fence.group(1) if fence else code).rstrip().split("\n")
  last = lines[-1]
  if last and not last[0].isspace() and not STATEMENT.match(last) and not ASSIGNMENT.match(last):
    lines[-1] = f"print({last})"
  return "\n".join(lines)


def run(task, llm, tools):
  messages = [{"role": "user", "content": USER_PROMPT_TEMPLATE.format(question=task["question"])}]
  reply = ""
  for turn in range(MAX_TURNS):
    reply = llm.chat(messages, tools=[CODE_TOOL])
    messages.append({"role": "assistant", "content": reply})
    if turn == MAX_TURNS - 1:
      break
    calls = [arguments for name, arguments in parse_tool_calls(reply)
             if name == "code_interpreter"]
    if calls:
      output = tools.python(prepare_code(str(calls[0].get("code", ""))))
      messages.append({"role": "user", "content": f"<tool_response>{output}</tool_response>"})
    elif "\\boxed{" in reply:
      break
    else:
      messages.append({"role": "user", "content": NUDGE})
  return reply
