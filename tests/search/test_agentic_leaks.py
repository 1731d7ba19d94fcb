"""No leak by construction: held-out gold strings planted on the host never reach the agentic
proposer (view files, tool results, a CLI agent's folder, the traces of its in-jail `run`);
search-split answers appear exactly when search_answers says so."""
import json
import os
import sys
import types

import pytest

from tests.search import fakes
from whale_jax.harness import Harness
from whale_jax.harness import static_checks
from whale_jax.search import agent_tools
from whale_jax.search import agentic_proposer
from whale_jax.search import archive as archive_lib
from whale_jax.search import archive_view
from whale_jax.search import cli_agent
from whale_jax.search import context as context_lib
from whale_jax.search import evaluation
from whale_jax.search import meta_harness
from whale_jax.search.agentic_proposer import AgentReply
from whale_jax.search.tool_calls import ToolCall
from whale_jax.tasks import Instance
from whale_jax.tasks import get_domain

CANARIES = ["CANARY-VALIDATION-a81f", "CANARY-TEST-0b2c", "CANARY-VALDOC-77d1"]


def _instances(prefix, count, gold, docs):
  return [Instance(id=f"{prefix}{i}", public={"question": f"{prefix} question {i}?"},
                   reference={"golden_answers": [f"{gold}-{i}"],
                              "supporting_ids": [f"{docs}-{i}"]}) for i in range(count)]


SEARCH = _instances("s", 4, "GOLD-SEARCH", "DOC-SEARCH")
VALIDATION = _instances("v", 3, CANARIES[0], CANARIES[2])
TEST = _instances("t", 3, CANARIES[1], CANARIES[1])


@pytest.fixture(scope="module")
def domain():
  real = get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)
  return types.SimpleNamespace(name="synthetic_qa", description=real.description,
                               seed_harness=real.seed_harness,
                               allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS)


def _plant(tmp_path, archive_dir, monkeypatch):
  """Held-out gold strings where a careless proposer could find them on the host."""
  rows = [{"task_id": i.id, "reference": i.reference} for i in VALIDATION + TEST]
  for folder in (archive_dir / "evaluations", archive_dir / "validation", tmp_path / "data"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "held_out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  monkeypatch.setenv("WHALE_TEST_CANARY", CANARIES[0])
  assert all(c in (tmp_path / "data" / "held_out.jsonl").read_text() for c in CANARIES)
  return tmp_path / "data" / "held_out.jsonl"


class Explorer:
  """Lists every folder, reads every file, greps, checks, runs, diffs, then submits."""

  def __init__(self):
    self.queue, self.read, self.step = [("list", {"path": ""})], [], 0

  def complete(self, messages, tools, **sampling):
    last = messages[-1]
    if last["role"] == "tool" and self.step and self.queue_kind == "list":
      folder = self.queue_path
      for name in last["content"].splitlines():
        path = f"{folder}/{name}".strip("/") if folder else name
        if name.endswith("/"):
          self.queue.append(("list", {"path": path.rstrip("/")}))
        else:
          self.queue.append(("read", {"path": path}))
          self.read.append(path)
    if not self.queue:
      patch = "<<<<<<< SEARCH\nTOPK = 1\n=======\nTOPK = 3\n>>>>>>> REPLACE\n"
      self.queue = [("grep", {"pattern": "canary"}), ("grep", {"pattern": "gold-search"}),
                    ("check", {"patch": patch}), ("run", {"patch": patch, "num_tasks": 2}),
                    ("diff", {}), ("submit", {"patch": patch, "hypothesis": "more passages"})]
    name, arguments = self.queue.pop(0)
    self.queue_kind, self.queue_path = name, arguments.get("path")
    self.step += 1
    return AgentReply({"role": "assistant", "content": json.dumps([name, arguments])},
                      (ToolCall(name, arguments),), "", 10, 10)


def _search(domain, archive_dir, proposer, iterations=2):
  return meta_harness.search(Harness(domain.seed_harness, origin="seed"), fakes.FakeEvaluate(),
                             proposer, archive_dir, domain=domain, instances=SEARCH,
                             iterations=iterations, candidates_per_iteration=1,
                             weights_id="w0")


def _runner():
  evaluate = fakes.FakeEvaluate()
  return agentic_proposer.SandboxRunner(evaluate, SEARCH), evaluate


@pytest.mark.parametrize("search_answers", archive_view.SEARCH_ANSWER_MODES)
def test_held_out_gold_never_reaches_view_tools_or_cli_folder(domain, tmp_path, monkeypatch,
                                                              search_answers):
  archive_dir = tmp_path / "archive"
  data_file = _plant(tmp_path, archive_dir, monkeypatch)
  runner, _ = _runner()
  explorer = Explorer()
  withheld = agentic_proposer.held_out_strings(
      {"harness": SEARCH, "validation": VALIDATION, "test": TEST})
  assert {f"{CANARIES[0]}-0", f"{CANARIES[2]}-2", f"{CANARIES[1]}-1"} <= withheld
  assert not any("SEARCH" in s for s in withheld)
  proposer = agentic_proposer.AgenticProposer(
      explorer, archive_dir, domain, SEARCH, runner=runner, search_answers=search_answers,
      budgets=agent_tools.AgentBudgets(max_steps=200, max_runs=1))   # no scrubbing guard:
  result = _search(domain, archive_dir, proposer)                     # the view alone keeps out
  session = proposer.sessions[0]
  assert session["submitted"] and result.archive.candidates[1].status == "evaluated"
  view = archive_view.view_of_directory(archive_dir, domain.name, domain.description, SEARCH,
                                        search_answers=search_answers)
  before = [f for f in view.files if not f.startswith("candidates/c0001/")]  # at its session
  assert sorted(explorer.read) == sorted(before)    # it read every file of the view
  results = [m["content"] for m in session["messages"] if m["role"] == "tool"]
  assert len(results) == session["steps"]
  for text in results + list(view.files.values()) + [json.dumps(session)]:
    assert not any(canary in text for canary in CANARIES)
  # The CLI agent's folder: an agent that dumps everything it can reach.
  dumper = tmp_path / "dump.py"
  dumper.write_text(
      "import os, sys\n"
      "print(dict(os.environ))\n"
      "for root, _, files in os.walk('/agent'):\n"
      "  for name in files:\n"
      "    print(open(os.path.join(root, name), errors='replace').read())\n"
      "for path in sys.argv[1:]:\n"
      "  try:\n"
      "    print(open(path).read())\n"
      "  except OSError as error:\n"
      "    print('refused', path, error)\n")
  cli = cli_agent.CliAgentProposer(
      [os.path.realpath(sys.executable), "-S", str(dumper), str(data_file),
       str(archive_dir / "evaluations" / "held_out.jsonl")], archive_dir, domain, SEARCH,
      runner=cli_agent.BwrapRunner(read_only_paths=[str(dumper)]),
      search_answers=search_answers, wall_clock_seconds=30)
  _search(domain, tmp_path / "cli_archive", cli, iterations=1)   # a fresh archive
  context = context_lib.build_context(
      result.archive, "c0000", domain.name, domain.description, 3, 16_000)
  cli_proposal, = cli.propose(context, 1)
  dump = cli.sessions[0]["stdout"]
  assert "GOLD-SEARCH" in dump or search_answers == "none"   # it did see its folder
  assert "candidates/c0000/harness.py" in dump or "TOPK = 1" in dump
  assert dump.count("refused") == 2
  assert not any(canary in dump for canary in CANARIES)
  assert not any(canary in cli_proposal.raw_output for canary in CANARIES)


def test_held_out_strings_in_a_search_trace_are_withheld(domain, tmp_path):
  """The second guard: a search episode that happens to contain a held-out gold string."""

  class Leaky(fakes.FakeEvaluate):
    def __call__(self, harness, instances, keys):
      result = super().__call__(harness, instances, keys)
      first = result.trajectories[0]
      first.calls[0].completions[0].text = f"the answer is {CANARIES[0]}-1"
      return result

  archive_dir = tmp_path / "archive"
  meta_harness.search(Harness(domain.seed_harness, origin="seed"), Leaky(), None,
                      archive_dir, domain=domain, instances=SEARCH, iterations=1,
                      weights_id="w0")
  withheld = archive_view.reference_strings(VALIDATION + TEST)
  assert f"{CANARIES[0]}-1" in withheld
  view = archive_view.view_of_directory(archive_dir, domain.name, domain.description, SEARCH,
                                        withheld=withheld)
  trace = view.read("candidates/c0000/traces/s0.txt")
  assert "the answer is [withheld]" in trace and CANARIES[0] not in trace
  assert view.grep(CANARIES[0]) == []
  unguarded = archive_view.view_of_directory(archive_dir, domain.name, domain.description,
                                             SEARCH)
  assert CANARIES[0] in unguarded.read("candidates/c0000/traces/s0.txt")


@pytest.mark.parametrize("search_answers", archive_view.SEARCH_ANSWER_MODES)
def test_search_answers_appear_exactly_when_the_setting_says(domain, tmp_path, search_answers):
  archive_dir = tmp_path / "archive"
  runner, _ = _runner()
  explorer = Explorer()
  proposer = agentic_proposer.AgenticProposer(
      explorer, archive_dir, domain, SEARCH, runner=runner, search_answers=search_answers,
      budgets=agent_tools.AgentBudgets(max_steps=200, max_runs=1))
  _search(domain, archive_dir, proposer)
  session = proposer.sessions[0]
  view = archive_view.view_of_directory(archive_dir, domain.name, domain.description, SEARCH,
                                        search_answers=search_answers)
  run_result = next(m["content"] for m, previous in zip(session["messages"][1:],
                                                        session["messages"])
                    if m["role"] == "tool" and '"run"' in previous["content"])
  for index, instance in enumerate(SEARCH):
    gold, doc = f"GOLD-SEARCH-{index}", f"DOC-SEARCH-{index}"
    task_file = view.read(f"tasks/{instance.id}.json")
    trace = view.read(f"candidates/c0000/traces/{instance.id}.txt")
    assert (gold in task_file) == (gold in trace) == (search_answers != "none")
    assert (doc in task_file) == (doc in trace) == (search_answers == "answers_and_documents")
    if index < 2:   # the run covered the first two tasks
      assert (gold in run_result) == (search_answers != "none")
      assert (doc in run_result) == (search_answers == "answers_and_documents")
    else:
      assert gold not in run_result
  everything = "".join(view.files.values())
  assert ("GOLD-SEARCH" in everything) == (search_answers != "none")
  assert archive_view.SEARCH_ANSWERS_BY_RECIPE["harness_learning"] == "answers_and_documents"
  assert archive_view.SEARCH_ANSWERS_BY_RECIPE["whale"] == "answers"
  assert proposer.config()["search_answers"] == search_answers


def test_a_view_of_held_out_evaluations_is_refused(domain, tmp_path):
  archive_dir = tmp_path / "archive"
  _search(domain, archive_dir, None, iterations=1)
  with pytest.raises(ValueError, match="not in the instances given to build_view"):
    archive_view.view_of_directory(archive_dir, domain.name, domain.description, VALIDATION)


RUNNING_DUMPER = """\
import os, subprocess, sys
def run(*args):
  done = subprocess.run(["run", *args], capture_output=True, text=True)
  print("STATUS", done.returncode, done.stdout, done.stderr)
with open("/tmp/draft.py", "w") as file:
  file.write(open("harness.py").read().replace("TOPK = 1", "TOPK = 3"))
run("/tmp/draft.py", "--task-ids", sys.argv[1])     # a validation task: refused
run("/tmp/draft.py", "--tasks", "2")
for root, _, files in os.walk("/agent"):
  for name in files:
    print(open(os.path.join(root, name), errors="replace").read())
"""


@pytest.mark.parametrize("search_answers", archive_view.SEARCH_ANSWER_MODES)
def test_the_jails_run_command_never_returns_held_out_gold(domain, tmp_path, monkeypatch,
                                                          search_answers):
  """`run` in the CLI agent's jail: held-out ids are refused, and a held-out gold string that
  a search episode happens to contain is withheld from the traces and the summary."""

  class Leaky(fakes.FakeEvaluate):
    def __call__(self, harness, instances, keys):
      result = super().__call__(harness, instances, keys)
      result.trajectories[0].calls[0].completions[0].text = f"the answer is {CANARIES[0]}-1"
      return result

  class Recording(cli_agent.BwrapRunner):
    def run(self, *args, **kwargs):
      self.result = super().run(*args, **kwargs)
      return self.result

  archive_dir = tmp_path / "archive"
  _plant(tmp_path, archive_dir, monkeypatch)
  _search(domain, archive_dir, None, iterations=1)
  script = tmp_path / "running_dumper.py"
  script.write_text(RUNNING_DUMPER)
  runner = Recording(read_only_paths=[str(script)])
  evaluate = Leaky()
  cli = cli_agent.CliAgentProposer(
      [os.path.realpath(sys.executable), "-S", str(script), VALIDATION[0].id], None, domain,
      None, runner=runner, search_answers=search_answers, wall_clock_seconds=60,
      use_run_tool=True, session_per="iteration",
      withheld=agentic_proposer.held_out_strings(
          {"harness": SEARCH, "validation": VALIDATION, "test": TEST})
  ).for_search(archive_dir, evaluate, SEARCH)
  context = context_lib.build_context(
      archive_lib.Archive(archive_dir), "c0000", domain.name, domain.description,
      2, 16_000)
  proposals = cli.propose(context, 3)
  dump = runner.result.stdout.decode()
  assert dump.count("STATUS 1") == 1 and "are not search tasks" in dump
  assert dump.count("STATUS 0") == 1 and "ran on 2 task(s)" in dump
  assert [ids for _, ids, _ in evaluate.calls] == [["s0", "s1"]]   # the refused one ran nothing
  assert "the answer is [withheld]" in dump                      # the planted string, scrubbed
  assert ("GOLD-SEARCH-0" in dump) == (search_answers != "none")
  assert ("DOC-SEARCH-0" in dump) == (search_answers == "answers_and_documents")
  assert not any(canary in dump for canary in CANARIES)
  assert not any(canary in p.raw_output for p in proposals for canary in CANARIES)
  assert cli.rollouts == 2
