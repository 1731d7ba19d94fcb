"""SearchQA and synthetic QA: the offline edit library's catalogue (search/edit_library.py).

CATALOGUE: (mechanism name, make) pairs, make(source, tree) -> [(blocks, hypothesis,
prompt_only_safe)] (whale_jax/harness/source_edits.py). Mechanisms: turn_budget, retrieval_topk,
passage_length, query_rewrite, retrieve_first, format_reminder, user_prompt, verify_then_retry.
"""
import ast

from whale_jax.harness import source_edits


def _qa_query_rewrite(source, tree):
  run = source_edits.function(tree, "run")
  node = source_edits.statement(
      run, lambda n: source_edits.is_assign_to(n, "responses") and "search(tools" in
      ast.unparse(n.value) and "task" not in ast.unparse(n.value))
  if node is None or not source_edits.defines(tree, "search", "first_query"):
    return []
  indent = source_edits.indent_of(source, node)
  question = ("responses = [search(tools, {\"query_list\": [task[\"question\"]]})\n"
              "             for arguments in calls]")
  appended = ("responses = [search(tools, {\"query_list\": [\n"
              "    ((first_query(arguments) or \"\") + \" \" + task[\"question\"]).strip()]})\n"
              "             for arguments in calls]")
  original = source_edits.statement_lines(source, node)
  return [
      (source_edits.block(original, source_edits.indented(question, indent)),
       "The model's search queries often miss the passage it needs; searching with the "
       "question itself retrieves the passage about the entity the question names.", False),
      (source_edits.block(original, source_edits.indented(appended, indent)),
       "Short model queries lose the question's entity; appending the question to each query "
       "keeps the entity in the search while keeping the model's own terms.", False)]


def _qa_retrieve_first(source, tree):
  run = source_edits.function(tree, "run")
  if run is None or not source_edits.defines(tree, "TOPK", "MAX_DOC_TOKENS"):
    return []
  messages = source_edits.statement(run, lambda n: source_edits.is_assign_to(n, "messages"))
  start = source_edits.statement(run, lambda n: source_edits.is_assign_to(n, "reply") and
                                 isinstance(n.value, ast.Constant))
  if (messages is None or start is None or
      source_edits.statement(run, lambda n: source_edits.is_assign_to(n, "passages"))
      is not None):
    return []
  indent = source_edits.indent_of(source, start)
  code = ("passages = tools.search(task[\"question\"], topk=TOPK, max_doc_tokens=MAX_DOC_TOKENS)"
          "\nmessages[-1][\"content\"] += \"\\nPassages retrieved for the question:\\n\" + "
          "passages\n")
  original = source_edits.statement_lines(source, start)
  return [(source_edits.block(original, source_edits.indented(code, indent) + original),
           "The model often answers without searching or with a poor query; retrieving "
           "passages for the question before the first turn puts the evidence in front of it.",
           False)]


_QA_REMINDERS = (
    "Always end with the final answer inside <answer>...</answer>: only the short entity, "
    "name or number, never a sentence.",
    "Read the retrieved passages carefully and copy the answer from them exactly.")
_QA_USER_REMINDERS = (
    "Search first, then answer with the entity only.",
    "If the question has two steps, search for the first entity, then search again for the "
    "fact about it.")

CATALOGUE = (
    ("turn_budget", source_edits.integer_edit(
        "With MAX_TURNS={old} the model runs out of turns before it can search and then "
        "answer; {new} turns give it {direction} chances to search again.", "MAX_TURNS",
        (1, 3, 4, 6), limit=16)),
    ("retrieval_topk", source_edits.integer_edit(
        "With TOPK={old} the passage holding the answer is often not among those shown; "
        "showing {new} passages per search gives {direction} chances to contain it.",
        "TOPK", (2, 3, 5), limit=10)),
    ("passage_length", source_edits.integer_edit(
        "Passages cut to MAX_DOC_TOKENS={old} words may lose or bury the answer; {new} "
        "words per passage shows {direction} of each.", "MAX_DOC_TOKENS", (60, 100, 400))),
    ("query_rewrite", _qa_query_rewrite),
    ("retrieve_first", _qa_retrieve_first),
    ("format_reminder", source_edits.append_to_prompt(
        "SYSTEM_PROMPT", _QA_REMINDERS,
        "Answers are scored by exact match, and replies without a short answer tag score "
        "0.")),
    ("user_prompt", source_edits.append_to_prompt(
        "USER_PROMPT_TEMPLATE", _QA_USER_REMINDERS,
        "The model often answers from memory without searching.")),
    ("verify_then_retry", source_edits.verify_then_retry(
        "<answer>", "Give your final answer now, only inside <answer>...</answer>.")),
)
