"""One CLI-agent session per iteration, with `run` from inside the jail: a fake agent (a Python
script run as the agent command in the real jail) prototypes a draft on search tasks in the
real sandbox, reads the traces, writes three candidates and pending_eval.json; the search
evaluates and archives them, and the run's accounting counts its episodes exactly. A session
that writes fewer or invalid candidates gets them recorded with reasons; `run` past its budget
is refused; nothing of the held-out splits reaches the jail."""
import json
import os
import sys
import types

import pytest

from configs import whale as whale_config
from tests.search import fakes
from whale_jax import tasks
from whale_jax import typed_config
from whale_jax.algorithms import builders
from whale_jax.algorithms import loop
from whale_jax.algorithms import sections
from whale_jax.algorithms import run_log
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import SamplingParams
from whale_jax.search import agent_tools
from whale_jax.search import agentic_proposer
from whale_jax.search import archive_view
from whale_jax.search import cli_agent
from whale_jax.search import evaluation
from whale_jax.search import meta_harness
from whale_jax.search import pending_eval
from whale_jax.tokenization import load_tokenizer

PROTOTYPER = """\
import json, os, re, subprocess, sys
def run(*args):
  done = subprocess.run(["run", *args], capture_output=True, text=True)
  return {"status": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
source = open("harness.py").read()
os.makedirs("/tmp/drafts")
with open("/tmp/drafts/topk.py", "w") as file:
  file.write(source.replace("TOPK = 1", "TOPK = 3"))
held_out = run("/tmp/drafts/topk.py", "--task-ids", sys.argv[1])   # a validation task
first = run("/tmp/drafts/topk.py", "--tasks", "2")
names = sorted(os.listdir("runs/run_01"))
traces = [open(os.path.join("runs/run_01", n)).read() for n in names if n != "summary.md"]
passages = max(len(set(re.findall(r"Doc (\\d+) \\(Title", t))) for t in traces)
over = run("/tmp/drafts/topk.py", "--tasks", "1")
dump = []                                   # everything the jail lets it read
for root, _, files in os.walk("/agent"):
  for name in files:
    dump.append(open(os.path.join(root, name), errors="replace").read())
candidates = {
    "candidate_1": (source.replace("TOPK = 1", "TOPK = 3"), "D", ["search", "TOPK"],
                    f"the run showed {passages} passages per search where one missed"),
    "candidate_2": (source.replace("Put the final ", "Give only the short entity. Put the "
                                   "final "), "B", ["USER_PROMPT_TEMPLATE"],
                    "answers are sentences, not the short entity the verifier matches"),
    "candidate_3": (source.replace("MAX_TURNS = 2", "MAX_TURNS = 3"), "F", ["MAX_TURNS"],
                    "a second search turn lets two-hop questions finish"),
}
entries = []
for name, (text, axis, components, hypothesis) in candidates.items():
  with open(name + ".py", "w") as file:
    file.write(text)
  entries.append({"name": name, "hypothesis": hypothesis, "changes": f"{components[0]} changed",
                  "axis": axis, "components": components})
with open("pending_eval.json", "w") as file:
  json.dump(entries, file)
with open("REPORT.md", "w") as file:
  file.write("\\n".join(f"line {i}" for i in range(40)))
print("\\n".join(dump))
print(json.dumps({"held_out": held_out, "first": first, "over": over, "names": names,
                  "passages": passages}))
"""

CARELESS = """\
import json
source = open("harness.py").read()
files = {"candidate_1": source.replace("TOPK = 1", "TOPK = 3"),
         "candidate_2": source.replace("Put the final ", "Give only the short entity. Put the "
                                       "final "),
         "candidate_3": source.replace("def run(task, llm, tools):", "def run(task, llm, tools)"),
         "candidate_4": source.replace("MAX_TURNS = 2", "MAX_TURNS = 3")}
for name, text in files.items():
  with open(name + ".py", "w") as file:
    file.write(text)
entries = [{"name": name, "hypothesis": "h " + name, "changes": "c", "axis": "C",
            "components": ["x"]} for name in ("candidate_1", "candidate_2", "candidate_3")]
with open("pending_eval.json", "w") as file:
  json.dump(entries, file)
"""


class Recording(cli_agent.BwrapRunner):
  """The real jail, keeping each CommandResult (the agent's raw, unscrubbed output)."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.results = []

  def run(self, *args, **kwargs):
    result = super().run(*args, **kwargs)
    self.results.append(result)
    return result


class Counting:
  """evaluate, adding up the rollouts and generated tokens of every evaluation it returns."""

  def __init__(self, evaluate):
    self.evaluate, self.weights_id = evaluate, "w0"
    self.rollouts = self.generated_tokens = 0

  def __call__(self, harness, instances, keys):
    result = self.evaluate(harness, instances, keys)
    self.rollouts += result.rollouts
    self.generated_tokens += result.generated_tokens
    return result


@pytest.fixture(scope="module")
def domain():
  return tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)


def _script(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def _command(script, *args):
  return [os.path.realpath(sys.executable), "-S", script, *args]


def test_one_session_prototypes_and_writes_three_candidates_that_are_evaluated(domain,
                                                                               tmp_path):
  splits = domain.splits()
  instances = splits["harness"]
  script = _script(tmp_path, "prototyper.py", PROTOTYPER)
  runner = Recording(read_only_paths=[script])
  budgets = agent_tools.AgentBudgets(max_runs=1, max_run_tasks=2, max_run_episodes=4)
  unbound = cli_agent.CliAgentProposer(
      _command(script, splits["validation"][0].id), None, domain, None, runner=runner,
      wall_clock_seconds=120, session_per="iteration", use_run_tool=True, budgets=budgets,
      search_answers="answers",
      withheld=agentic_proposer.held_out_strings(splits))
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, fakes.qa_model(sum(splits.values(), [])))
  archive_dir = tmp_path / "archive"
  with HarnessRuntime(backend, tokenizer, num_workers=2, timeout_seconds=30) as runtime:
    evaluate = Counting(evaluation.make_evaluate(runtime, domain, SamplingParams(max_tokens=512),
                                                 weights_id="w0"))
    proposer = unbound.for_search(archive_dir, evaluate, instances, seed=0)
    result = meta_harness.search(Harness(domain.seed_harness, origin="seed"), evaluate,
                                 proposer, archive_dir, domain=domain, instances=instances,
                                 iterations=2, candidates_per_iteration=3, weights_id="w0")
    # The same draft on the same tasks and keys, evaluated here: what its run cost.
    draft = Harness(domain.seed_harness.replace("TOPK = 1", "TOPK = 3"))
    keys = evaluation.sample_keys(instances[:2], 0)
    expected_run = evaluate.evaluate(draft, instances[:2], keys)
  raw = runner.results[0].stdout.decode()
  seen = json.loads(raw.strip().splitlines()[-1])
  # `run` ran the draft on the first two search tasks in the sandbox; the agent read the traces.
  first = seen["first"]
  assert first["status"] == 0, first
  assert "ran on 2 task(s)" in first["stdout"] and "budget left: 0 of 1 runs" in first["stdout"]
  assert seen["names"] == sorted([f"{i.id}.txt" for i in instances[:2]] + ["summary.md"])
  assert seen["passages"] == 3                      # TOPK = 3 showed three passages
  # Refusals: a validation task id (costs nothing), then a run past the budget.
  assert seen["held_out"]["status"] == 1
  assert "run refused" in seen["held_out"]["stdout"]
  assert "are not search tasks" in seen["held_out"]["stdout"]
  assert seen["over"]["status"] == 1
  assert "run refused: the run budget is spent (1 run(s) this session)" in seen["over"]["stdout"]
  # One session, three candidates: all evaluated and archived with their axes.
  archive = result.archive
  assert [c.status for c in archive.candidates] == ["evaluated"] * 4
  assert [c.mechanism for c in archive.candidates[1:]] == [
      "axis D: search, TOPK", "axis B: USER_PROMPT_TEMPLATE", "axis F: MAX_TURNS"]
  assert archive.candidates[1].hypothesis == (
      "the run showed 3 passages per search where one missed")
  assert "TOPK = 3" in archive.source("c0001")
  assert json.loads(archive.raw_output("c0002"))["pending_eval"]["changes"] == (
      "USER_PROMPT_TEMPLATE changed")
  successes = [c.success for c in archive.candidates]
  assert result.accepted_id in ("c0001", "c0002") and max(successes) > successes[0] == 0.0
  assert len(proposer.sessions) == 1
  session = json.loads((archive_dir / "agent_sessions" / "iteration_002" /
                        "cli_session_00.json").read_text())
  assert session["session_per"] == "iteration" and session["returncode"] == 0
  assert [r["kind"] for r in session["run_requests"]] == ["refused", "ran", "refused"]
  assert session["report"].count("\n") == pending_eval.MAX_REPORT_LINES - 1
  # Accounting: the run's two episodes are harness rollouts, with their tokens, exactly.
  assert session["rollouts"] == proposer.rollouts == expected_run.rollouts == 2
  assert session["generated_tokens"] == proposer.generated_tokens == (
      expected_run.generated_tokens) > 0
  assert result.rollouts == 4 * len(instances)      # the incoming harness and 3 candidates
  run = types.SimpleNamespace(counts=run_log.RolloutCounts())
  run.counts.add("harness", result.rollouts, result.generated_tokens)   # as harness_search
  costs = loop.count_agent_sessions(run, archive_dir)
  assert costs["sessions"] == 1 and costs["rollouts"] == 2
  assert run.counts.harness == 4 * 8 + 2 == evaluate.rollouts   # every episode run, once
  assert run.counts.harness_tokens == evaluate.generated_tokens
  # The canary: no held-out gold string in anything the jail could read.
  held_out = {answer for split in ("validation", "test") for instance in splits[split]
              for answer in instance.reference["golden_answers"]
              if len(answer) >= archive_view.MIN_WITHHELD_CHARS}
  search_gold = {a for i in instances for a in i.reference["golden_answers"]}
  assert held_out and any(gold in raw for gold in search_gold - held_out)  # it saw its folder
  assert not [gold for gold in held_out if gold in raw]


def test_fewer_and_invalid_candidates_are_recorded_with_reasons(domain, tmp_path):
  instances = domain.splits()["harness"]
  script = _script(tmp_path, "careless.py", CARELESS)
  proposer = cli_agent.CliAgentProposer(
      _command(script), tmp_path / "archive", domain, instances,
      runner=cli_agent.BwrapRunner(read_only_paths=[script]), wall_clock_seconds=60,
      session_per="iteration")
  evaluate = fakes.FakeEvaluate()
  result = meta_harness.search(Harness(domain.seed_harness, origin="seed"), evaluate, proposer,
                               tmp_path / "archive", domain=domain, instances=instances,
                               iterations=2, candidates_per_iteration=5, weights_id="w0")
  seed, *made = result.archive.candidates
  assert [c.status for c in made] == ["evaluated", "evaluated", "rejected", "rejected",
                                      "rejected"]
  assert [c.reasons[0]["code"] for c in made[2:]] == ["static_check", "proposer_error",
                                                      "proposer_error"]
  assert "syntax" in made[2].reasons[0]["message"].lower()
  assert "no entry named 'candidate_4'" in made[3].reasons[0]["message"]
  assert "wrote no usable candidate_5.py" in made[4].reasons[0]["message"]
  assert made[2].mechanism == "axis C: x" and made[3].mechanism == "cli_agent"
  assert len(evaluate.calls) == 3        # the incoming harness and the two valid candidates
  assert len(proposer.sessions) == 1


def test_pending_eval_entries_are_checked_field_by_field():
  names = pending_eval.candidate_names(4)
  text = json.dumps({"candidates": [
      {"name": "candidate_1.py", "hypothesis": " one\nline ", "changes": "c", "axis": "b",
       "components": ["prompt"]},
      {"name": "candidate_2", "hypothesis": "", "changes": "c", "axis": "Bogus",
       "components": []},
      {"name": "candidate_3", "hypothesis": "h", "changes": "c", "axis": "E (nudges)",
       "components": ["env"]}]})
  entries, why_not = pending_eval.read_entries(text, names)
  assert entries["candidate_1.py"]["axis"] == "B"
  assert entries["candidate_1.py"]["hypothesis"] == "one line"
  assert entries["candidate_3.py"]["axis"] == "E" and why_not["candidate_3.py"] == ""
  assert entries["candidate_2.py"] is None
  assert "hypothesis must be a non-empty string" in why_not["candidate_2.py"]
  assert "axis='Bogus'" in why_not["candidate_2.py"]
  assert "components must be a non-empty list" in why_not["candidate_2.py"]
  assert "no entry named 'candidate_4'" in why_not["candidate_4.py"]
  assert pending_eval.read_entries(None, names)[1]["candidate_1.py"] == (
      "pending_eval.json was not written")
  assert "not JSON" in pending_eval.read_entries("{", names)[1]["candidate_2.py"]


def test_the_claude_code_preset_builds_a_session_per_iteration_proposer(domain, tmp_path):
  config = whale_config.get_config("searchqa,claude_code")
  section = typed_config.read(sections.SearchSection, config.search, "config.search")
  proposer = builders.build_proposer(section, None, None, domain, "whale")
  described = proposer.config()
  assert described["session_per"] == "iteration" and described["run_tool"]
  assert described["wall_clock_seconds"] == 2400.0
  command = described["command"]
  assert command[:3] == ["claude", "-p", "{prompt}"]
  assert command[command.index("--model") + 1] == "claude-opus-4-7"
  assert command[command.index("--effort") + 1] == "max"
  assert described["runner"]["https_allow"] == ["api.anthropic.com:443"]
  bound = proposer.for_search(tmp_path / "archive", fakes.FakeEvaluate(),
                              domain.splits()["harness"])
  assert isinstance(bound.draft_runner, agentic_proposer.SandboxRunner)
  bad = dict(config.search.to_dict(), session_per="iterations")
  with pytest.raises(typed_config.ConfigError, match="did you mean 'iteration'"):
    typed_config.read(sections.SearchSection, bad, "config.search")
