"""The agentic proposer in a real search: a scripted policy greps the traces for a planted
failure, reads the failing candidate, prototypes a fix with `run` in the sandboxed runtime and
submits a patch that the search evaluates and accepts."""
import json
import re

import pytest

from tests.search import fakes
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import SamplingParams
from whale_jax.search import agent_tools
from whale_jax.search import agentic_proposer
from whale_jax.search import evaluation
from whale_jax.search import meta_harness
from whale_jax.search import steering
from whale_jax.search.agentic_proposer import AgentReply
from whale_jax.search.tool_calls import ToolCall
from whale_jax.tokenization import load_tokenizer

PLANTED = "PLANTED-FAILURE-7f3a: the retriever returned one passage"


def planting_model(instances, target_question):
  """fakes.qa_model, whose answer to one question carries the PLANTED failure string."""
  base = fakes.qa_model(instances)

  def reply(prompt):
    text = base(prompt)
    question = re.findall(r"Question: (.*?)\n", prompt)[-1]
    if question == target_question and "<answer>" in text:
      text += f" ({PLANTED})"
    return text
  return reply


class ScriptedPolicy:
  """A test double of a tool-calling model: each call depends on the previous tool result.

  grep the planted string -> read the harness of the candidate whose trace holds it -> run a
  patch raising its TOPK on two tasks -> submit the patch if the run scored above zero.
  """

  def __init__(self):
    self.step, self.seen = 0, []

  def complete(self, messages, tools, **sampling):
    last = messages[-1]["content"]
    self.seen.append(last)
    names = {tool["function"]["name"] for tool in tools}
    assert {"list", "read", "grep", "run", "diff", "check", "submit"} <= names
    if self.step == 0:
      call = ("grep", {"pattern": "planted-failure-7f3a"})
    elif self.step == 1:
      path = re.search(r"^(candidates/(c\d+)/traces/\S+?\.txt):\d+:", last, re.M)
      assert path, last
      self.trace_path, self.candidate = path.group(1), path.group(2)
      call = ("read", {"path": f"candidates/{self.candidate}/harness.py"})
    elif self.step == 2:
      line = re.search(r"^TOPK = (\d+)$", last, re.M)
      assert line and line.group(1) == "1", last
      self.patch = f"<<<<<<< SEARCH\nTOPK = 1\n=======\nTOPK = 3\n>>>>>>> REPLACE\n"
      call = ("run", {"patch": self.patch, "num_tasks": 2})
    else:
      score = re.search(r"mean score ([\d.]+)", last)
      assert score and float(score.group(1)) > 0, last
      call = ("submit", {"patch": self.patch, "hypothesis": "One passage rarely holds the "
                         "answer; retrieving three gives the model the evidence."})
    self.step += 1
    name, arguments = call
    return AgentReply({"role": "assistant", "content": json.dumps(call)},
                      (ToolCall(name, arguments),), json.dumps(call), 100, 20)


@pytest.fixture(scope="module")
def domain():
  return tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)


def test_scripted_policy_greps_reads_runs_and_submits_a_patch_the_search_accepts(domain,
                                                                                 tmp_path):
  splits = domain.splits()
  instances = splits["harness"]
  target = instances[3]
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, planting_model(sum(splits.values(), []),
                                                      target.public["question"]))
  policy = ScriptedPolicy()
  with HarnessRuntime(backend, tokenizer, num_workers=2, timeout_seconds=30) as runtime:
    evaluate = evaluation.make_evaluate(runtime, domain, SamplingParams(max_tokens=512),
                                        weights_id="w0")
    proposer = agentic_proposer.AgenticProposer(
        policy, tmp_path / "archive", domain, instances,
        runner=agentic_proposer.SandboxRunner(evaluate, instances),
        budgets=agent_tools.AgentBudgets(max_steps=6, max_runs=1, max_run_tasks=2))
    result = meta_harness.search(Harness(domain.seed_harness, origin="seed"), evaluate,
                                 proposer, tmp_path / "archive", domain=domain,
                                 instances=instances, iterations=2, candidates_per_iteration=1)
  archive = result.archive
  seed, candidate = archive.candidates
  # The grep found the one episode the failure was planted in: the target task's trace.
  assert policy.trace_path == f"candidates/c0000/traces/{target.id}.txt"
  assert PLANTED in archive.trajectories("c0000")[3].calls[-1].completions[0].text
  assert policy.candidate == "c0000"
  # The search evaluated the submitted patch and accepted it.
  assert candidate.status == "evaluated" and candidate.origin == "patch"
  assert "TOPK = 3" in archive.source(candidate.id)
  assert candidate.success > seed.success == 0.0
  assert result.accepted_id == candidate.id
  assert candidate.proposer == "agentic" and "three" in candidate.hypothesis
  # The run prototyped in the real runtime: two episodes, traced, counted.
  session = json.loads(archive.raw_output(candidate.id))
  assert session["runs"][0]["task_ids"] == [instances[0].id, instances[1].id]
  assert session["rollouts"] == 2 == proposer.rollouts
  costs = agentic_proposer.session_costs(tmp_path / "archive")
  assert (costs["sessions"], costs["rollouts"], costs["prompt_tokens"]) == (1, 2, 400)
  assert "## tool search" in policy.seen[3]   # the run returned its episodes' tool calls
  # The conversation and what was read are saved with the candidate.
  assert [m["role"] for m in session["messages"]][:2] == ["system", "user"]
  assert [e["tool"] for e in session["events"]] == ["grep", "read", "run", "submit"]
  assert session["files_read"] == ["candidates/c0000/harness.py"]
  assert session["reads"][0]["files"] == [policy.trace_path]
  assert session["prompt_tokens"] == 400 and session["completion_tokens"] == 80
  assert candidate.prompt_tokens == 400 and result.proposer_prompt_tokens == 400
  # The steering file's hash is recorded with the session and the proposer's config.
  expected = steering.load_instructions(domain)
  assert session["instructions"]["hash"] == expected.hash == proposer.config()[
      "instructions"]["hash"] == candidate.instruction_hash
  assert candidate.instruction_version == "agentic-1"
  with open(domain.instructions, encoding="utf-8") as file:
    assert session["messages"][0]["content"].startswith(file.read().rstrip())


class FailsFirstCall(ScriptedPolicy):
  """The scripted policy behind an endpoint whose first reply never comes."""

  def __init__(self):
    super().__init__()
    self.calls = 0

  def complete(self, messages, tools, **sampling):
    self.calls += 1
    if self.calls == 1:
      raise ConnectionError("connection reset by peer")
    return super().complete(messages, tools, **sampling)


def test_a_session_without_a_reply_is_a_failed_call_and_a_resumed_search_runs_it_again(
    domain, tmp_path):
  splits = domain.splits()
  instances = splits["harness"]
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, planting_model(sum(splits.values(), []),
                                                      instances[3].public["question"]))
  policy = FailsFirstCall()
  with HarnessRuntime(backend, tokenizer, num_workers=2, timeout_seconds=30) as runtime:
    evaluate = evaluation.make_evaluate(runtime, domain, SamplingParams(max_tokens=512),
                                        weights_id="w0")

    def search():
      proposer = agentic_proposer.AgenticProposer(
          policy, tmp_path / "archive", domain, instances,
          runner=agentic_proposer.SandboxRunner(evaluate, instances),
          budgets=agent_tools.AgentBudgets(max_steps=6, max_runs=1, max_run_tasks=2))
      return meta_harness.search(Harness(domain.seed_harness, origin="seed"), evaluate,
                                 proposer, tmp_path / "archive", domain=domain,
                                 instances=instances, iterations=2,
                                 candidates_per_iteration=1)
    first = search()
    # The failed session is counted, its transcript kept, and nothing of it archived.
    assert [c.id for c in first.archive.candidates] == ["c0000"]
    assert (first.failed_proposer_calls, first.missing_proposals) == (1, 1)
    session = json.load(open(tmp_path / "archive" / "agent_sessions" / "iteration_002" /
                             "session_00.json"))
    assert session["stop_reason"] == "client_error" and "reset by peer" in session["error"]
    resumed = search()
  # The resumed search ran the session again (the policy's four steps) and accepted its patch.
  assert policy.calls == 1 + 4
  seed, candidate = resumed.archive.candidates
  assert candidate.status == "evaluated" and "TOPK = 3" in resumed.archive.source(candidate.id)
  assert resumed.missing_proposals == 0 and resumed.accepted_id == candidate.id
