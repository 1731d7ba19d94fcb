"""SearchQA seed harness (WHALE's h0): search once if needed, then answer; two turns at most.

The model sees a one-line system prompt, the question with an instruction to put the answer
in <answer>...</answer>, and a `search` tool. A tool call may be written in Qwen's XML format,
<tool_call><function=search><parameter=query_list>["q"]</parameter></function></tool_call>,
or as JSON inside <tool_call>. Each search keeps only its first query and asks for the top-1
passage cut to 200 tokens; the result goes back as <tool_response>{"result": ...}
</tool_response>. The last reply is returned: the verifier reads its last <answer> tag.
"""
import json
import re

SYSTEM_PROMPT = "Answer factual questions using search when needed."
USER_PROMPT_TEMPLATE = ("Question: {question}\nUse the search tool if needed. Put the final "
                        "answer only inside <answer>...</answer>.")
MAX_TURNS = 2
TOPK = 1
MAX_DOC_TOKENS = 200
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the passage corpus and return the most relevant passages.",
        "parameters": {
            "type": "object",
            "properties": {"query_list": {"type": "array", "items": {"type": "string"},
                                          "maxItems": 1, "description": "One search query."}},
            "required": ["query_list"],
        },
    },
}
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


def first_query(arguments):
  """The first non-empty query of a search call; extra queries are dropped."""
  queries = arguments.get("query_list", arguments.get("query"))
  if isinstance(queries, str):
    queries = [queries]
  if not isinstance(queries, list):
    return None
  queries = [query for query in queries if isinstance(query, str) and query.strip()]
  return queries[0] if queries else None


def search(tools, arguments):
  query = first_query(arguments)
  if query is None:
    result = "The search call needs query_list: a list with one query string."
  else:
    result = tools.search(query, topk=TOPK, max_doc_tokens=MAX_DOC_TOKENS)
  return json.dumps({"result": result})


def run(task, llm, tools):
  messages = [{"role": "system", "content": SYSTEM_PROMPT},
              {"role": "user", "content": USER_PROMPT_TEMPLATE.format(question=task["question"])}]
  reply = ""
  for turn in range(MAX_TURNS):
    reply = llm.chat(messages, tools=[SEARCH_TOOL])
    messages.append({"role": "assistant", "content": reply})
    calls = [arguments for name, arguments in parse_tool_calls(reply) if name == "search"]
    if not calls or turn == MAX_TURNS - 1:
      break
    responses = [search(tools, arguments) for arguments in calls]
    messages.append({"role": "user", "content": "\n".join(
        f"<tool_response>{response}</tool_response>" for response in responses)})
  return reply
