"""The agentic proposer's tools and archive view, one property each."""
import pytest

from tests.search import fakes
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.search import agent_tools
from whale_jax.search import agentic_proposer
from whale_jax.search import archive_view
from whale_jax.search import evaluation
from whale_jax.search import meta_harness
from whale_jax.search.proposal import Proposal
from whale_jax.search.tool_calls import ToolCall

TOPK_PATCH = "<<<<<<< SEARCH\nTOPK = 1\n=======\nTOPK = 3\n>>>>>>> REPLACE\n"
REMINDER_PATCH = ("<<<<<<< SEARCH\nTOPK = 1\n=======\nTOPK = 1\nNOTE = 'only the short "
                  "entity'\n>>>>>>> REPLACE\n")


class Batches:
  name = "batches"

  def __init__(self, batches):
    self.batches = list(batches)

  def propose(self, context, n):
    return self.batches.pop(0)


@pytest.fixture(scope="module")
def domain():
  return tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)


@pytest.fixture()
def searched(domain, tmp_path):
  """c0000 seed (0.0), c0001 TOPK=3 (best), c0002 rejected (not_found), c0003 reminder."""
  instances = domain.splits()["harness"]
  proposer = Batches([[Proposal("patch", TOPK_PATCH, hypothesis="more passages"),
                       Proposal("patch", "<<<<<<< SEARCH\nTOPK = 9\n=======\nTOPK = 2\n"
                                ">>>>>>> REPLACE\n", hypothesis="typo"),
                       Proposal("patch", REMINDER_PATCH, hypothesis="remind")]])
  result = meta_harness.search(Harness(domain.seed_harness, origin="seed"), fakes.FakeEvaluate(),
                               proposer, tmp_path / "archive", domain=domain,
                               instances=instances, iterations=2, candidates_per_iteration=3,
                               weights_id="w0")
  view = archive_view.build_view(result.archive, domain.name, domain.description, instances,
                                 incumbent_id="c0000")
  return result, view, instances


def _tools(searched, domain, **budgets):
  result, view, instances = searched
  evaluate = fakes.FakeEvaluate()
  tools = agent_tools.AgentTools(
      view, "c0000", result.archive.source("c0000"),
      agentic_proposer.SandboxRunner(evaluate, instances), [i.id for i in instances],
      agent_tools.AgentBudgets(**budgets), domain.allowed_imports,
      known_hashes=result.archive.known_hashes())
  return tools, evaluate


def test_view_lays_out_candidates_ledger_and_frontier(searched):
  result, view, instances = searched
  assert view.list("") == ["README.md", "candidates/", "frontier.md", "ledger.md", "scores.md",
                           "task.md", "tasks/"]
  assert view.list("candidates/c0001") == ["candidate.md", "harness.py", "scores.jsonl",
                                           "traces/"]
  assert len(view.list("candidates/c0000/traces")) == len(instances)
  assert "candidates/c0002/harness.py" not in view.files         # nothing could be built
  frontier = view.read("frontier.md")
  success = {c.id: c.success for c in result.archive.evaluated()}
  assert set(success) == {"c0000", "c0001", "c0003"} and success["c0000"] == 0.0
  best = max(success, key=success.get)
  rows = [line.split(" | ")[0] for line in frontier.splitlines() if line.startswith("| c")]
  assert rows == [f"| {best}"]
  ledger = view.read("ledger.md")
  assert "c0002 (from c0000, iteration 2): rejected: [not_found]" in ledger
  assert "c0001" not in ledger and "c0003" not in ledger    # both beat their parent c0000
  assert "hypothesis: remind" in view.read("candidates/c0003/candidate.md")


def test_browsing_tools_answer_mistakes_with_errors(searched, domain):
  tools, _ = _tools(searched, domain, max_result_chars=500)
  assert tools.call("read", {"path": "../../../etc/passwd"}).kind == "bad_arguments"
  assert "no file 'nope.md'" in tools.call("read", {"path": "nope.md"}).content
  assert tools.call("list", {"path": "candidates/c9999"}).ok is False
  page = tools.call("read", {"path": "candidates/c0000/harness.py", "limit": 40})
  source = searched[0].archive.source("c0000")
  assert page.content.startswith(source[:40]) and f"offset=40" in page.content
  assert tools.call("read", {"path": "candidates/c0000/harness.py", "offset": 40,
                             "limit": 40}).content.startswith(source[40:80])
  long = tools.call("read", {"path": "candidates/c0000/harness.py"})
  assert len(long.content) < 600 and "cut at 500" in long.content
  assert tools.call("grep", {"pattern": "zzz-not-there"}).content == "no line holds " \
      "'zzz-not-there'."
  assert tools.call("grep", {"pattern": ""}).ok is False
  assert tools.call("diff", {}).ok is False                       # no draft yet
  unknown = tools.call("read", {"path": "task.md", "mode": "rb"})
  assert unknown.kind == "bad_arguments" and "'mode'" in unknown.content
  assert tools.call("submit", {"patch": TOPK_PATCH}).kind == "bad_arguments"   # no hypothesis
  assert [r["path"] for r in tools.reads if r["tool"] == "read"] == [
      "candidates/c0000/harness.py"] * 3


def test_check_diff_run_and_submit(searched, domain):
  tools, evaluate = _tools(searched, domain, max_runs=1, max_run_tasks=3)
  checked = tools.call("check", {"patch": TOPK_PATCH.replace("TOPK = 3", "TOPK = 4")})
  assert checked.ok and "drafts/1.py" in checked.content
  diff = tools.call("diff", {}).content
  assert "-TOPK = 1" in diff and "+TOPK = 4" in diff
  assert "TOPK = 4" in tools.call("read", {"path": "drafts/1.py"}).content
  duplicate = tools.call("check", {"patch": TOPK_PATCH})         # c0001's program
  assert not duplicate.ok and "[duplicate]" in duplicate.content
  unchanged = tools.call("check", {"program": searched[0].archive.source("c0000")})
  assert not unchanged.ok and "[no_change]" in unchanged.content
  bad = tools.call("check", {"program": "def run(task, llm, tools):\n  import socket\n"})
  assert not bad.ok and "[static_check]" in bad.content
  assert tools.call("run", {"patch": TOPK_PATCH, "task_ids": ["synthetic:nope"]}).ok is False
  ran = tools.call("run", {"patch": TOPK_PATCH.replace("TOPK = 3", "TOPK = 4"),
                           "num_tasks": 10})
  task_ids = [i.id for i in searched[2]][:3]                     # capped at max_run_tasks
  assert ran.ok and evaluate.calls[0][1] == task_ids
  expected = [fakes.feature_score("TOPK = 4\n", t, k) for t, k in zip(task_ids,
                                                                    evaluate.calls[0][2])]
  assert f"mean score {sum(expected) / 3:.3f}" in ran.content
  assert tools.rollouts == 3
  over = tools.call("run", {"patch": TOPK_PATCH})
  assert not over.ok and "run budget is spent" in over.content and len(evaluate.calls) == 1
  assert tools.call("submit", {"patch": TOPK_PATCH, "hypothesis": "h"}).ok is False  # duplicate
  assert tools.submission is None
  done = tools.call("submit", {"patch": TOPK_PATCH.replace("TOPK = 3", "TOPK = 4"),
                               "hypothesis": "  four\n passages "})
  assert done.ok and tools.submission.hypothesis == "four passages"
  assert tools.submission.kind == "patch"


def test_budgets_are_validated():
  with pytest.raises(ValueError, match="AgentBudgets.max_steps=0"):
    agent_tools.AgentBudgets(max_steps=0)
  with pytest.raises(ValueError, match="search_answers='all'"):
    archive_view.check_search_answers("all")


class RunThenSubmit:
  def __init__(self):
    self.step = 0

  def complete(self, messages, tools, **sampling):
    self.step += 1
    if self.step == 1:
      call = ToolCall("run", {"patch": TOPK_PATCH, "num_tasks": 2})
    else:
      call = ToolCall("submit", {"patch": TOPK_PATCH, "hypothesis": "more passages"})
    return agentic_proposer.AgentReply({"role": "assistant", "content": call.name}, (call,))


def test_an_unbound_proposer_is_bound_to_each_search(domain, tmp_path):
  instances = domain.splits()["harness"]
  unbound = agentic_proposer.AgenticProposer(RunThenSubmit(), None, domain, None,
                                             use_run_tool=True)
  with pytest.raises(RuntimeError, match="for_search"):
    unbound.propose(None, 1)
  evaluate = fakes.FakeEvaluate()
  bound = unbound.for_search(tmp_path / "archive", evaluate, instances, seed=5)
  result = meta_harness.search(Harness(domain.seed_harness, origin="seed"), evaluate, bound,
                               tmp_path / "archive", domain=domain, instances=instances,
                               iterations=2, candidates_per_iteration=1, weights_id="w0",
                               seed=5)
  assert result.archive.candidates[1].status == "evaluated"
  run_call = evaluate.calls[1]          # after the incoming harness's evaluation
  assert run_call[1] == [i.id for i in instances[:2]]
  assert run_call[2] == [evaluation.sample_key(5, i.id) for i in instances[:2]]
  assert bound.rollouts == 2 and unbound.rollouts == 0 and unbound.archive_dir is None


def test_a_failing_runtime_under_run_ends_the_session_with_a_recorded_error(domain, tmp_path):
  instances = domain.splits()["harness"]

  def broken_evaluate(harness, task_instances, keys):
    if harness.source != domain.seed_harness:
      raise RuntimeError("HarnessRuntime.submit() after close()")
    return fakes.FakeEvaluate()(harness, task_instances, keys)

  proposer = agentic_proposer.AgenticProposer(
      RunThenSubmit(), None, domain, None, use_run_tool=True).for_search(
          tmp_path / "archive", broken_evaluate, instances)
  result = meta_harness.search(Harness(domain.seed_harness, origin="seed"), broken_evaluate,
                               proposer, tmp_path / "archive", domain=domain,
                               instances=instances, iterations=2, candidates_per_iteration=1,
                               weights_id="w0")
  session, = proposer.sessions
  assert session["stop_reason"] == "tool_error" and "after close()" in session["error"]
  rejected = result.archive.candidates[1]
  assert rejected.reasons[0]["code"] == "proposer_error"
  assert "The run tool raised RuntimeError" in rejected.reasons[0]["message"]


def test_traces_are_rendered_when_first_read(searched, domain):
  result, _, instances = searched
  archive = result.archive
  loaded = []
  original = archive.trajectories
  archive.trajectories = lambda candidate_id: loaded.append(candidate_id) or original(
      candidate_id)
  view = archive_view.build_view(archive, domain.name, domain.description, instances)
  assert loaded == []
  first = view.read(f"candidates/c0001/traces/{instances[0].id}.txt")
  view.read(f"candidates/c0001/traces/{instances[1].id}.txt")
  assert loaded == ["c0001"] and f"# task {instances[0].id}:" in first
  view.grep("answer")
  assert sorted(loaded) == ["c0000", "c0001", "c0003"]
