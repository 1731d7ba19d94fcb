"""Each domain's seed harness h0, end to end through the sandboxed runtime with a scripted model.

Scripted correct replies score 1, wrong ones 0, and malformed ones are handled as the domain
specifies. The JSON sent into the sandbox is recorded to check that no reference crosses.
"""
import json
import re

import chess
import pytest

from whale_jax import tasks
from whale_jax.harness import sandbox_process
from whale_jax.harness.program import Harness
from whale_jax.harness.runtime import HarnessRuntime
from whale_jax.harness.scripted_backend import ScriptedBackend
from whale_jax.sampling.api import SamplingParams
from whale_jax.tasks import seed_harnesses
from whale_jax.tokenization import load_tokenizer

TOKENIZER = load_tokenizer("byte")
SAMPLING = SamplingParams(max_tokens=200)
SMALL = {"weight": 4, "harness": 2, "validation": 2, "test": 4}


@pytest.fixture
def sent_to_sandbox(monkeypatch):
  """Every JSON message the host sends into a sandbox, in order."""
  messages = []
  send = sandbox_process.Channel.send

  def recording_send(self, message, *args, **kwargs):
    messages.append(json.dumps(message))
    return send(self, message, *args, **kwargs)
  monkeypatch.setattr(sandbox_process.Channel, "send", recording_send)
  return messages


def run_seed_harness(domain, instances, replies, source=None):
  """(trajectories, scores) of h0 (or `source`) on instances with scripted replies."""
  backend = ScriptedBackend(TOKENIZER, replies=replies)
  with HarnessRuntime(backend, TOKENIZER, num_workers=2, timeout_seconds=30) as runtime:
    episodes = [tasks.make_episode(domain, instance, SAMPLING) for instance in instances]
    trajectories = runtime.run_episodes(Harness(source or domain.seed_harness), episodes)
  assert [t.outcome for t in trajectories] == ["ok"] * len(instances), [
      t.error for t in trajectories]
  return trajectories, [domain.verify(i, t.answer, t) for i, t in zip(instances, trajectories)]


def last_user_message(prompt):
  return prompt.rsplit("<|im_start|>user\n", 1)[-1]


def episode_messages(sent):
  return [m for m in sent if json.loads(m).get("type") == "episode"]


# ---------------------------------------------------------------- SearchQA (synthetic world)

@pytest.fixture(scope="module")
def qa_domain():
  return tasks.get_domain("synthetic_qa", seed=0, split_sizes=SMALL)


def qa_replies(instances, final_answer, tool_call_format="xml"):
  """Turn 1 searches the question; turn 2 answers final_answer(instance)."""
  def reply(prompt):
    instance = next(i for i in instances if i.public["question"] in prompt)
    if "<tool_response>" in prompt:
      return final_answer(instance)
    question = instance.public["question"]
    if tool_call_format == "json":
      return ('<tool_call>{"name": "search", "arguments": {"query_list": [%s]}}</tool_call>'
              % json.dumps(question))
    return ("Let me search.\n<tool_call><function=search><parameter=query_list>"
            f"{json.dumps([question, 'an extra query'])}</parameter></function></tool_call>")
  return reply


def test_searchqa_h0_correct_answers_score_one(qa_domain, sent_to_sandbox):
  instances = qa_domain.splits()["test"]
  trajectories, scores = run_seed_harness(qa_domain, instances, qa_replies(
      instances, lambda i: f"<answer>{i.reference['golden_answers'][0]}</answer>"))
  assert scores == [1.0] * len(instances)
  for instance, trajectory in zip(instances, trajectories):
    assert trajectory.num_turns == 2
    [event] = trajectory.tool_events
    # h0: first query only, top-1, 200-token passages.
    assert event.arguments == {"query": instance.public["question"], "topk": 1,
                               "max_doc_tokens": 200}
    assert event.result.startswith("Doc 1 (Title: ") and "\nDoc 2" not in event.result
    second_prompt = TOKENIZER.decode(trajectory.calls[1].prompt_token_ids)
    assert last_user_message(second_prompt).startswith('<tool_response>{"result": "Doc 1')
  metrics = qa_domain.metrics(instances, trajectories, scores)
  # Top-1 on the question finds the first hop; only one-hop answers are in that passage.
  one_hop = [len(i.reference["supporting_ids"]) == 1 for i in instances]
  assert metrics["retrieval_accuracy"] == sum(one_hop) / len(one_hop)  # every episode searched
  assert metrics["answer_format_rate"] == 1.0
  episodes = episode_messages(sent_to_sandbox)
  assert len(episodes) == len(instances)
  for instance in instances:
    [message] = [m for m in episodes if json.dumps(instance.public["question"]) in m]
    assert json.loads(message)["task"] == dict(instance.public)
    for gold in instance.reference["golden_answers"]:
      assert gold not in message


def test_searchqa_h0_json_tool_calls_and_wrong_answers_score_zero(qa_domain):
  instances = qa_domain.splits()["test"][:2]
  trajectories, scores = run_seed_harness(
      qa_domain, instances, qa_replies(instances, lambda i: "<answer>Nobody</answer>", "json"))
  assert scores == [0.0, 0.0]
  assert all(len(t.tool_events) == 1 for t in trajectories)


def test_searchqa_h0_without_answer_tag_scores_zero_and_stops(qa_domain):
  instances = qa_domain.splits()["test"][:2]
  gold = {i.public["question"]: i.reference["golden_answers"][0] for i in instances}
  # The right entity, but not inside <answer> tags and no tool call: one turn, score 0.
  trajectories, scores = run_seed_harness(
      qa_domain, instances,
      lambda prompt: next(f"It is {g}." for q, g in gold.items() if q in prompt))
  assert scores == [0.0, 0.0]
  assert [t.num_turns for t in trajectories] == [1, 1]
  assert qa_domain.metrics(instances, trajectories, scores)["answer_format_rate"] == 0.0


def test_searchqa_h0_stops_after_two_turns(qa_domain):
  instances = qa_domain.splits()["test"][:1]
  question = instances[0].public["question"]
  trajectories, scores = run_seed_harness(
      qa_domain, instances,
      f'<tool_call><function=search><parameter=query_list>["{question}"]</parameter>'
      "</function></tool_call>")
  assert scores == [0.0]
  assert trajectories[0].num_turns == 2 and len(trajectories[0].tool_events) == 1


def test_searchqa_from_files_with_a_bm25_corpus(tmp_path):
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text("".join(json.dumps(row) + "\n" for row in [
      {"id": "1", "contents": "\"Zorvik\"\nZorvik is the capital of Quelland."},
      {"id": "2", "contents": "\"Ulpa\"\nUlpa is a river in Merth."}]))
  questions = tmp_path / "test.jsonl"
  questions.write_text(json.dumps({"id": "t0", "question": "What is the capital of Quelland?",
                                   "golden_answers": ["Zorvik"]}) + "\n")
  domain = tasks.get_domain("searchqa", split_questions={"test": str(questions)},
                            corpus=str(corpus), split_sizes={"test": 1})
  [instance] = domain.splits()["test"]
  def reply(prompt):
    if "<tool_response>" in prompt:
      return "<answer>" + re.search(r'Title: \\"(\w+)', prompt).group(1) + "</answer>"
    return ('<tool_call><function=search><parameter=query_list>["capital of Quelland"]'
            "</parameter></function></tool_call>")
  _, scores = run_seed_harness(domain, [instance], reply)
  assert scores == [1.0]


# ---------------------------------------------------------------- Harness Learning's QA seed

def two_hop_reader(prompt):
  """A scripted reader for "Where was the founder of X born?": it finds the founder in the
  first passages, asks for them next, finds their birthplace in the second passages, and
  answers from the summaries alone."""
  prompt = last_user_message(prompt)
  if "NEXT QUERY" in prompt:
    company, founder = re.search(r"(\w+) was founded by (\w+)", prompt).groups()
    return (f"<think>The founder.</think>{company} was founded by {founder}.\n"
            f"NEXT QUERY: {founder}")
  if "Summarize what these passages add" in prompt:
    founder = re.search(r'searching for "(\w+)"', prompt).group(1)
    birthplace = re.search(founder + r" was born in (\w+)", prompt).group(1)
    return f"{founder} was born in {birthplace}."
  return "<answer>" + re.search(r"was born in (\w+)", prompt).group(1) + "</answer>"


def test_searchqa_two_hop_seed_searches_twice_and_answers_from_the_summaries():
  domain = tasks.get_domain("synthetic_qa", seed=0, split_sizes=SMALL,
                            seed_harness="searchqa_two_hop")
  assert domain.seed_harness == seed_harnesses.source("searchqa_two_hop")
  instance = next(i for split in domain.splits().values() for i in split
                  if i.public["question"].startswith("Where was the founder of"))
  assert len(instance.reference["supporting_ids"]) == 2   # a two-hop question
  [trajectory], scores = run_seed_harness(domain, [instance], two_hop_reader)
  assert scores == [1.0] and trajectory.num_turns == 3
  question = instance.public["question"]
  first, second = trajectory.tool_events
  founder = re.search(r"was founded by (\w+)", first.result).group(1)
  assert first.arguments == {"query": question, "topk": 3, "max_doc_tokens": 200}
  assert second.arguments == {"query": founder, "topk": 3, "max_doc_tokens": 200}
  prompts = [last_user_message(TOKENIZER.decode(c.prompt_token_ids)) for c in trajectory.calls]
  assert first.result in prompts[0] and second.result in prompts[1]
  # The first summary goes on without its NEXT QUERY line or thinking.
  assert f"was founded by {founder}." in prompts[1]
  assert "NEXT QUERY:" not in prompts[1] and "<think>" not in prompts[1]
  # The answer call sees the two summaries and no passages.
  assert f"was founded by {founder}." in prompts[2] and f"{founder} was born in" in prompts[2]
  assert "Doc 1 (Title:" not in prompts[2]


def test_searchqa_two_hop_seed_without_next_query_searches_the_question_again(tmp_path):
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text(json.dumps({"id": "1", "contents": "\"Zorvik\"\nZorvik is the capital of "
                                                     "Quelland."}) + "\n")
  questions = tmp_path / "test.jsonl"
  questions.write_text(json.dumps({"id": "t0", "question": "What is the capital of Quelland?",
                                   "golden_answers": ["Zorvik"]}) + "\n")
  domain = tasks.get_domain("searchqa", split_questions={"test": str(questions)},
                            corpus=str(corpus), split_sizes={"test": 1},
                            seed_harness="searchqa_two_hop")
  [instance] = domain.splits()["test"]
  # No NEXT QUERY line, and a final reply without an <answer> tag (the seed wraps it).
  [trajectory], scores = run_seed_harness(
      domain, [instance], lambda prompt: "Zorvik" if "two summaries" in prompt else "Zorvik.")
  assert scores == [1.0] and trajectory.answer == "<answer>Zorvik</answer>"
  assert [e.arguments["query"] for e in trajectory.tool_events] == [
      instance.public["question"]] * 2


# ---------------------------------------------------------------- math

@pytest.fixture(scope="module")
def math_domain():
  return tasks.get_domain("math", seed=0, split_sizes=SMALL)


def math_replies(instances, final_answer):
  """Turn 1 calls code_interpreter; turn 2 answers final_answer(instance)."""
  def reply(prompt):
    instance = next(i for i in instances if i.public["question"] in prompt)
    if "<tool_response>" in prompt:
      return f"The result checks out. \\boxed{{{final_answer(instance)}}}"
    return ("<tool_call><function=code_interpreter><parameter=code>\n```python\n"
            "x = 6 * 7\nx\n```\n</parameter></function></tool_call>")
  return reply


def test_math_h0_runs_code_and_correct_boxed_answers_score_one(math_domain):
  instances = math_domain.splits()["test"]
  trajectories, scores = run_seed_harness(
      math_domain, instances, math_replies(instances, lambda i: i.reference["answer"]))
  assert scores == [1.0] * len(instances)
  for trajectory in trajectories:
    [event] = trajectory.tool_events
    assert event.arguments == {"code": "x = 6 * 7\nprint(x)"}  # fence removed, last line printed
    assert event.result == "42\n"                               # the real sandboxed interpreter
    second_prompt = TOKENIZER.decode(trajectory.calls[1].prompt_token_ids)
    assert last_user_message(second_prompt).startswith("<tool_response>42\n</tool_response>")


def test_math_h0_wrong_boxed_answer_scores_zero(math_domain):
  instances = math_domain.splits()["test"][:2]
  _, scores = run_seed_harness(math_domain, instances,
                               math_replies(instances, lambda i: f"{i.reference['answer']}1"))
  assert scores == [0.0, 0.0]


def test_math_h0_direct_boxed_answer_ends_the_episode(math_domain):
  instances = math_domain.splits()["test"][:2]
  answers = {i.public["question"]: i.reference["answer"] for i in instances}
  trajectories, scores = run_seed_harness(
      math_domain, instances,
      lambda prompt: next(f"\\boxed{{{a}}}" for q, a in answers.items() if q in prompt))
  assert scores == [1.0, 1.0]
  assert [t.num_turns for t in trajectories] == [1, 1]


def test_math_h0_nudges_a_reply_without_tool_or_box(math_domain):
  instances = math_domain.splits()["test"][:1]
  answer = instances[0].reference["answer"]
  trajectories, scores = run_seed_harness(
      math_domain, instances,
      lambda prompt: f"\\boxed{{{answer}}}" if "code_interpreter tool for useful" in
      last_user_message(prompt) else f"The answer is {answer}.")
  assert scores == [1.0]
  assert trajectories[0].num_turns == 2 and not trajectories[0].tool_events
  trajectories, scores = run_seed_harness(math_domain, instances, f"It is {answer}.")
  assert scores == [0.0]  # malformed twice: no box, no credit
  assert math_domain.metrics(instances, trajectories, scores)["answer_format_rate"] == 0.0


# ---------------------------------------------------------------- chess

@pytest.fixture(scope="module")
def chess_domain():
  return tasks.get_domain("chess", seed=0, split_sizes=SMALL, mate_in_two_fraction=1.0)


def chess_replies(instances, choose):
  """Replies <move>choose(puzzle, fen)</move> for the position in the last user message."""
  by_fen = {}
  for instance in instances:
    board = chess.Board(instance.reference["fen"])
    for i, move in enumerate(instance.reference["solution"]):
      if i % 2 == 0:
        by_fen[board.fen()] = (instance.reference, i)
      board.push_uci(move)

  def reply(prompt):
    fen = re.findall(r"FEN: (.+)", last_user_message(prompt))
    if not fen:  # a retry message: answer for the last FEN shown
      fen = re.findall(r"FEN: (.+)", prompt)
    puzzle, ply = by_fen[fen[-1]]
    return choose(puzzle, ply, prompt)
  return reply


def test_chess_h0_plays_the_line_and_scores_one(chess_domain, sent_to_sandbox):
  instances = chess_domain.splits()["test"]
  trajectories, scores = run_seed_harness(chess_domain, instances, chess_replies(
      instances, lambda puzzle, ply, _: f"<move>{puzzle['solution'][ply]}</move>"))
  assert scores == [1.0] * len(instances)
  for instance, trajectory in zip(instances, trajectories):
    assert trajectory.answer == " ".join(instance.reference["solution"][::2])
    assert [e.result["status"] for e in trajectory.tool_events] == ["correct", "solved"]
    first_prompt = TOKENIZER.decode(trajectory.calls[0].prompt_token_ids)
    assert f"FEN: {instance.reference['fen']}" in first_prompt
    assert "Side to move: " in first_prompt and "- [" in first_prompt and "SAN=" in first_prompt
  for message in episode_messages(sent_to_sandbox):
    assert "solution" not in message
  for instance in instances:
    [message] = [m for m in episode_messages(sent_to_sandbox)
                 if json.dumps(instance.reference["fen"]) in m]
    assert instance.reference["solution"][1] not in message  # the opponent's reply


def test_chess_h0_wrong_move_scores_zero_and_ends(chess_domain):
  instances = chess_domain.splits()["test"][:2]

  def wrong(puzzle, ply, _):
    board = chess.Board(puzzle["fen"])
    return "<move>" + next(m.uci() for m in sorted(board.legal_moves, key=str)
                           if m.uci() != puzzle["solution"][0]) + "</move>"
  trajectories, scores = run_seed_harness(chess_domain, instances,
                                          chess_replies(instances, wrong))
  assert scores == [0.0, 0.0]
  assert [[e.result["status"] for e in t.tool_events] for t in trajectories] == [["wrong"]] * 2


def test_chess_h0_retries_one_malformed_and_one_illegal_move(chess_domain):
  instances = chess_domain.splits()["test"][:1]
  attempts = []

  def flaky(puzzle, ply, prompt):
    attempts.append(ply)
    if attempts.count(ply) == 1:
      return "I would play the rook."                     # no <move> tag: format retry
    if attempts.count(ply) == 2:
      return "<move>a1a1</move>"                          # not legal: illegal-move retry
    return f"<move>{puzzle['solution'][ply]}</move>"
  trajectories, scores = run_seed_harness(chess_domain, instances,
                                          chess_replies(instances, flaky))
  assert scores == [1.0]
  statuses = [e.result["status"] for e in trajectories[0].tool_events]
  assert statuses == ["illegal", "correct", "illegal", "solved"]
  metrics = chess_domain.metrics(instances, trajectories, scores)
  assert metrics["legal_move_rate"] == 0.5


def test_chess_h0_gives_up_after_the_retry_budget(chess_domain):
  instances = chess_domain.splits()["test"][:1]
  trajectories, scores = run_seed_harness(chess_domain, instances, "No idea.")
  assert scores == [0.0]
  assert trajectories[0].num_turns == 2  # one format retry, then stop


def test_chess_a_wrong_move_cannot_be_taken_back_by_the_answer(chess_domain):
  instance = chess_domain.splits()["test"][0]
  solution = " ".join(instance.reference["solution"][::2])
  wrong = next(m["uci"] for m in instance.public["legal_moves"]
               if m["uci"] != instance.reference["solution"][0])
  source = (f"def run(task, llm, tools):\n  tools.move({wrong!r})\n  return {solution!r}\n")
  trajectories, scores = run_seed_harness(chess_domain, [instance], "unused", source=source)
  assert trajectories[0].answer == solution and scores == [0.0]


# ---------------------------------------------------------------- Reasoning Gym

def test_reasoning_gym_h0_is_one_direct_call_scored_by_the_dataset():
  domain = tasks.get_domain("reasoning_gym:spell_backward", seed=0, split_sizes=SMALL)
  instances = domain.splits()["test"]
  answers = {i.public["question"]: i.reference["answer"] for i in instances}

  def answer_for(prompt, transform):
    return next(transform(a) for q, a in answers.items() if q in prompt)
  trajectories, scores = run_seed_harness(
      domain, instances, lambda p: answer_for(p, lambda a: f"<think>hm</think>{a}"))
  assert scores == [1.0] * len(instances)
  assert [t.num_turns for t in trajectories] == [1] * len(instances)
  assert all("Give only the final answer" in TOKENIZER.decode(t.calls[0].prompt_token_ids)
             for t in trajectories)
  _, scores = run_seed_harness(domain, instances, lambda p: answer_for(p, lambda a: a[:-1]))
  assert all(0.0 < score < 1.0 for score in scores)  # the dataset's partial credit
  _, scores = run_seed_harness(domain, instances, "qqqqqq")
  assert scores == [0.0] * len(instances)


# ---------------------------------------------------------------- what crosses the boundary

@pytest.mark.parametrize("name", ["synthetic_qa", "math", "chess", "reasoning_gym:chain_sum"])
def test_only_public_fields_cross_into_the_sandbox(name, sent_to_sandbox):
  domain = tasks.get_domain(name, seed=0, split_sizes=SMALL)
  instances = domain.splits()["test"]
  _, scores = run_seed_harness(domain, instances, "I am not sure.")
  assert scores == [0.0] * len(instances)
  tasks_sent = [json.loads(m)["task"] for m in episode_messages(sent_to_sandbox)]
  assert sorted(map(json.dumps, tasks_sent)) == sorted(
      json.dumps(dict(i.public)) for i in instances)
  reference_fields = {"golden_answers", "supporting_ids", "answer", "solution", "metadata"}
  for message in sent_to_sandbox:
    assert not reference_fields & set(json.loads(message).get("task", {}))
    assert "golden_answers" not in message and '"solution"' not in message
