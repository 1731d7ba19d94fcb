"""The LLM judge: prompt, reply parsing, retries, timeouts and the exact-match fallback."""
import concurrent.futures
import socket
import time

import pytest

from tests import http_stub
from whale_jax.sampling import openai_client
from whale_jax.sampling.api import Completion
from whale_jax.tasks import judge
from whale_jax.tokenization import load_tokenizer

QUESTION, GOLD = "Who wrote Hamlet?", ["William Shakespeare", "Shakespeare"]


class ScriptedBackend:
  """An LLMBackend whose replies are scripted; None means the reply never arrives."""

  def __init__(self, replies):
    self.replies = list(replies)
    self.requests = []

  def submit(self, prompt_ids, params):
    self.requests.append((list(prompt_ids), params))
    future = concurrent.futures.Future()
    reply = self.replies.pop(0)
    if reply is not None:
      future.set_result([Completion(token_ids=[], logprobs=[], text=reply,
                                    finish_reason="stop")])
    return future

  def generate(self, prompts, params):
    return [self.submit(p, params).result()[0] for p in prompts]


def backend_judge(replies, timeout_seconds=0.05):
  backend = ScriptedBackend(replies)
  completer = judge.backend_completer(backend, load_tokenizer("byte"),
                                      timeout_seconds=timeout_seconds)
  return judge.LLMJudge(completer, max_attempts=3, backoff_seconds=0.0), backend


def test_prompt_fills_the_three_slots():
  prompt = judge.judge_prompt(QUESTION, GOLD, "Shakespeare")
  assert prompt.startswith("You are an impartial judge for a question-answering task.")
  assert prompt.endswith("Question: Who wrote Hamlet? Reference answer(s): William Shakespeare "
                         "| Shakespeare Predicted answer: Shakespeare Respond with exactly one "
                         "word: CORRECT or INCORRECT.")


@pytest.mark.parametrize("reply, expected", [
    ("CORRECT", True), ("INCORRECT", False), ("  correct.\n", True), ("**INCORRECT**", False),
    ("<think>it says Shakespeare, so INCORRECT is wrong</think>\nCORRECT", True),
    ("Correct, because the reference matches", None), ("CORRECT or INCORRECT", None),
    ("", None), ("maybe", None), (None, None),
])
def test_parse_judge_reply(reply, expected):
  assert judge.parse_judge_reply(reply) is expected


def test_judge_decides_greedily_with_256_tokens():
  llm_judge, backend = backend_judge(["INCORRECT"])
  verdict = llm_judge(QUESTION, GOLD, "Shakespeare")  # exact match would say 1
  assert (verdict.score, verdict.source, verdict.attempts) == (0.0, "judge", 1)
  params = backend.requests[0][1]
  assert params.temperature == 0.0 and params.max_tokens == 256
  assert "Predicted answer: Shakespeare" in load_tokenizer("byte").decode(backend.requests[0][0])


def test_malformed_replies_are_retried_then_the_judge_decides():
  llm_judge, backend = backend_judge(["I believe so", "CORRECT"])
  verdict = llm_judge(QUESTION, GOLD, "the Bard")  # exact match would say 0
  assert (verdict.score, verdict.source, verdict.attempts) == (1.0, "judge", 2)
  assert "malformed" in verdict.errors[0]


def test_timeouts_are_retried_then_the_judge_decides():
  llm_judge, _ = backend_judge([None, None, "CORRECT"])
  verdict = llm_judge(QUESTION, GOLD, "the Bard")
  assert (verdict.score, verdict.source, verdict.attempts) == (1.0, "judge", 3)
  assert all(error.startswith("TimeoutError") for error in verdict.errors)


@pytest.mark.parametrize("prediction, expected_score", [("shakespeare", 1.0), ("Marlowe", 0.0)])
def test_falls_back_to_exact_match_when_every_attempt_fails(prediction, expected_score):
  llm_judge, backend = backend_judge([None, "no idea", None])
  verdict = llm_judge(QUESTION, GOLD, prediction)
  assert (verdict.score, verdict.source, verdict.attempts) == (expected_score,
                                                               "exact_match_fallback", 3)
  assert len(backend.requests) == 3


def test_exceptions_from_the_completer_are_retried():
  calls = []

  def flaky(prompt):
    calls.append(prompt)
    if len(calls) == 1:
      raise ConnectionError("endpoint down")
    return "CORRECT"
  verdict = judge.LLMJudge(flaky, backoff_seconds=0.0)(QUESTION, GOLD, "the Bard")
  assert (verdict.score, verdict.attempts) == (1.0, 2)


def test_missing_prediction_is_zero_without_asking():
  llm_judge, backend = backend_judge([])
  assert llm_judge(QUESTION, GOLD, None).score == 0.0
  assert llm_judge(QUESTION, GOLD, "  ").source == "no_answer"
  assert backend.requests == []


def test_client_completer_asks_greedily():
  class FakeClient:
    def __init__(self):
      self.calls = []

    def chat(self, messages, **sampling):
      self.calls.append((messages, sampling))
      return type("Reply", (), {"text": "CORRECT"})()
  client = FakeClient()
  verdict = judge.LLMJudge(judge.client_completer(client))(QUESTION, GOLD, "Shakespeare")
  assert verdict.score == 1.0
  messages, sampling = client.calls[0]
  assert sampling == {"temperature": 0.0, "max_tokens": 256}
  assert messages[0]["content"] == judge.judge_prompt(QUESTION, GOLD, "Shakespeare")


class JudgeEndpoint(http_stub.StubServer):
  """A real HTTP chat-completions server on 127.0.0.1: replies from a script of
  (status, reply text) pairs; records each request body."""

  def __init__(self, script):
    self.script = list(script)

    def respond(path, body):
      status, text = self.script.pop(0)
      return status, http_stub.chat_reply(text)
    super().__init__(respond)
    self.url = self.base + "/v1"


def test_openai_judge_sends_the_paper_prompt_greedily_and_parses_the_verdict():
  endpoint = JudgeEndpoint([(200, "INCORRECT"), (503, ""), (200, "**CORRECT**")])
  try:
    llm_judge = judge.openai_judge(endpoint.url, "judge", backoff_seconds=0.0)
    first = llm_judge(QUESTION, GOLD, "Shakespeare")
    second = llm_judge(QUESTION, GOLD, "the Bard")  # a 503, retried by the client
  finally:
    endpoint.close()
  assert (first.score, first.source) == (0.0, "judge")
  assert (second.score, second.source, second.attempts) == (1.0, "judge", 1)
  body = endpoint.bodies[0]
  assert body["model"] == "judge" and body["temperature"] == 0.0 and body["max_tokens"] == 256
  assert body["messages"] == [{"role": "user",
                               "content": judge.judge_prompt(QUESTION, GOLD, "Shakespeare")}]


def test_openai_judge_with_the_endpoint_down_stops_instead_of_exact_match():
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
  llm_judge = judge.openai_judge(f"http://127.0.0.1:{port}/v1", "judge", max_retries=0,
                                 max_consecutive_failures=3, backoff_seconds=0.0)
  started = time.perf_counter()
  with pytest.raises(openai_client.EndpointUnavailable, match=f"127.0.0.1:{port}.*refused"):
    llm_judge(QUESTION, GOLD, "shakespeare")  # exact match would have scored 1
  assert time.perf_counter() - started < 5


def test_one_failed_call_falls_back_per_verdict_and_is_not_remembered():
  endpoint = JudgeEndpoint([(200, "maybe"), (200, "unsure"), (200, "hmm"), (200, "INCORRECT")])
  try:
    llm_judge = judge.openai_judge(endpoint.url, "judge", backoff_seconds=0.0)
    fallback = llm_judge(QUESTION, GOLD, "shakespeare")
    again = llm_judge(QUESTION, GOLD, "shakespeare")  # asked again, not a cached fallback
  finally:
    endpoint.close()
  assert (fallback.score, fallback.source, fallback.attempts) == (1.0, "exact_match_fallback", 3)
  assert (again.score, again.source) == (0.0, "judge")
  assert len(endpoint.bodies) == 4


def test_counts_tell_parsed_verdicts_from_fallbacks_and_failed_calls():
  # Over a real HTTP endpoint: a parsed verdict; then a 500 (every client retry), two
  # unparsable replies and the exact-match fallback; then no answer (no call).
  endpoint = JudgeEndpoint([(200, "CORRECT"), (500, ""), (500, ""), (200, "maybe"),
                            (200, "so-so")])
  try:
    llm_judge = judge.openai_judge(endpoint.url, "judge", backoff_seconds=0.0, max_retries=1,
                                   max_consecutive_failures=5)
    verdicts = [llm_judge(QUESTION, GOLD, "the Bard"), llm_judge(QUESTION, GOLD, "Marlowe"),
                llm_judge(QUESTION, GOLD, None)]
  finally:
    endpoint.close()
  assert [v.source for v in verdicts] == ["judge", "exact_match_fallback", "no_answer"]
  assert llm_judge.counts.to_json() == {
      "calls": 4, "parsed": 1, "unparsable": 2, "failed_calls": 1, "verdicts_judge": 1,
      "verdicts_exact_match_fallback": 1, "verdicts_no_answer": 1}
  # The choice (the default) rides on every request, in both of vLLM's spellings; the
  # prompt's two words.
  assert [body["guided_choice"] for body in endpoint.bodies] == [["CORRECT", "INCORRECT"]] * 5
  assert [body["structured_outputs"] for body in endpoint.bodies] == [
      {"choice": ["CORRECT", "INCORRECT"]}] * 5


def test_guided_choice_can_be_turned_off_and_is_checked():
  endpoint = JudgeEndpoint([(200, "INCORRECT")])
  try:
    llm_judge = judge.openai_judge(endpoint.url, "judge", guided_choice=False)
    assert llm_judge(QUESTION, GOLD, "Marlowe").source == "judge"
  finally:
    endpoint.close()
  assert "guided_choice" not in endpoint.bodies[0]
  assert "structured_outputs" not in endpoint.bodies[0]
  with pytest.raises(ValueError, match="guided_choice='yes'"):
    judge.openai_judge(endpoint.url, "judge", guided_choice="yes")
