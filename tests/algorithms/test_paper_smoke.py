"""Every paper config on its real path at CPU size ("tiny": only sizes change), end to end
through `python -m whale_jax.main`. WHALE's configs propose as the papers do, with a coding
agent session per iteration run in the real jail: the test's FAKE_AGENT (a Python script given
as config.search.command in place of `claude -p`) reads the archive, prototypes its first
candidate with `run` on a search task, and writes the M candidates, pending_eval.json and
REPORT.md. SearchQA's judge is a stub of a hosted API (tests/hosted_api_stub.py) that refuses
guided_choice with a 400, so the judge's real fallback to free-text verdicts scores the run.
VACE and Harness Learning keep their papers' one-shot proposers (the openai proposer, the
served teacher) against `python -m whale_jax.serve` processes this module starts on
127.0.0.1. The domains read fixture files in the published layouts
(tests/algorithms/paper_fixtures.py), episodes run in the sandboxed runtime. Traffic is checked
from outside the run: the servers' own request counters (/health) and the stub's statuses
against the proposals and verdicts the run recorded.

Then endpoint faults of a run (the one-shot proposer, whale.py's `one_shot` switch): a
proposer server killed mid-run stops the run (non-zero exit, the endpoint and how to resume
named, no half-done iteration cached), and the same command after the server is back
finishes with the summary of an uninterrupted run.

Slow (minutes each on 2 CPU cores): python -m pytest -q -m slow tests/algorithms/test_paper_smoke.py
"""
import glob
import json
import os
import subprocess
import sys
import time

import pytest

from tests import hosted_api_stub
from tests.algorithms import paper_fixtures
from whale_jax.harness import trajectory as trajectory_lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVE_ARGS = ["--model=embedded", "--max_slots=8", "--max_cache_length=16384",
              "--max_pending_requests=64", "--default_max_tokens=64"]
RUN_TIMEOUT = 1500
# One failed call stops the run (the client's default is 3 in a row).
FAULT_FLAGS = ["--config.search.max_retries=1", "--config.search.timeout_seconds=120",
               "--config.search.max_consecutive_failures=1"]
pytestmark = pytest.mark.slow
# The coding agent of WHALE's configs, faked: one session per iteration, as Claude Code writes
# them. Every candidate differs from all archived ones (the archive's size is in its comment).
FAKE_AGENT = """\
import json, os, re, subprocess, sys
names = re.findall(r"candidate_[0-9]+[.]py", sys.argv[1])
source = open("harness.py").read()
seen = sum(len(files) for _, _, files in os.walk("archive"))
entries = []
for number, name in enumerate(names):
  text = source
  if number == 0:   # one mechanism: a turn more
    text = re.sub(r"^MAX_TURNS = ([0-9]+)", lambda m: f"MAX_TURNS = {int(m.group(1)) + 1}",
                  text, count=1, flags=re.M)
  text += f"\\n# {name}: variant {number} after {seen} archive files\\n"
  with open(name, "w") as file:
    file.write(text)
  entries.append({"name": name[:-3], "hypothesis": f"variant {number} finishes more episodes",
                  "changes": "MAX_TURNS + 1" if number == 0 else "a comment",
                  "axis": "F" if number == 0 else "A", "components": ["MAX_TURNS"]})
ran = subprocess.run(["run", names[0], "--tasks", "1"], capture_output=True, text=True)
with open("pending_eval.json", "w") as file:
  json.dump(entries, file)
with open("REPORT.md", "w") as file:
  file.write(f"run exit status {ran.returncode}\\n{ran.stdout[:400]}\\n")
print(json.dumps({"run_status": ran.returncode}))
"""


@pytest.fixture(scope="module")
def proposer_server():
  served = paper_fixtures.Served(SERVE_ARGS)
  yield served
  served.stop()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("paper_data"))
  paper_fixtures.write_searchqa(root)
  paper_fixtures.write_math(root)
  paper_fixtures.write_chess(root)
  paper_fixtures.write_docqa(root)
  paper_fixtures.write_toolflow(root)
  return root


@pytest.fixture(scope="module")
def fake_agent(tmp_path_factory):
  """The search flags that make FAKE_AGENT the coding agent's command."""
  path = tmp_path_factory.mktemp("agent") / "fake_agent.py"
  path.write_text(FAKE_AGENT)
  command = (os.path.realpath(sys.executable), "-S", str(path), "{prompt}")
  return [f"--config.search.command={command!r}",
          f"--config.search.read_only_paths={(str(path),)!r}"]


def check_agent_sessions(workdir):
  """Every iteration's one session wrote its candidates, each archived (evaluated, or
  refused with reasons), and ran `run` once; returns (sessions, candidates, run episodes)."""
  sessions = [json.load(open(path)) for path in sorted(glob.glob(os.path.join(
      workdir, "**", "agent_sessions", "iteration_*", "cli_session_*.json"), recursive=True))]
  assert sessions
  for session in sessions:
    assert session["session_per"] == "iteration" and session["returncode"] == 0, session
    assert [r["kind"] for r in session["run_requests"]] == ["ran"], session["run_requests"]
    assert session["report"].startswith("run exit status 0"), session["report"]
  candidates = archive_candidates(workdir, "cli_agent")
  assert candidates
  for candidate in candidates:
    assert candidate["status"] in ("evaluated", "rejected", "duplicate"), candidate
    if candidate["status"] == "rejected":
      assert candidate["reasons"], candidate
  assert any(c["status"] == "evaluated" for c in candidates)
  return len(sessions), len(candidates), sum(s["rollouts"] for s in sessions)


def run_main(config, workdir, cwd, *flags, timeout=RUN_TIMEOUT):
  """(exit status, output, seconds) of `python -m whale_jax.main` run in cwd."""
  start = time.time()
  result = subprocess.run(
      [sys.executable, "-m", "whale_jax.main", f"--config={REPO}/{config}",
       f"--workdir={workdir}", "--progress=false", *flags],
      cwd=cwd, capture_output=True, text=True, timeout=timeout,
      env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO})
  return result.returncode, result.stdout + result.stderr, time.time() - start


def proposer_flags(url):
  return [f"--config.search.base_url={url}"]


def archive_candidates(workdir, proposer="embedded"):
  """Candidate records of every archive under workdir made by proposer."""
  rows = []
  for path in sorted(glob.glob(os.path.join(workdir, "**", "summary.jsonl"), recursive=True)):
    with open(path, encoding="utf-8") as file:
      rows += [json.loads(line) for line in file if line.strip()]
  return [row for row in rows if row.get("proposer") == proposer]


def check_proposals(workdir, served_delta):
  """Every proposer call the server answered is one archived candidate, evaluated or
  refused with reasons; returns (parsed, refused)."""
  candidates = archive_candidates(workdir)
  assert len(candidates) == served_delta, (len(candidates), served_delta)
  for candidate in candidates:
    assert candidate["status"] in ("evaluated", "rejected", "duplicate"), candidate
    if candidate["status"] == "rejected":
      assert candidate["reasons"], candidate
  refused = [c for c in candidates if c["status"] == "rejected"]
  return len(candidates) - len(refused), len(refused)


def report(name, seconds, served, parsed, refused, verdicts=None, counters=None):
  line = (f"{name}: {seconds:.0f} s, {served} proposer requests served, {parsed} proposals "
          f"parsed, {refused} refused with reasons")
  if verdicts is not None:
    line += f", {verdicts} judge requests served"
  if counters:
    line += (f" ({counters['judge_parsed']} verdicts parsed, "
             f"{counters['judge_unparsable']} unparsable, "
             f"{counters['judge_failed_calls']} failed calls, "
             f"{counters['judge_verdicts_exact_match_fallback']} exact-match fallbacks)")
  print(line)


@pytest.mark.parametrize("argument", ["math,tiny", "chess,tiny", "chess,adaptive,tiny"])
def test_whale_tiny_runs_on_the_paper_path(argument, fake_agent, data_dir, tmp_path):
  status, output, seconds = run_main(f"configs/whale.py:{argument}", tmp_path / "run",
                                     data_dir, *fake_agent)
  assert status == 0, output[-3000:]
  sessions, candidates, run_episodes = check_agent_sessions(str(tmp_path / "run"))
  summary = json.load(open(tmp_path / "run" / "summary.json"))
  assert summary["counts"]["harness"] > run_episodes > 0
  assert summary["counts"]["evaluation"] > 0
  print(f"{argument}: {seconds:.0f} s, {sessions} coding-agent sessions, {candidates} "
        f"candidates archived, {run_episodes} `run` episodes")


def test_searchqa_tiny_with_a_hosted_judge_that_refuses_guided_choice(fake_agent, data_dir,
                                                                      tmp_path):
  workdir = tmp_path / "run"
  with hosted_api_stub.HostedAPIStub() as judge_stub:
    status, output, seconds = run_main(
        "configs/whale.py:searchqa,tiny", workdir, data_dir, *fake_agent,
        f"--config.domain.judge.base_url={judge_stub.url}")
    statuses = list(judge_stub.statuses)
  assert status == 0, output[-3000:]
  sessions, candidates, run_episodes = check_agent_sessions(str(workdir))
  # The test set: one question of each of the 7 files (per_file_sizes), every episode saved.
  summary = json.load(open(workdir / "summary.json"))
  assert sorted(summary["final_per_subset"]) == sorted(
      name.removesuffix(".jsonl") for name in paper_fixtures.SEARCHQA_TEST_FILES)
  saved = sorted(glob.glob(str(workdir / "test_trajectories" / "*.jsonl.gz")))
  assert len(saved) == len(summary["curve"])
  rows = trajectory_lib.read_records(saved[-1])
  assert len({row["instance_id"] for row in rows}) == 7
  means = {}
  for row in rows:
    means.setdefault(row["instance_id"].split(":")[0], []).append(row["score"])
  assert summary["final_per_subset"] == {k: sum(v) / len(v) for k, v in means.items()}
  # The hosted API refused guided_choice (400); the judge fell back to free text, and every
  # verdict the stub gave was parsed (the stub answers CORRECT or INCORRECT).
  counters = summary["domain_counters"]
  refused, answered = statuses.count(400), statuses.count(200)
  assert (counters["judge_constrained"], counters["judge_mode"]) == ("auto", "free_text")
  assert refused >= 1 and counters["judge_guided_choice_refusals"] == refused
  assert answered > 0 and counters["judge_calls"] == answered == len(statuses) - refused
  assert counters["judge_parsed"] == answered and counters["judge_unparsable"] == 0
  assert counters["judge_verdicts_exact_match_fallback"] == 0
  print(f"searchqa,tiny: {seconds:.0f} s, {sessions} coding-agent sessions, {candidates} "
        f"candidates archived, {run_episodes} `run` episodes, judge: {refused} guided_choice "
        f"request(s) refused, {answered} free-text verdicts")


def test_harness_learning_tiny_with_the_served_teacher(proposer_server, data_dir, tmp_path):
  before = proposer_server.health()["served_requests"]
  teachers = (dict(proposer="openai", base_url=proposer_server.url, model="embedded",
                   api_key_env="", sampling=dict(max_tokens=64, temperature=1.0)),
              dict(proposer="edit_library"))
  status, output, seconds = run_main(
      "configs/harness_learning.py:tiny", tmp_path / "run", data_dir,
      f"--config.harness_learning.teachers={teachers!r}")
  assert status == 0, output[-3000:]
  served = proposer_server.health()["served_requests"] - before
  assert served > 0
  report("harness_learning:tiny", seconds, served, 0, 0)


def test_vace_docqa_tiny_runs_on_the_paper_path(proposer_server, data_dir, tmp_path):
  before = proposer_server.health()["served_requests"]
  workdir = tmp_path / "run"
  status, output, seconds = run_main("configs/vace.py:docqa,tiny", workdir, data_dir,
                                     *proposer_flags(proposer_server.url))
  assert status == 0, output[-3000:]
  served = proposer_server.health()["served_requests"] - before
  assert served > 0
  parsed, refused = check_proposals(str(workdir), served)
  # Refused proposals never reach the validation gate; every other one gets a decision.
  summary = json.load(open(workdir / "summary.json"))
  assert len(summary["gate_decisions"]) == parsed
  assert summary["counts"]["weight"] > 0 and summary["counts"]["evaluation"] > 0
  report("vace docqa,tiny", seconds, served, parsed, refused)


def test_vace_toolflow_tiny_runs_on_the_paper_path(proposer_server, data_dir, tmp_path):
  before = proposer_server.health()["served_requests"]
  workdir = tmp_path / "run"
  status, output, seconds = run_main("configs/vace.py:toolflow,tiny", workdir, data_dir,
                                     *proposer_flags(proposer_server.url))
  assert status == 0, output[-3000:]
  served = proposer_server.health()["served_requests"] - before
  assert served > 0
  parsed, refused = check_proposals(str(workdir), served)
  summary = json.load(open(workdir / "summary.json"))
  assert len(summary["gate_decisions"]) == parsed
  assert summary["counts"]["weight"] > 0 and summary["counts"]["evaluation"] > 0
  # The test episodes are the fixture file's tasks, loaded by the AutomationBench loader.
  saved = sorted(glob.glob(str(workdir / "test_trajectories" / "*.jsonl.gz")))
  ids = {row["instance_id"] for row in trajectory_lib.read_records(saved[-1])}
  names = {f"automationbench:{r['name']}:{r['example_id']}"
           for r in paper_fixtures.write_toolflow(str(tmp_path / "again"))}
  assert len(ids) == 2 and ids <= names
  report("vace toolflow,tiny", seconds, served, parsed, refused)


def _iteration_proposals(workdir):
  return sorted(glob.glob(os.path.join(workdir, "**", "proposals.json"), recursive=True))


def test_a_killed_proposer_server_stops_the_run_and_a_resume_finishes_it(data_dir, tmp_path):
  reference_server = paper_fixtures.Served(SERVE_ARGS)
  try:
    status, output, _ = run_main("configs/whale.py:math,tiny,one_shot", tmp_path / "reference",
                                 data_dir, *proposer_flags(reference_server.url))
    assert status == 0, output[-3000:]
  finally:
    reference_server.stop()
  served = paper_fixtures.Served(SERVE_ARGS)
  url, port = served.url, served.port
  workdir = str(tmp_path / "interrupted")
  process = subprocess.Popen(
      [sys.executable, "-m", "whale_jax.main",
       f"--config={REPO}/configs/whale.py:math,tiny,one_shot",
       f"--workdir={workdir}", "--progress=false", *proposer_flags(url),
       *FAULT_FLAGS],
      cwd=data_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO})
  try:
    deadline = time.time() + RUN_TIMEOUT
    while served.health()["served_requests"] < 1:   # the first proposer call was answered
      if process.poll() is not None:
        pytest.fail("The run ended before its first proposer call was answered:\n" +
                    process.stdout.read()[-3000:])
      assert time.time() < deadline
      time.sleep(0.5)
    served.stop()
    output, _ = process.communicate(timeout=RUN_TIMEOUT)
  finally:
    if process.poll() is None:
      process.kill()
  assert process.returncode != 0, output[-3000:]
  assert f"The endpoint {url}" in output and "same --workdir" in output, output[-3000:]
  assert not os.path.exists(os.path.join(workdir, "summary.json"))
  # The iteration whose call failed saved no proposals: a resume asks again.
  saved = [json.load(open(path)) for path in _iteration_proposals(workdir)]
  assert all(p is None or p.get("error") in (None, "") for s in saved for p in s["proposals"])
  served.start(port=port)
  try:
    status, output, _ = run_main("configs/whale.py:math,tiny,one_shot", workdir, data_dir,
                                 *proposer_flags(url), *FAULT_FLAGS)
  finally:
    served.stop()
  assert status == 0, output[-3000:]
  expected = json.load(open(tmp_path / "reference" / "summary.json"))
  resumed = json.load(open(os.path.join(workdir, "summary.json")))
  for key in ("final_test_mean", "best_test_mean", "incumbent_hash", "curve", "counts",
              "final_per_task"):
    assert resumed[key] == expected[key], key
  assert ([c["hash"] for c in archive_candidates(workdir)] ==
          [c["hash"] for c in archive_candidates(str(tmp_path / "reference"))])
