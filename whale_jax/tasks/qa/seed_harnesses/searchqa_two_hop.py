"""Multi-hop QA seed harness (Harness Learning's QA seed): a fixed two-hop program.

  search(question) -> the model summarizes the passages and writes the next query
  -> search(next query) -> the model summarizes the new passages
  -> the model answers from the two summaries only.

Always two searches (top-3 passages of at most 200 words each) and three model calls; no
tool-call parsing. The next query is the last "NEXT QUERY:" line of the first reply (the
question itself when there is none), and that line is left out of the first summary. The
final reply is returned as it is when it holds an <answer> tag (the verifier reads the last
one), else wrapped in one.
"""
import re

TOPK = 3
MAX_DOC_TOKENS = 200
FIRST_PROMPT = """Question: {question}

Passages found by searching for the question:
{passages}

Summarize what these passages say that helps answer the question. Then, on a last line,
write the search query that would find the information still missing, as
NEXT QUERY: <query>"""
SECOND_PROMPT = """Question: {question}

What a first search found:
{summary}

Passages found by searching for "{query}":
{passages}

Summarize what these passages add towards answering the question."""
ANSWER_PROMPT = """Question: {question}

Summary of a first search:
{first_summary}

Summary of a second search:
{second_summary}

Answer the question from these two summaries. Put only the answer, one short entity or
value, inside <answer>...</answer>."""
THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)
NEXT_QUERY = re.compile(r"^\s*NEXT QUERY:\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)


def ask(llm, prompt):
  reply = llm.chat([{"role": "user", "content": prompt}])
  return THINKING.sub("", reply).strip()


def split_next_query(reply, question):
  """(summary without the NEXT QUERY lines, the last next query or the question)."""
  queries = [query.strip("\"' ") for query in NEXT_QUERY.findall(reply)]
  queries = [query for query in queries if query]
  summary = NEXT_QUERY.sub("", reply).strip()
  return summary, queries[-1] if queries else question


def run(task, llm, tools):
  question = task["question"]
  passages = tools.search(question, topk=TOPK, max_doc_tokens=MAX_DOC_TOKENS)
  first_reply = ask(llm, FIRST_PROMPT.format(question=question, passages=passages))
  first_summary, query = split_next_query(first_reply, question)
  passages = tools.search(query, topk=TOPK, max_doc_tokens=MAX_DOC_TOKENS)
  second_summary = ask(llm, SECOND_PROMPT.format(question=question, summary=first_summary,
                                                 query=query, passages=passages))
  reply = ask(llm, ANSWER_PROMPT.format(question=question, first_summary=first_summary,
                                        second_summary=second_summary))
  return reply if "<answer>" in reply else f"<answer>{reply}</answer>"
