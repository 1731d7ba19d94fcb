"""Compact SearchQA seed harness for tiny models: the WHALE h0 loop with terse text.

The same mechanics as searchqa.py (search once, then answer; two turns at most; top-1
passage) in fewer tokens: the model searches by writing <search> query</search> (no tool
schema in the prompt) and the passages come back as a tool message. Passages start short
(12 words), so facts late in a passage stay hidden until a harness shows more of it.
The last reply is returned: the verifier reads its last <answer> tag.
"""
import re

SYSTEM_PROMPT = "Search with <search> name</search>. Answer with <answer> answer</answer>."
USER_PROMPT_TEMPLATE = "Question: {question}"
MAX_TURNS = 2
TOPK = 1
MAX_DOC_TOKENS = 12
SEARCH_CALL = re.compile(r"<search>(.*?)</search>", re.DOTALL)


def parse_tool_calls(text):
  """[("search", {"query_list": [query]})] for each <search> tag in a reply."""
  return [("search", {"query_list": [query.strip()]}) for query in SEARCH_CALL.findall(text)]


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
    return "The search needs a query: <search> name</search>."
  return tools.search(query, topk=TOPK, max_doc_tokens=MAX_DOC_TOKENS)


def run(task, llm, tools):
  messages = [{"role": "system", "content": SYSTEM_PROMPT},
              {"role": "user", "content": USER_PROMPT_TEMPLATE.format(question=task["question"])}]
  reply = ""
  for turn in range(MAX_TURNS):
    reply = llm.chat(messages)
    messages.append({"role": "assistant", "content": reply})
    calls = [arguments for name, arguments in parse_tool_calls(reply) if name == "search"][:1]
    if not calls or turn == MAX_TURNS - 1:
      break
    responses = [search(tools, arguments) for arguments in calls]
    messages.append({"role": "tool", "content": "\n".join(responses)})
  return reply
