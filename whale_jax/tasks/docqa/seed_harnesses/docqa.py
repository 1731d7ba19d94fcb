"""Document QA seed harness: a tool loop over search, open_document and python.

The model sees a system prompt, the question, and three tool schemas. A reply may call tools in
Qwen's XML format (<tool_call><function=open_document><parameter=document>...</parameter>
</function></tool_call>) or as JSON inside <tool_call>; at most MAX_CALLS_PER_TURN calls of a
reply are run, and their results (or the host's error message) go back as
<tool_response>{"name": ..., "result": ...}</tool_response>. The loop ends at a reply without
tool calls, at a reply holding <FINAL_ANSWER>, or after MAX_TURNS model calls; that reply is
returned, and the verifier reads its last <FINAL_ANSWER> tag.
"""
import json
import re

SYSTEM_PROMPT = ("You answer questions about a corpus of financial bulletins. Search for the "
                 "pages and tables that hold the figures, open them, compute with python when "
                 "needed, and end with the answer inside <FINAL_ANSWER>...</FINAL_ANSWER>.")
USER_PROMPT_TEMPLATE = ("Question: {question}\nGive the answer in the form the question asks, "
                        "inside <FINAL_ANSWER>...</FINAL_ANSWER>.")
MAX_TURNS = 8
MAX_CALLS_PER_TURN = 4
MAX_RESULT_CHARS = 6000


def _function(name, description, properties, required):
  return {"type": "function", "function": {
      "name": name, "description": description,
      "parameters": {"type": "object", "properties": properties, "required": required}}}


TOOLS = [
    _function("search", "BM25 search over document pages; returns '[document page n] text' "
              "lines.", {"query": {"type": "string"}, "topk": {"type": "integer"}}, ["query"]),
    _function("open_document", "Open a document: its outline, a page (1-based) or a table "
              "(1-based).", {"document": {"type": "string"}, "page": {"type": "integer"},
                             "table": {"type": "integer"}}, ["document"]),
    _function("python", "Run Python code and return what it printed.",
              {"code": {"type": "string"}}, ["code"]),
]
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


def call_tool(tools, name, arguments):
  """The tool's result text, or the error the host raised, for the model to read."""
  try:
    if name == "search":
      return tools.search(str(arguments.get("query", "")), topk=int(arguments.get("topk", 5)))
    if name == "open_document":
      return tools.open_document(arguments.get("document"), page=arguments.get("page"),
                                 table=arguments.get("table"))
    if name == "python":
      return tools.python(str(arguments.get("code", "")))
    return f"There is no tool named {name!r}; use search, open_document or python."
  except Exception as error:  # pylint: disable=broad-except
    return f"Error: {error}"


def run(task, llm, tools):
  messages = [{"role": "system", "content": SYSTEM_PROMPT},
              {"role": "user", "content": USER_PROMPT_TEMPLATE.format(question=task["question"])}]
  reply = ""
  for _ in range(MAX_TURNS):
    reply = llm.chat(messages, tools=TOOLS)
    messages.append({"role": "assistant", "content": reply})
    calls = parse_tool_calls(reply)
    if not calls or "<final_answer>" in reply.lower():
      break
    responses = []
    for name, arguments in calls[:MAX_CALLS_PER_TURN]:
      result = str(call_tool(tools, name, arguments))[:MAX_RESULT_CHARS]
      responses.append(json.dumps({"name": name, "result": result}))
    messages.append({"role": "user", "content": "\n".join(
        f"<tool_response>{response}</tool_response>" for response in responses)})
  return reply
