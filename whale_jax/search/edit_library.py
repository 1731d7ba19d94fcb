"""The offline proposer: a seeded, deterministic catalogue of parameterized harness edits.

  proposer = EditLibraryProposer(seed=0)
  proposals = proposer.propose(context, n=3)       # SEARCH/REPLACE patches, REPLY_FORMAT replies
  options = edit_options(source, "synthetic_qa")   # every applicable (mechanism, blocks, ...)

Each edit is one mechanism with a few parameter values, written as SEARCH/REPLACE blocks
against the harness it is given. Edits are anchored on what the seed harnesses define — named
constants (MAX_TURNS, TOPK, MAX_DOC_TOKENS, the prompt strings, retry budgets), a few
statements of run() and format_observation() — found by parsing the current source, so they
keep applying after earlier edits changed other parts. An edit whose anchor is absent, that
does not apply cleanly, that changes nothing or whose result fails the static checks is not
proposed. Catalogue per domain family:

  qa (searchqa, synthetic_qa)  turn_budget, retrieval_topk, passage_length, query_rewrite
                               (question as the query, question appended to the query),
                               retrieve_first (search with the question before turn 1),
                               format_reminder (system prompt), user_prompt (search advice),
                               verify_then_retry (ask again when no <answer> was given)
  math                         turn_budget, format_reminder, interpreter_feedback (empty
                               output, error, answer reminder), nudge, voting (majority of
                               boxed answers), verify_then_retry
  chess                        board_presentation (no ASCII board, no FEN, compact legal
                               moves), format_retry_budget, illegal_move_retry_budget,
                               format_reminder
  reasoning_gym                format_reminder, think_then_answer, voting
  docqa                        turn_budget, calls_per_turn, result_length, format_reminder
                               (system prompt), user_prompt (lookup advice),
                               verify_then_retry (ask again when no <FINAL_ANSWER> was given)
  toolflow                     turn_budget, calls_per_turn, result_length, format_reminder
                               (system prompt: exact ids, near-duplicates, newest policy)

Choosing n of them: options whose result is already in the archive (context.known_hashes) are
dropped; in prompt-only mode only prompt-string edits are kept. Mechanisms the last
candidates did not use (context.recent_mechanisms) come first; within that order the
catalogue is shuffled by a generator seeded with seeds.derive_seed(seed, "edit_choice",
*context.call_site, incumbent hash) (call_site: the iteration, and the search's session when
it is named), and one option per mechanism is taken in turn until n are chosen. The same seed
and context give the same proposals; a later search of the run (another session, e.g. WHALE's
next harness phase) that starts from the same harness shuffles afresh, as a new proposer
session would, instead of repeating the earlier one. Replies are in the format a proposer
model is asked to write (whale_jax.search.proposal.REPLY_FORMAT), so they can serve as its
training targets.
"""
import ast
import random
import re

from whale_jax.harness import patches
from whale_jax.harness import program
from whale_jax.harness import static_checks
from whale_jax.search import edit_mechanisms
from whale_jax.search import prompt_only
from whale_jax.search import proposal as proposal_lib
from whale_jax.search import seeds as seeds_lib

PROPOSER_NAME = "edit_library"
FAMILIES = ("qa", "math", "chess", "reasoning_gym", "docqa", "toolflow")
LINE_WIDTH = 96


def domain_family(domain_name):
  """The catalogue a domain uses: one of FAMILIES."""
  if domain_name in ("searchqa", "synthetic_qa"):
    return "qa"
  if domain_name in ("math", "chess", "docqa", "toolflow"):
    return domain_name
  if domain_name.startswith("reasoning_gym"):
    return "reasoning_gym"
  raise ValueError(f"The edit library has no catalogue for domain {domain_name!r}; it knows "
                   "searchqa, synthetic_qa, math, chess, docqa, toolflow and reasoning_gym:<dataset>. "
                   "Use a "
                   "model proposer for other domains.")


# ---- Locating anchors ------------------------------------------------------------------


def _block(search, replace):
  return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


def _lines(source, node):
  """The exact source lines of a statement (with their newlines)."""
  lines = source.splitlines(keepends=True)
  text = "".join(lines[node.lineno - 1:node.end_lineno])
  return text if text.endswith("\n") else text + "\n"


def _constant(tree, name):
  """(node, value) of a module-level `name = <literal>`, or (None, None)."""
  for node in tree.body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and
        isinstance(node.targets[0], ast.Name) and node.targets[0].id == name):
      try:
        return node, ast.literal_eval(node.value)
      except ValueError:
        return None, None
  return None, None


def _function(tree, name):
  for node in tree.body:
    if isinstance(node, ast.FunctionDef) and node.name == name:
      return node
  return None


def _quoted(text):
  """repr(text), in double quotes when the text has none."""
  literal = repr(text)
  if literal.startswith("'") and '"' not in text:
    literal = '"' + literal[1:-1] + '"'
  return literal


def _string_literal(value, indent):
  """A Python literal for value: one line, or adjacent literals in parentheses."""
  literal = _quoted(value)
  if len(literal) + indent <= LINE_WIDTH:
    return literal
  chunks = [""]
  for word in re.split(r"(?<= )", value):
    if chunks[-1] and len(_quoted(chunks[-1] + word)) + indent + 1 > LINE_WIDTH:
      chunks.append("")
    chunks[-1] += word
  inner = ("\n" + " " * (indent + 1)).join(_quoted(chunk) for chunk in chunks)
  return f"({inner})"


def _set_constant(source, tree, name, value):
  """A block setting module-level constant `name` to value, or None when it is absent."""
  node, current = _constant(tree, name)
  if node is None or current == value or type(current) is not type(value):
    return None
  literal = _string_literal(value, len(name) + 3) if isinstance(value, str) else repr(value)
  return _block(_lines(source, node), f"{name} = {literal}\n")


def _statement(function, predicate):
  """The first statement (at any depth) of a function for which predicate(node) holds."""
  if function is None:
    return None
  for node in ast.walk(function):
    if isinstance(node, ast.stmt) and node is not function and predicate(node):
      return node
  return None


def _indent_of(source, node):
  line = source.splitlines()[node.lineno - 1]
  return line[:len(line) - len(line.lstrip())]


def _indented(code, indent):
  code = code.rstrip("\n")
  return "".join(indent + line + "\n" if line else "\n" for line in code.split("\n"))


def _defines(tree, *names):
  defined = {target.id for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets if isinstance(target, ast.Name)}
  defined |= {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
  return all(name in defined for name in names)


def _is_assign_to(node, name):
  return (isinstance(node, ast.Assign) and len(node.targets) == 1 and
          isinstance(node.targets[0], ast.Name) and node.targets[0].id == name)


def _calls(node, dotted):
  """Whether node is a call of e.g. "llm.chat"."""
  owner, attribute = dotted.split(".")
  return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and
          node.func.attr == attribute and isinstance(node.func.value, ast.Name) and
          node.func.value.id == owner)


def _final_return(function, name):
  """The last top-level `return <name>` of a function, or None."""
  if function is None or not function.body:
    return None
  last = function.body[-1]
  if isinstance(last, ast.Return) and isinstance(last.value, ast.Name) and last.value.id == name:
    return last
  return None


# ---- Edits: each returns [(blocks, hypothesis, prompt_only_safe)] ------------------------


def _integer_edit(mechanism_text, name, values, limit=None):
  """Edits setting the constant `name` to one of values (at most limit).

  The hypothesis argues for more (turns, passages, words): the values above the current one
  are offered while there are any, the smaller ones only once none is left above.
  """
  def edit(source, tree):
    node, current = _constant(tree, name)
    if node is None or not isinstance(current, int):
      return []
    allowed = [v for v in values if v != current and (limit is None or v <= limit)]
    larger = [v for v in allowed if v > current]
    options = []
    for value in larger or allowed:
      direction = "more" if value > current else "fewer"
      options.append((_set_constant(source, tree, name, value),
                      mechanism_text.format(old=current, new=value, direction=direction),
                      False))
    return options
  return edit


def _append_to_prompt(name, reminders, why):
  def edit(source, tree):
    node, current = _constant(tree, name)
    if node is None or not isinstance(current, str):
      return []
    options = []
    for reminder in reminders:
      if reminder.strip() in current:
        continue
      separator = "\n" if "\n" in current or name != "SYSTEM_PROMPT" else " "
      options.append((_set_constant(source, tree, name, current + separator + reminder),
                      f"{why} Adding to {name}: {reminder.strip()!r}.", True))
    return options
  return edit


def _replace_prompt(name, values, why):
  def edit(source, tree):
    node, current = _constant(tree, name)
    if node is None or not isinstance(current, str):
      return []
    return [(_set_constant(source, tree, name, value), f"{why} New {name}: {value!r}.",
             True) for value in values if value != current]
  return edit


def _qa_query_rewrite(source, tree):
  run = _function(tree, "run")
  node = _statement(run, lambda n: _is_assign_to(n, "responses") and "search(tools" in
                    ast.unparse(n.value) and "task" not in ast.unparse(n.value))
  if node is None or not _defines(tree, "search", "first_query"):
    return []
  indent = _indent_of(source, node)
  question = ("responses = [search(tools, {\"query_list\": [task[\"question\"]]})\n"
              "             for arguments in calls]")
  appended = ("responses = [search(tools, {\"query_list\": [\n"
              "    ((first_query(arguments) or \"\") + \" \" + task[\"question\"]).strip()]})\n"
              "             for arguments in calls]")
  return [
      (_block(_lines(source, node), _indented(question, indent)),
       "The model's search queries often miss the passage it needs; searching with the "
       "question itself retrieves the passage about the entity the question names.", False),
      (_block(_lines(source, node), _indented(appended, indent)),
       "Short model queries lose the question's entity; appending the question to each query "
       "keeps the entity in the search while keeping the model's own terms.", False)]


def _qa_retrieve_first(source, tree):
  run = _function(tree, "run")
  if run is None or not _defines(tree, "TOPK", "MAX_DOC_TOKENS"):
    return []
  messages = _statement(run, lambda n: _is_assign_to(n, "messages"))
  start = _statement(run, lambda n: _is_assign_to(n, "reply") and
                     isinstance(n.value, ast.Constant))
  if (messages is None or start is None or
      _statement(run, lambda n: _is_assign_to(n, "passages")) is not None):
    return []
  indent = _indent_of(source, start)
  code = ("passages = tools.search(task[\"question\"], topk=TOPK, max_doc_tokens=MAX_DOC_TOKENS)"
          "\nmessages[-1][\"content\"] += \"\\nPassages retrieved for the question:\\n\" + "
          "passages\n")
  return [(_block(_lines(source, start), _indented(code, indent) + _lines(source, start)),
           "The model often answers without searching or with a poor query; retrieving "
           "passages for the question before the first turn puts the evidence in front of it.",
           False)]


def _verify_then_retry(tag, instruction):
  def edit(source, tree):
    run = _function(tree, "run")
    node = _final_return(run, "reply")
    if node is None or _statement(run, lambda n: _is_assign_to(n, "messages")) is None:
      return []
    if f"{tag!r} not in reply" in ast.unparse(run) or f"{_quoted(tag)} not in reply" in source:
      return []
    indent = _indent_of(source, node)
    code = (f"if {_quoted(tag)} not in reply:\n"
            f"  messages.append({{\"role\": \"user\",\n"
            f"                   \"content\": {_quoted(instruction)}}})\n"
            f"  reply = llm.chat(messages)\n"
            f"return reply")
    return [(_block(_lines(source, node), _indented(code, indent)),
             f"Some episodes end without a final {tag} answer; when the last reply has none, "
             "asking once more for the final answer turns them into scored answers.", False)]
  return edit


def _math_interpreter_feedback(source, tree):
  run = _function(tree, "run")
  node = _statement(run, lambda n: isinstance(n, ast.Expr) and "<tool_response>" in
                    ast.unparse(n) and "append" in ast.unparse(n))
  if node is None or "output" not in ast.unparse(node):
    return []
  indent = _indent_of(source, node)
  empty = ("if not output.strip() or \"no output\" in output:\n"
           "  output += \"\\nNothing was printed: end the code with print(...) of the value "
           "you need.\"\n")
  error = ("if \"Traceback\" in output or \"Error\" in output:\n"
           "  output += \"\\nThe code failed: read the error, fix the code and run it "
           "again.\"\n")
  reminder = ("messages.append({\"role\": \"user\", \"content\": f\"<tool_response>{output}"
              "</tool_response>\\nIf this output settles the question, give the final answer "
              "in \\\\boxed{{}}.\"})")
  original = _lines(source, node)
  return [
      (_block(original, _indented(empty.rstrip("\n"), indent) + original),
       "Code that computes a value but prints nothing returns no output; telling the model "
       "to print what it needs lets the next turn use the result.", False),
      (_block(original, _indented(error.rstrip("\n"), indent) + original),
       "Failing code returns a traceback the model tends to ignore; an explicit note to fix "
       "and rerun it turns errors into corrected computations.", False),
      (_block(original, _indented(reminder, indent)),
       "After seeing the interpreter's output the model keeps computing instead of "
       "answering; reminding it to box the answer when the output settles it ends the "
       "episode with a scored answer.", False)]


def _math_voting(source, tree):
  run = _function(tree, "run")
  node = _final_return(run, "reply")
  if node is None or "import re" not in source or "votes" in ast.unparse(run):
    return []
  indent = _indent_of(source, node)
  options = []
  for votes in (3, 5):
    code = ("votes = llm.chat(messages + [{\"role\": \"user\",\n"
            "                              \"content\": \"State only the final answer in "
            f"\\\\boxed{{}}.\"}}],\n                 n={votes})\n"
            "answers = [found[-1] for found in (re.findall(r\"\\\\boxed\\{([^{}]*)\\}\", text)\n"
            "                                   for text in votes + [reply]) if found]\n"
            "if not answers:\n"
            "  return reply\n"
            "return reply + \"\\n\\\\boxed{\" + max(answers, key=answers.count) + \"}\"")
    options.append((_block(_lines(source, node), _indented(code, indent)),
                    f"A single sample's final answer is noisy; taking the most common boxed "
                    f"answer over {votes} extra samples and the last reply (self-consistency) "
                    "corrects occasional slips.", False))
  return options


def _reasoning_gym_voting(source, tree):
  run = _function(tree, "run")
  if run is None or len(run.body) < 2:
    return []
  call, final = run.body[-2], run.body[-1]
  if not (_is_assign_to(call, "reply") and _calls(call.value, "llm.chat") and
          isinstance(final, ast.Return) and final.value is not None):
    return []
  if any(keyword.arg == "n" for keyword in call.value.keywords):
    return []
  indent = _indent_of(source, call)
  answer = ast.get_source_segment(source, final.value)
  original = _lines(source, call) + _lines(source, final)
  options = []
  call_text = ast.get_source_segment(source, call.value)
  for votes in (3, 5):
    code = (f"replies = {call_text[:-1]}, n={votes})\n"
            f"answers = [{answer} for reply in replies]\n"
            "return max(answers, key=answers.count)")
    options.append((_block(original, _indented(code, indent)),
                    f"One sample's answer is noisy; returning the most common of {votes} "
                    "sampled answers (self-consistency) corrects occasional slips.", False))
  return options


def _chess_board_presentation(source, tree):
  function = _function(tree, "format_observation")
  if function is None:
    return []
  options = []
  legal = _statement(function, lambda n: _is_assign_to(n, "legal"))
  if legal is not None and "san" in ast.unparse(legal.value):
    indent = _indent_of(source, legal)
    options.append((_block(_lines(source, legal), _indented(
        "legal = \", \".join(move[\"uci\"] for move in observation[\"legal_moves\"])", indent)),
        "The legal-move list takes most of the prompt; one comma-separated line of UCI moves "
        "is shorter and is exactly the notation the reply must use.", False))
  lines = source.splitlines(keepends=True)
  for marker, why in (("observation['board']", "The ASCII board repeats what the FEN says "
                       "and lengthens the prompt; dropping it leaves the model the FEN and "
                       "the legal moves."),
                      ("observation['fen']", "The FEN string is hard for a small model to "
                       "read; dropping it leaves the ASCII board and the legal moves.")):
    found = [i for i in range(function.lineno - 1, function.end_lineno)
             if marker in lines[i] and lines[i].strip().startswith("f\"")]
    if len(found) == 1:
      options.append((_block(lines[found[0]], ""), why, False))
  return options


# ---- Catalogue --------------------------------------------------------------------------

_QA_REMINDERS = (
    "Always end with the final answer inside <answer>...</answer>: only the short entity, "
    "name or number, never a sentence.",
    "Read the retrieved passages carefully and copy the answer from them exactly.")
_QA_USER_REMINDERS = (
    "Search first, then answer with the entity only.",
    "If the question has two steps, search for the first entity, then search again for the "
    "fact about it.")
_MATH_REMINDERS = (
    "Write the final answer as a single number or expression inside \\boxed{{}} at the very "
    "end of your reply.",
    "Check your result with the code interpreter before you answer.")
_MATH_NUDGES = (
    "Run Python code with the code_interpreter tool to compute or check the answer, then put "
    "the final answer in \\boxed{}.",
    "Give the final answer now in \\boxed{}.")
_CHESS_REMINDERS = (
    "Copy your move exactly from the legal moves list, in UCI notation.",
    "Look for checks, captures and threats first; a puzzle's first move is usually forcing.")
_DOCQA_REMINDERS = (
    "Copy figures exactly as the table prints them and put only the value, with the unit or % "
    "the question asks for, inside <FINAL_ANSWER>...</FINAL_ANSWER>.",
    "Open the page or table a search hit names before answering; do not answer from the "
    "search snippet alone.")
_DOCQA_USER_REMINDERS = (
    "Search for the table first, open it, and compute with python when figures must be "
    "combined.",)
_TOOLFLOW_REMINDERS = (
    "Before changing a record, look it up and use its exact id; several records may have "
    "nearly the same name.",
    "Read the policy messages in the inbox first and follow the newest one.")
_REASONING_GYM_TEMPLATES = (
    "{question}\n\nThink it through step by step inside <think>...</think>, then write only "
    "the final answer after </think>.",)
_REASONING_GYM_REMINDERS = (
    "Answer in exactly the format the question asks for.",
    "Double-check the answer against every condition in the question before you reply.")

CATALOGUE = {
    "qa": (
        ("turn_budget", _integer_edit(
            "With MAX_TURNS={old} the model runs out of turns before it can search and then "
            "answer; {new} turns give it {direction} chances to search again.", "MAX_TURNS",
            (1, 3, 4, 6), limit=16)),
        ("retrieval_topk", _integer_edit(
            "With TOPK={old} the passage holding the answer is often not among those shown; "
            "showing {new} passages per search gives {direction} chances to contain it.",
            "TOPK", (2, 3, 5), limit=10)),
        ("passage_length", _integer_edit(
            "Passages cut to MAX_DOC_TOKENS={old} words may lose or bury the answer; {new} "
            "words per passage shows {direction} of each.", "MAX_DOC_TOKENS", (60, 100, 400))),
        ("query_rewrite", _qa_query_rewrite),
        ("retrieve_first", _qa_retrieve_first),
        ("format_reminder", _append_to_prompt(
            "SYSTEM_PROMPT", _QA_REMINDERS,
            "Answers are scored by exact match, and replies without a short answer tag score "
            "0.")),
        ("user_prompt", _append_to_prompt(
            "USER_PROMPT_TEMPLATE", _QA_USER_REMINDERS,
            "The model often answers from memory without searching.")),
        ("verify_then_retry", _verify_then_retry(
            "<answer>", "Give your final answer now, only inside <answer>...</answer>.")),
    ),
    "math": (
        ("turn_budget", _integer_edit(
            "With MAX_TURNS={old} the model cannot run code and then answer from its output; "
            "{new} turns give it {direction} rounds with the interpreter.", "MAX_TURNS",
            (3, 4, 6, 8), limit=16)),
        ("format_reminder", _append_to_prompt(
            "USER_PROMPT_TEMPLATE", _MATH_REMINDERS,
            "Replies without a final \\boxed{} answer score 0.")),
        ("interpreter_feedback", _math_interpreter_feedback),
        ("nudge", _replace_prompt(
            "NUDGE", _MATH_NUDGES,
            "Replies with neither code nor an answer get a nudge; a sharper one gets an answer "
            "sooner.")),
        ("voting", _math_voting),
        ("verify_then_retry", _verify_then_retry(
            "\\boxed{", "Give the final answer now in \\boxed{}.")),
    ),
    "chess": (
        ("board_presentation", _chess_board_presentation),
        ("format_retry_budget", _integer_edit(
            "A reply without a readable move ends the puzzle after {old} retries; {new} "
            "retries give {direction} chances to recover from a formatting slip.",
            "FORMAT_RETRY_BUDGET", (0, 2, 3), limit=10)),
        ("illegal_move_retry_budget", _integer_edit(
            "An illegal move ends the puzzle after {old} retries; {new} retries give "
            "{direction} chances to pick a legal move.", "ILLEGAL_MOVE_RETRY_BUDGET",
            (0, 2, 3), limit=10)),
        ("format_reminder", _append_to_prompt(
            "SYSTEM_PROMPT", _CHESS_REMINDERS,
            "Many failures are unreadable or illegal moves.")),
    ),
    "docqa": (
        ("turn_budget", _integer_edit(
            "With MAX_TURNS={old} the model runs out of turns before it has searched, opened "
            "the table and answered; {new} turns give it {direction} rounds of lookups.",
            "MAX_TURNS", (2, 4, 6, 12), limit=16)),
        ("calls_per_turn", _integer_edit(
            "Only MAX_CALLS_PER_TURN={old} tool calls of a reply run; {new} lets {direction} "
            "lookups of one reply through.", "MAX_CALLS_PER_TURN", (1, 2, 8), limit=16)),
        ("result_length", _integer_edit(
            "Tool results cut to MAX_RESULT_CHARS={old} characters may lose the table rows "
            "that hold the figure or bury it in text; {new} characters show {direction} of "
            "each result.", "MAX_RESULT_CHARS", (150, 600, 3000, 12000))),
        ("format_reminder", _append_to_prompt(
            "SYSTEM_PROMPT", _DOCQA_REMINDERS,
            "Answers are scored against the reference figure, and replies without a "
            "<FINAL_ANSWER> tag score 0.")),
        ("user_prompt", _append_to_prompt(
            "USER_PROMPT_TEMPLATE", _DOCQA_USER_REMINDERS,
            "The model often answers from a search snippet without opening the table.")),
        ("verify_then_retry", _verify_then_retry(
            "<FINAL_ANSWER>", "Give your final answer now, only inside "
            "<FINAL_ANSWER>...</FINAL_ANSWER>.")),
    ),
    "toolflow": (
        ("turn_budget", _integer_edit(
            "With MAX_TURNS={old} the workflow stops before every step is done; {new} turns "
            "give the model {direction} rounds of tool calls.", "MAX_TURNS",
            (2, 8, 16, 32), limit=48)),
        ("calls_per_turn", _integer_edit(
            "Only MAX_CALLS_PER_TURN={old} tool calls of a reply run; {new} lets {direction} "
            "of a reply's calls through.", "MAX_CALLS_PER_TURN", (1, 4, 16), limit=32)),
        ("result_length", _integer_edit(
            "App answers cut to MAX_RESULT_CHARS={old} characters may lose the record or "
            "policy the next step needs; {new} characters show {direction} of each answer.",
            "MAX_RESULT_CHARS", (150, 600, 2000, 8000))),
        ("format_reminder", _append_to_prompt(
            "SYSTEM_PROMPT", _TOOLFLOW_REMINDERS,
            "Many lost assertions come from acting on a near-duplicate record or a stale "
            "policy.")),
    ),
    "reasoning_gym": (
        ("format_reminder", _append_to_prompt(
            "PROMPT_TEMPLATE", _REASONING_GYM_REMINDERS,
            "Answers in the wrong format get no or partial credit.")),
        ("think_then_answer", _replace_prompt(
            "PROMPT_TEMPLATE", _REASONING_GYM_TEMPLATES,
            "Asked for the bare answer, the model answers without working it out; letting it "
            "think first (the thinking is stripped from the answer) makes fewer errors.")),
        ("voting", _reasoning_gym_voting),
    ),
}


def edit_options(source, domain_name, allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
                 max_lines=static_checks.DEFAULT_MAX_LINES):
  """Every applicable edit of source: [(mechanism, blocks, hypothesis, prompt_only_safe,
  new_source)], in catalogue order."""
  try:
    tree = ast.parse(source)
  except SyntaxError:
    return []
  options = []
  for mechanism, make in CATALOGUE[domain_family(domain_name)]:
    for blocks, hypothesis, prompt_safe in make(source, tree):
      if blocks is None:
        continue
      result = patches.apply_proposal(source, blocks)
      if not result.ok or static_checks.check_harness(result.source, allowed_imports,
                                                      max_lines):
        continue
      options.append((mechanism, blocks, hypothesis, prompt_safe, result.source))
  return options


def mechanism_names():
  """Every mechanism name in the catalogue, over all families, in catalogue order."""
  names = []
  for entries in CATALOGUE.values():
    names.extend(name for name, _ in entries if name not in names)
  return tuple(names)


class EditLibraryProposer:
  """The edit library behind the proposer interface (see the module docstring).

  Args:
    seed: seeds the choice among applicable edits.
    mechanisms: optional subset of the catalogue's mechanism names (for every family the
      search may meet); only those are proposed. None = all.
  """

  def __init__(self, seed=0, mechanisms=None):
    self.seed = seed
    self.name = PROPOSER_NAME
    if mechanisms is not None:
      edit_mechanisms.check(mechanisms)
    self.mechanisms = None if mechanisms is None else tuple(mechanisms)

  def propose(self, context, n):
    incumbent = context.incumbent
    options = edit_options(incumbent.source, context.domain_name, context.allowed_imports,
                           context.max_lines)
    if self.mechanisms is not None:
      options = [option for option in options if option[0] in self.mechanisms]
    seen = set(context.known_hashes)
    usable = []
    for option in options:
      mechanism, blocks, hypothesis, prompt_safe, new_source = option
      new_hash = program.content_hash(new_source)
      if new_hash in seen:
        continue
      if context.prompt_only and (not prompt_safe or prompt_only.check_prompt_only(
          incumbent.source, new_source) is not None):
        continue
      seen.add(new_hash)
      usable.append(option)
    rng = random.Random(seeds_lib.derive_seed(self.seed, "edit_choice", *context.call_site,
                                              incumbent.hash))
    rng.shuffle(usable)
    recent = list(context.recent_mechanisms)
    mechanisms = []
    for option in usable:
      if option[0] not in mechanisms:
        mechanisms.append(option[0])
    last_used = {mechanism: index for index, mechanism in enumerate(recent)}
    mechanisms.sort(key=lambda m: (m in last_used, last_used.get(m, 0)))
    queues = {m: [o for o in usable if o[0] == m] for m in mechanisms}
    chosen = []
    while len(chosen) < n and any(queues.values()):
      for mechanism in mechanisms:
        if queues[mechanism] and len(chosen) < n:
          chosen.append(queues[mechanism].pop(0))
    return [proposal_lib.Proposal(
        kind="patch", text=blocks, hypothesis=hypothesis,
        raw_output=proposal_lib.format_reply(hypothesis, blocks), proposer=self.name,
        mechanism=mechanism) for mechanism, blocks, hypothesis, _, _ in chosen]
