"""Every shipped steering text carries the papers' proposer rules (SPEC 1.6: one mechanism per
candidate and no parameter-tuning-only candidates, no dataset names or question-specific
branches, prototyping and self-critique, the exploitation axes A-F of its domain family as
pending_eval validates them with the same-axis rotation rule, reports of at most 30 lines),
and a coding-agent session gets them in INSTRUCTIONS.md while every candidate it makes is
archived with the steering file's hash."""
import glob
import json
import os
import sys

import pytest

from tests.search import fakes
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.search import cli_agent
from whale_jax.search import meta_harness
from whale_jax.search import pending_eval
from whale_jax.search import steering

PACKAGE = os.path.dirname(os.path.abspath(steering.__file__))   # whale_jax/search
SHIPPED = sorted(set(glob.glob(os.path.join(PACKAGE, "instructions", "*.md")) +
                     glob.glob(os.path.join(PACKAGE, "..", "tasks", "*", "instructions",
                                            "*.md"))))
HEADING = "## The papers' rules"
AGENT = """\
import json
source = open("harness.py").read()
print(open("INSTRUCTIONS.md").read())
texts = {"candidate_1": source.replace("TOPK = 1", "TOPK = 3"),
         "candidate_2": source.replace("MAX_TURNS = 2", "MAX_TURNS = 3")}
for name, text in texts.items():
  with open(name + ".py", "w") as file:
    file.write(text)
json.dump([{"name": name, "hypothesis": "h", "changes": "c", "axis": axis,
            "components": ["x"]} for name, axis in (("candidate_1", "D"), ("candidate_2", "F"))],
          open("pending_eval.json", "w"))
"""


def test_the_shipped_steering_texts_are_found():
  names = {os.path.basename(path) for path in SHIPPED}
  assert {"default.md", "searchqa.md", "synthetic_qa.md", "math.md", "chess.md"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_each_steering_text_carries_the_papers_rules(path):
  text = steering.load_file(path).text
  rules = text[text.index(HEADING):]
  flat = " ".join(rules.split())
  assert "One mechanism per candidate" in flat
  assert "only changes constants" in flat and "is parameter tuning" in flat
  assert "no question-specific branches, no hard-coded answers" in flat
  assert "Prototype before you propose" in flat and "criticize it" in flat
  assert "at most 30 lines" in flat
  assert "if the last 3 iterations explored the same axis, pick another" in flat
  family = os.path.basename(path).removesuffix(".md")
  lines = rules.splitlines()
  for letter, what in pending_eval.axes_for(family).items():   # what pending_eval accepts
    assert f"  {letter} {what}" in lines, (letter, what)


def test_a_session_reads_the_rules_and_its_candidates_keep_the_steering_hash(tmp_path):
  domain = tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)
  instances = domain.splits()["harness"]
  script = tmp_path / "agent.py"
  script.write_text(AGENT)
  runner = cli_agent.BwrapRunner(read_only_paths=[str(script)])
  proposer = cli_agent.CliAgentProposer(
      [os.path.realpath(sys.executable), "-S", str(script)], tmp_path / "archive", domain,
      instances, runner=runner, wall_clock_seconds=60, session_per="iteration")
  result = meta_harness.search(Harness(domain.seed_harness, origin="seed"),
                               fakes.FakeEvaluate(), proposer, tmp_path / "archive",
                               domain=domain, instances=instances, iterations=2,
                               candidates_per_iteration=2, weights_id="w0")
  with open(proposer.instructions.path, encoding="utf-8") as file:
    expected_hash = steering.text_hash(file.read())
  made = result.archive.candidates[1:]
  assert [c.status for c in made] == ["evaluated", "evaluated"]
  assert {c.instruction_hash for c in made} == {expected_hash}
  session = json.loads((tmp_path / "archive" / "agent_sessions" / "iteration_002" /
                        "cli_session_00.json").read_text())
  assert HEADING in session["stdout"] and "  D retrieval parameters" in session["stdout"]
