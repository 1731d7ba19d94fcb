"""The agentic loop over its chat backends: the in-process client (chat template + <tool_call>
parsing) with scripted replies and with the tiny model, and an OpenAI-compatible HTTP
endpoint. Malformed calls, unknown tools, empty submissions and over-budget loops are each
answered and recorded, and the search goes on."""
import dataclasses
import hashlib
import json

import pytest

from tests import http_stub
from tests.search import fakes
from tests.serve import server_process
from tests.sampling import tiny_model
from whale_jax import seeds
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.search import agent_tools
from whale_jax.search import agentic_proposer
from whale_jax.search import meta_harness
from whale_jax.search import steering
from whale_jax.search import tool_calls
from whale_jax.tokenization import load_tokenizer

PATCH = "<<<<<<< SEARCH\nTOPK = 1\n=======\nTOPK = 3\n>>>>>>> REPLACE\n"


@pytest.fixture(scope="module")
def domain():
  return tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)


def _search(domain, archive_dir, proposer, iterations):
  return meta_harness.search(Harness(domain.seed_harness, origin="seed"), fakes.FakeEvaluate(),
                             proposer, archive_dir, domain=domain,
                             instances=domain.splits()["harness"], iterations=iterations,
                             candidates_per_iteration=1, weights_id="w0")


def test_parse_tool_calls_reads_both_qwen_formats_and_reports_broken_ones():
  text = ('<think>maybe <tool_call>{"name": "no"}</tool_call></think>Let me look.\n'
          '<tool_call>\n{"name": "read", "arguments": {"path": "task.md"}}\n</tool_call>\n'
          '<tool_call>\n<function=grep>\n<parameter=pattern>\nTraceback (most\n</parameter>\n'
          '<parameter=path>\ncandidates\n</parameter>\n</function>\n</tool_call>\n'
          '<tool_call>{"name": "list", "arguments": {"path": </tool_call>\n'
          '<tool_call>{"arguments": {}}</tool_call>\n'
          '<tool_call><function=run><parameter=num_tasks>2</parameter></function>')
  read, grep, broken, nameless, unclosed = tool_calls.parse_tool_calls(text)
  assert (read.name, read.arguments, read.error) == ("read", {"path": "task.md"}, "")
  assert (grep.name, grep.arguments) == ("grep", {"pattern": "Traceback (most",
                                                  "path": "candidates"})
  assert broken.name == "" and "not valid JSON" in broken.error
  assert "no \"name\"" in nameless.error
  assert (unclosed.name, unclosed.arguments) == ("run", {"num_tasks": 2})
  assert tool_calls.parse_tool_calls("no calls here") == []
  call = tool_calls.from_name_and_arguments("read", '{"path": 3')
  assert call.name == "read" and "not valid JSON" in call.error


class Replies:
  """Scripted model text for an in-process backend; records the prompts it was shown."""

  def __init__(self, replies, then=None):
    self.replies, self.then, self.prompts = list(replies), then, []

  def __call__(self, prompt):
    self.prompts.append(prompt)
    return self.replies.pop(0) if self.replies else self.then


def _call(name, arguments):
  return tool_calls.render_tool_call(name, arguments)


def test_in_process_client_handles_each_mistake_and_the_search_accepts_the_submission(
    domain, tmp_path):
  tokenizer = load_tokenizer("byte")
  script = Replies([
      "I will think about it first.",                                # no tool call
      '<tool_call>{"name": "read", "arguments": {"path": </tool_call>',  # malformed
      _call("explode", {}),                                          # unknown tool
      "<tool_call><function=submit><parameter=hypothesis>x</parameter></function>"
      "</tool_call>",                                                # empty submission
      "<tool_call>\n<function=read>\n<parameter=path>\ncandidates/c0000/harness.py\n"
      "</parameter>\n</function>\n</tool_call>",                     # Qwen3.5 form
      _call("submit", {"patch": PATCH, "hypothesis": "three passages"}),
  ], then=_call("list", {}))                       # iteration 3: loops until the budget
  client = agentic_proposer.InProcessToolClient(
      ScriptedBackend(tokenizer, script), tokenizer, SamplingParams(max_tokens=4096))
  proposer = agentic_proposer.AgenticProposer(
      client, tmp_path / "archive", domain, domain.splits()["harness"],
      budgets=agent_tools.AgentBudgets(max_steps=6))
  result = _search(domain, tmp_path / "archive", proposer, iterations=3)
  seed, submitted, looped = result.archive.candidates
  first, second = proposer.sessions
  assert first["counts"] == {"no_tool_call": 1, "malformed": 1, "unknown_tool": 1,
                             "bad_arguments": 0, "refused": 0, "empty_submission": 1}
  tool_results = [m["content"] for m in first["messages"] if m["role"] == "tool"]
  assert "malformed tool call" in tool_results[0]
  assert "Unknown tool 'explode'" in tool_results[1]
  assert "this call had neither" in tool_results[2]
  assert "TOPK = 1" in tool_results[3]
  assert first["messages"][3]["content"] == agentic_proposer.NO_TOOL_CALL
  # The model was shown the tools through the chat template, and its own words came back.
  assert '"name": "grep"' in script.prompts[0] and "<|im_start|>assistant" in script.prompts[0]
  assert "I will think about it first." in script.prompts[1]
  assert submitted.status == "evaluated" and result.accepted_id == submitted.id
  assert submitted.prompt_tokens == first["prompt_tokens"] == sum(
      len(tokenizer.encode(p)) for p in script.prompts[:6])
  # Iteration 3 never submits: the step budget ends it; the search records it and goes on.
  assert second["steps"] == 6 and not second["submitted"]
  assert "step budget" in second["stop_reason"]
  assert looped.status == "rejected" and looped.reasons[0]["code"] == "proposer_error"
  assert "step budget" in looped.reasons[0]["message"]
  assert result.iterations == 3


def test_token_budget_ends_a_session(domain, tmp_path):
  tokenizer = load_tokenizer("byte")
  client = agentic_proposer.InProcessToolClient(
      ScriptedBackend(tokenizer, _call("list", {})), tokenizer, SamplingParams(max_tokens=64))
  proposer = agentic_proposer.AgenticProposer(
      client, tmp_path / "archive", domain, domain.splits()["harness"],
      budgets=agent_tools.AgentBudgets(max_steps=50, max_tokens=20_000))
  result = _search(domain, tmp_path / "archive", proposer, iterations=2)
  session, = proposer.sessions
  assert "token budget" in session["stop_reason"] and 1 < session["steps"] < 50
  assert session["prompt_tokens"] + session["completion_tokens"] >= 20_000
  assert result.archive.candidates[1].reasons[0]["code"] == "proposer_error"


SHORT_INSTRUCTIONS = "# Improve the harness (version test-1)\nCall tools; submit a patch.\n"


@pytest.mark.slow
def test_in_process_tiny_model_runs_the_loop_and_the_search_goes_on(domain, tmp_path):
  """Random weights write no valid tool call: every reply is answered, recorded, and the
  session ends at its budget; the search records the proposal and continues."""
  path = tmp_path / "short.md"
  path.write_text(SHORT_INSTRUCTIONS)
  config = dataclasses.replace(tiny_model.CONFIG, max_position_embeddings=8192)
  with Sampler(config, tiny_model.params(seed=1), tokenizer=tiny_model.TOKENIZER, max_slots=1,
               steps_per_call=tiny_model.STEPS_PER_CALL, max_cache_length=8192) as sampler:
    client = agentic_proposer.InProcessToolClient(
        sampler, tiny_model.TOKENIZER, SamplingParams(max_tokens=12, temperature=1.0))
    proposer = agentic_proposer.AgenticProposer(
        client, tmp_path / "archive", domain, domain.splits()["harness"],
        budgets=agent_tools.AgentBudgets(max_steps=2), instructions=steering.load_file(path))
    result = _search(domain, tmp_path / "archive", proposer, iterations=3)
  first, second = proposer.sessions
  for session in (first, second):
    assert session["steps"] == 2 and not session["submitted"]
    assert session["counts"]["no_tool_call"] + session["counts"]["malformed"] >= 2
    assert 0 < session["completion_tokens"] <= 2 * 12
  assert first["instructions"]["version"] == "test-1"
  assert [c.status for c in result.archive.candidates] == ["evaluated", "rejected", "rejected"]
  assert result.iterations == 3


class StubEndpoint(http_stub.StubServer):
  """An OpenAI-compatible /v1/chat/completions on 127.0.0.1 replaying scripted messages."""

  def __init__(self, messages):
    self.messages = list(messages)

    def respond(path, body):
      if path != "/v1/chat/completions":
        return 404, None
      message = self.messages.pop(0) if self.messages else {"content": "done?"}
      return 200, http_stub.chat_reply(**{"content": None, **message}, usage={
          "prompt_tokens": 50, "completion_tokens": 5})
    super().__init__(respond)
    self.url = self.base + "/v1"


def _function_call(call_id, name, arguments):
  return {"tool_calls": [{"id": call_id, "type": "function", "function": {
      "name": name, "arguments": arguments}}]}


def test_openai_endpoint_with_tools(domain, tmp_path):
  stub = StubEndpoint([
      _function_call("a", "read", '{"path": "task.md"'),                   # malformed
      _function_call("b", "rm_rf", "{}"),                                  # unknown tool
      _function_call("c", "submit", json.dumps({"patch": "  ", "hypothesis": "h"})),  # empty
      {"content": _call("grep", {"pattern": "TOPK"})},                     # text form
      _function_call("d", "submit", json.dumps({"patch": PATCH, "hypothesis": "three"})),
  ])
  try:
    client = agentic_proposer.OpenAIToolClient(stub.url, "proposer", max_retries=0)
    proposer = agentic_proposer.AgenticProposer(
        client, tmp_path / "archive", domain, domain.splits()["harness"],
        budgets=agent_tools.AgentBudgets(max_steps=8), sampling={"temperature": 0.7})
    result = _search(domain, tmp_path / "archive", proposer, iterations=2)
  finally:
    stub.close()
  session, = proposer.sessions
  assert session["counts"]["malformed"] == 1 and session["counts"]["unknown_tool"] == 1
  assert session["counts"]["empty_submission"] == 1
  first = stub.bodies[0]
  assert {t["function"]["name"] for t in first["tools"]} == set(agent_tools.TOOL_NAMES) - {
      "run"}
  assert first["temperature"] == 0.7 and first["model"] == "proposer"
  second = stub.bodies[1]["messages"]
  assert second[-2]["tool_calls"][0]["id"] == "a"
  assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "a"
  assert "not valid JSON" in second[-1]["content"]
  grep_result = stub.bodies[4]["messages"][-1]
  assert grep_result["role"] == "tool" and "TOPK = 1" in grep_result["content"]
  candidate = result.archive.candidates[1]
  assert candidate.status == "evaluated" and result.accepted_id == candidate.id
  assert candidate.prompt_tokens == 5 * 50 and candidate.completion_tokens == 5 * 5


def test_an_endpoint_that_fails_is_recorded_and_the_search_goes_on(domain, tmp_path):
  client = agentic_proposer.OpenAIToolClient("http://127.0.0.1:9/v1", "proposer",
                                             max_retries=1, sleep=lambda seconds: None)
  proposer = agentic_proposer.AgenticProposer(client, tmp_path / "archive", domain,
                                              domain.splits()["harness"])
  result = _search(domain, tmp_path / "archive", proposer, iterations=3)
  # Each session's calls got no reply: two failed calls, counted and logged, nothing archived.
  assert [c.id for c in result.archive.candidates] == ["c0000"]
  assert (result.failed_proposer_calls, result.missing_proposals) == (2, 2)
  saved = json.loads((tmp_path / "archive" / "iterations" / "iteration_002" /
                      "proposals.json").read_text())
  assert saved["proposals"] == [None] and "127.0.0.1:9" in json.dumps(saved["failed_calls"])


@pytest.mark.slow
def test_whale_jax_serve_endpoint_end_to_end(domain, tmp_path):
  """The loop against a real `python -m whale_jax.serve` process (tiny random model)."""
  flags = ["--model=preset:qwen3_5_tiny", "--tokenizer=byte", "--vocab_size=267",
           "--max_slots=2", "--max_cache_length=8192"]
  with server_process.started(flags, wait_seconds=240) as (url, _):
    path = tmp_path / "short.md"
    path.write_text(SHORT_INSTRUCTIONS)
    client = agentic_proposer.OpenAIToolClient(url, "qwen3_5_tiny", max_retries=1)
    proposer = agentic_proposer.AgenticProposer(
        client, tmp_path / "archive", domain, domain.splits()["harness"],
        budgets=agent_tools.AgentBudgets(max_steps=2), sampling={"max_tokens": 12},
        instructions=steering.load_file(path))
    result = _search(domain, tmp_path / "archive", proposer, iterations=2)
  session, = proposer.sessions
  assert session["steps"] == 2 and not session["submitted"], session["error"]
  assert 0 < session["completion_tokens"] and session["prompt_tokens"] > 1000
  assert result.archive.candidates[1].reasons[0]["code"] == "proposer_error"


def test_each_step_sends_its_own_derived_seed(domain, tmp_path):
  stub = StubEndpoint([{"content": _call("list", {})}] * 3)
  try:
    client = agentic_proposer.OpenAIToolClient(stub.url, "proposer", max_retries=0)
    proposer = agentic_proposer.AgenticProposer(
        client, tmp_path / "archive", domain, domain.splits()["harness"], seed=11,
        budgets=agent_tools.AgentBudgets(max_steps=3))
    _search(domain, tmp_path / "archive", proposer, iterations=2)
  finally:
    stub.close()
  sent = [request["seed"] for request in stub.bodies]
  expected = []
  for step in range(3):
    text = json.dumps(["whale_jax.seed/1", 11, "proposer_call", 2, ["agentic", 0, step]],
                      separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).digest()
    expected.append(int.from_bytes(digest[:8], "little") & (2**63 - 1))
  assert sent == expected == [seeds.derive_seed(11, "proposer_call", 2, ("agentic", 0, s))
                              for s in range(3)]
