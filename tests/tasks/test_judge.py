"""The LLM judge: prompt, reply parsing, retries, timeouts and the exact-match fallback."""
import concurrent.futures
import datetime
import email.utils
import json
import os
import socket
import time

import pytest

from tests import hosted_api_stub
from tests import http_stub
from whale_jax import typed_config
from whale_jax.sampling import openai_client
from whale_jax.sampling.api import Completion
from whale_jax.tasks import judge
from whale_jax.tasks import registry
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
  assert body["model"] == "judge" and body["temperature"] == 0.0
  assert body["max_completion_tokens"] == 256 and "max_tokens" not in body  # as WHALE's call
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
  # Retries: the client's one resend after a 500, and the judge's two re-asks.
  assert llm_judge.counts.to_json() == {
      "calls": 4, "parsed": 1, "unparsable": 2, "failed_calls": 1, "verdicts_judge": 1,
      "verdicts_exact_match_fallback": 1, "verdicts_no_answer": 1, "cache_hits": 0,
      "retries": 3, "rate_limited": 0, "server_errors": 2, "guided_choice_refusals": 0,
      "prompt_tokens": 0, "completion_tokens": 0, "constrained": "auto",
      "mode": "guided_choice"}
  # The choice (the default) rides on every request, in both of vLLM's spellings; the
  # prompt's two words.
  assert [body["guided_choice"] for body in endpoint.bodies] == [["CORRECT", "INCORRECT"]] * 5
  assert [body["structured_outputs"] for body in endpoint.bodies] == [
      {"choice": ["CORRECT", "INCORRECT"]}] * 5


def test_constrained_is_checked():
  for name, value in (("constrained", True), ("constrained", "yes"), ("max_concurrency", 0),
                      ("cache", "yes")):
    with pytest.raises(ValueError, match=f"{name}={value!r}"):
      judge.openai_judge("http://127.0.0.1:1/v1", "judge", **{name: value})


# Against a stub of a hosted OpenAI-style API (tests/hosted_api_stub.py): it refuses fields it
# does not know with a 400 naming them, rate-limits with Retry-After, fails with 500s.

def pairs(count, start=0):
  """count distinct (question, golden answers, prediction) requests; even ones correct."""
  return [(f"Question {i}?", [f"answer {i}", f"alias {i}"],
           f"answer {i}" if i % 2 == 0 else f"wrong {i}") for i in range(start, start + count)]


def expected_scores(requests):
  return [1.0 if prediction in golds else 0.0 for _, golds, prediction in requests]


def hosted_judge(stub, **options):
  return judge.openai_judge(stub.url, "gpt-5.4-mini", **{"backoff_seconds": 0.0, **options})


def test_auto_falls_back_to_free_text_on_the_400_once_and_records_the_mode(caplog):
  requests = pairs(16)
  with hosted_api_stub.HostedAPIStub(latency_seconds=0.01) as stub:
    llm_judge = hosted_judge(stub)  # constrained="auto", the default
    with caplog.at_level("WARNING"):
      verdicts = llm_judge.judge_many(requests)
  assert [v.score for v in verdicts] == expected_scores(requests)
  assert {v.source for v in verdicts} == {"judge"}
  refused = [body for body in stub.bodies if "guided_choice" in body]
  assert 1 <= len(refused) <= 16 and stub.statuses.count(400) == len(refused)
  free_text = [body for body in stub.bodies if "guided_choice" not in body]
  assert stub.answered == len(free_text) == 16
  assert not any("structured_outputs" in body for body in free_text)
  counts = llm_judge.counts.to_json()
  assert (counts["mode"], counts["constrained"]) == ("free_text", "auto")
  assert counts["guided_choice_refusals"] == len(refused) and counts["failed_calls"] == 0
  assert counts["verdicts_judge"] == 16 and counts["calls"] == 16
  warnings = [r for r in caplog.records if "free-text verdicts" in r.getMessage()]
  assert len(warnings) == 1 and "guided_choice" in warnings[0].getMessage()


def test_auto_keeps_the_constrained_choice_where_the_endpoint_takes_it():
  known = hosted_api_stub.KNOWN_FIELDS | {"guided_choice", "structured_outputs"}  # vLLM-like
  with hosted_api_stub.HostedAPIStub(known_fields=known) as stub:
    llm_judge = hosted_judge(stub)
    assert llm_judge(QUESTION, GOLD, "Shakespeare").score == 1.0
  (body,) = stub.bodies
  assert body["guided_choice"] == ["CORRECT", "INCORRECT"]
  assert llm_judge.counts.to_json()["mode"] == "guided_choice"


def test_always_against_a_refusing_endpoint_stops_with_what_to_change():
  with hosted_api_stub.HostedAPIStub() as stub:
    llm_judge = hosted_judge(stub, constrained="always")
    with pytest.raises(judge.GuidedChoiceRefused,
                       match=r"Unrecognized request arguments supplied: guided_choice, "
                             r"structured_outputs.*constrained='auto'"):
      llm_judge(QUESTION, GOLD, "shakespeare")  # exact match would have scored 1
  assert stub.statuses == [400]  # refused once, neither retried nor scored by exact match


def test_never_sends_no_guided_field():
  with hosted_api_stub.HostedAPIStub() as stub:
    llm_judge = hosted_judge(stub, constrained="never")
    verdicts = llm_judge.judge_many(pairs(4))
  assert [v.score for v in verdicts] == [1.0, 0.0, 1.0, 0.0]
  assert stub.statuses == [200] * 4
  assert not any(set(body) & {"guided_choice", "structured_outputs"} for body in stub.bodies)
  assert llm_judge.counts.to_json()["mode"] == "free_text"


@pytest.mark.parametrize("form", ["seconds", "http_date"])
def test_a_429_waits_what_retry_after_says(form):
  if form == "seconds":
    retry_after = "1"
  else:  # whole seconds: 2 s from now is a wait of more than 1 s
    retry_after = email.utils.formatdate(time.time() + 2, usegmt=True)
  with hosted_api_stub.HostedAPIStub(failures=[(429, {"Retry-After": retry_after})]) as stub:
    llm_judge = hosted_judge(stub, constrained="never")  # backoff 0: only Retry-After waits
    started = time.perf_counter()
    verdict = llm_judge(QUESTION, GOLD, "Marlowe")
    waited = time.perf_counter() - started
  print(f"Retry-After {retry_after!r}: the verdict took {waited:.2f} s")
  assert (verdict.score, verdict.source, verdict.attempts) == (0.0, "judge", 1)
  assert 0.95 <= waited < 4.0
  assert stub.statuses == [429, 200]
  counts = llm_judge.counts.to_json()
  assert (counts["rate_limited"], counts["retries"], counts["calls"]) == (1, 1, 1)


def test_retry_after_seconds_reads_both_forms():
  now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
  assert judge.retry_after_seconds("7") == 7.0
  assert judge.retry_after_seconds("Fri, 02 Jan 2026 03:04:35 GMT", now=now) == 30.0
  assert judge.retry_after_seconds("Fri, 02 Jan 2026 03:00:00 GMT", now=now) == 0.0  # past
  assert judge.retry_after_seconds("soon") is None and judge.retry_after_seconds(None) is None


def test_a_500_is_retried_and_usage_is_counted():
  with hosted_api_stub.HostedAPIStub(failures=[(500, {})]) as stub:
    llm_judge = hosted_judge(stub, constrained="never")
    verdict = llm_judge(QUESTION, GOLD, "the Bard")
  assert (verdict.score, verdict.source) == (0.0, "judge")
  assert stub.statuses == [500, 200]
  counts = llm_judge.counts.to_json()
  prompt_words = len(judge.judge_prompt(QUESTION, GOLD, "the Bard").split())
  assert (counts["server_errors"], counts["retries"], counts["failed_calls"]) == (1, 1, 0)
  assert (counts["prompt_tokens"], counts["completion_tokens"]) == (prompt_words, 1)


def test_every_retry_failing_falls_back_to_exact_match_counted_apart():
  with hosted_api_stub.HostedAPIStub(server_error_every=1) as stub:  # every request a 500
    llm_judge = hosted_judge(stub, constrained="never", max_retries=1, max_attempts=2,
                             max_consecutive_failures=10)
    verdicts = [llm_judge(QUESTION, GOLD, "shakespeare"), llm_judge(QUESTION, GOLD, "Marlowe")]
  assert [(v.score, v.source) for v in verdicts] == [(1.0, "exact_match_fallback"),
                                                     (0.0, "exact_match_fallback")]
  assert stub.statuses == [500] * 8  # 2 verdicts x 2 calls x (1 + 1 retry)
  counts = llm_judge.counts.to_json()
  assert (counts["verdicts_exact_match_fallback"], counts["verdicts_judge"]) == (2, 0)
  assert (counts["failed_calls"], counts["server_errors"], counts["retries"]) == (4, 8, 6)


def test_640_verdicts_with_64_in_flight_take_a_fraction_of_the_serial_time():
  requests = pairs(640)
  with hosted_api_stub.HostedAPIStub(latency_seconds=0.05) as stub:
    llm_judge = hosted_judge(stub, constrained="never", cache=False)
    started = time.perf_counter()
    verdicts = llm_judge.judge_many(requests)
    seconds = time.perf_counter() - started
  print(f"640 verdicts, 64 in flight, 50 ms per request: {seconds:.2f} s wall "
        f"(serial: {640 * 0.05:.0f} s); at most {stub.max_in_flight} in flight at the stub")
  assert [v.score for v in verdicts] == expected_scores(requests)
  assert stub.answered == 640
  assert 32 <= stub.max_in_flight <= 64
  assert seconds < 8.0


def test_a_second_judge_over_the_same_cache_folder_asks_nothing_judged(tmp_path):
  requests = pairs(40)
  options = dict(constrained="never", cache_dir=str(tmp_path), max_retries=0, max_attempts=1,
                 max_consecutive_failures=10)
  with hosted_api_stub.HostedAPIStub(failures=[(500, {})] * 2) as stub:
    first = hosted_judge(stub, **options).judge_many(requests)  # two 500s: two fallbacks
    asked_first = len(stub.bodies)
    second_judge = hosted_judge(stub, **options)
    second = second_judge.judge_many(requests)
    asked_second = stub.bodies[asked_first:]
    third_judge = hosted_judge(stub, **options)
    third = third_judge.judge_many(requests)
    asked_third = stub.bodies[asked_first + len(asked_second):]
  fallbacks = {requests[i][2] for i, v in enumerate(first) if v.source != "judge"}
  print(f"calls at the stub: first judge {asked_first}, second (same cache folder) "
        f"{len(asked_second)}, third {len(asked_third)}")
  assert asked_first == 40 and len(fallbacks) == 2
  # Only the two fallbacks are asked again; the 38 judged verdicts come from the file.
  assert {body["messages"][0]["content"].split("Predicted answer: ")[1].split(" Respond")[0]
          for body in asked_second} == fallbacks and len(asked_second) == 2
  assert second_judge.counts.to_json()["cache_hits"] == 38
  assert asked_third == [] and third_judge.counts.to_json()["cache_hits"] == 40
  assert [v.score for v in second] == [v.score for v in third] == expected_scores(requests)
  with open(tmp_path / judge.VerdictCache.FILE_NAME, encoding="utf-8") as file:
    lines = file.read().splitlines()  # 38 lines written by 38 threads, then 2
  assert len(lines) == 40 and len({json.loads(line)["key"] for line in lines}) == 40


def test_a_line_cut_off_by_a_kill_is_skipped_and_the_next_starts_on_its_own(tmp_path):
  identity = {"model": "gpt-5.4-mini", "constrained": "never", "max_tokens": 256}
  cache = judge.VerdictCache(tmp_path, identity)
  cache.put(QUESTION, GOLD, "Shakespeare", 1.0)
  cache.close()
  with open(tmp_path / judge.VerdictCache.FILE_NAME, "ab") as file:
    file.write(b'{"key": "0123abc", "sco')  # the process was killed mid-line
  resumed = judge.VerdictCache(tmp_path, identity)
  assert resumed.skipped_lines == 1 and resumed.get(QUESTION, GOLD, "Shakespeare") == 1.0
  resumed.put(QUESTION, GOLD, "Marlowe", 0.0)
  resumed.close()
  again = judge.VerdictCache(tmp_path, identity)
  assert again.skipped_lines == 1 and len(again) == 2
  assert again.get(QUESTION, GOLD, "Marlowe") == 0.0
  # Another model, constrained setting or reply budget is another request.
  for changed in ({"model": "other"}, {"constrained": "auto"}, {"max_tokens": 8}):
    assert judge.VerdictCache(tmp_path, {**identity, **changed}).get(
        QUESTION, GOLD, "Marlowe") is None


def test_a_run_caches_its_judges_verdicts_in_its_workdir(tmp_path):
  from whale_jax.algorithms import builders  # pylint: disable=import-outside-toplevel
  with hosted_api_stub.HostedAPIStub() as stub:
    config = {"name": "synthetic_qa", "seed": 0, "verifier": "judge",
              "split_sizes": {"weight": 0, "harness": 0, "validation": 0, "test": 1},
              "judge": {"base_url": stub.url, "model": "gpt-5.4-mini", "backoff_seconds": 0.0,
                        "constrained": "never"}}
    section = typed_config.read(registry.DomainSection, config, "config.domain")
    domain = builders.build_domain(builders.with_judge_cache(section, str(tmp_path)))
    (instance,) = domain.splits()["test"]
    assert domain.verify(instance, "<answer>not it</answer>", None) == 0.0
  assert os.path.exists(tmp_path / "judge_cache" / judge.VerdictCache.FILE_NAME)
  assert builders.with_judge_cache(section, str(tmp_path)).options["judge"]["cache_dir"] == str(
      tmp_path / "judge_cache")
  for judge_section in ({"cache": False}, {"cache_dir": str(tmp_path / "elsewhere")}):
    changed = typed_config.read(registry.DomainSection, {
        **config, "judge": {**config["judge"], **judge_section}}, "config.domain")
    assert builders.with_judge_cache(changed, str(tmp_path)) == changed
  assert builders.with_judge_cache(section, "gs://bucket/run") == section
  config["judge"]["constrained"] = "sometimes"
  with pytest.raises(typed_config.ConfigError, match=r"config\.domain\.judge\.constrained"):
    typed_config.read(registry.DomainSection, config, "config.domain")
