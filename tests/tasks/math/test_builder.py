"""The math domain: the python tool, the SandboxFusion client (stub server), splits, verify."""
import json

import pytest

from tests import http_stub
from whale_jax import tasks
from whale_jax.tasks.domain import Instance
from whale_jax.tasks.math import builder as math_domain
from whale_jax.tasks.math.sandbox_fusion import SandboxFusionClient

SMALL = {"weight": 6, "harness": 2, "validation": 2, "test": 3}


def test_python_tool_formats_what_the_runner_reports():
  runs = []

  def runner(code):
    runs.append(code)
    return {"status": "ok", "stdout": "4\n", "stderr": "warning\n"}
  python = math_domain.python_tool(runner)
  assert python("print(2 + 2)") == "4\nwarning\n"
  assert runs == ["print(2 + 2)"]
  assert math_domain.python_tool(lambda code: {"status": "timeout", "stdout": "",
                                               "stderr": ""})("x") == (
      "(no output; status timeout)")
  long = math_domain.python_tool(lambda code: {"status": "ok", "stdout": "x" * 5000,
                                               "stderr": ""})("x")
  assert long.startswith("x" * math_domain.MAX_OUTPUT_CHARS) and "1000 more characters" in long
  with pytest.raises(TypeError, match="as a str"):
    python(42)


def test_default_tool_runs_code_in_the_sandbox():
  domain = tasks.get_domain("math", split_sizes=SMALL)
  python = domain.tools(domain.splits()["test"][0])["python"]
  assert python("print(sum(range(10)))") == "45\n"
  assert "ZeroDivisionError" in python("1 / 0")


class StubSandboxFusion(http_stub.StubServer):
  """Answers POST /run_code like SandboxFusion; the first `failures` replies are SandboxError."""

  def __init__(self, run_result, failures=0):
    self.failures = failures

    def respond(path, body):
      if self.failures > 0:
        self.failures -= 1
        return 200, {"status": "SandboxError", "message": "pod busy"}
      return 200, {"status": "Success", "message": "", "compile_result": None,
                   "run_result": run_result, "executor_pod_name": None, "files": {}}
    super().__init__(respond)
    self.url = self.base


@pytest.mark.parametrize("run_result, expected", [
    ({"status": "Finished", "return_code": 0, "stdout": "2\n", "stderr": ""},
     {"status": "ok", "stdout": "2\n", "stderr": ""}),
    ({"status": "Finished", "return_code": 1, "stdout": "", "stderr": "Traceback"},
     {"status": "error", "stdout": "", "stderr": "Traceback"}),
    ({"status": "TimeLimitExceeded", "return_code": None, "stdout": "", "stderr": ""},
     {"status": "timeout", "stdout": "", "stderr": ""}),
])
def test_sandbox_fusion_client(run_result, expected):
  with StubSandboxFusion(run_result) as stub:
    result = SandboxFusionClient(stub.url, run_timeout_seconds=7, memory_limit_mb=256)(
        "print(1 + 1)")
  assert result == expected
  assert stub.requests == [("/run_code", {"code": "print(1 + 1)", "language": "python",
                                          "run_timeout": 7, "memory_limit_MB": 256})]


def test_sandbox_fusion_retries_sandbox_errors_then_gives_up():
  finished = {"status": "Finished", "return_code": 0, "stdout": "ok\n", "stderr": ""}
  with StubSandboxFusion(finished, failures=1) as stub:
    assert SandboxFusionClient(stub.url, backoff_seconds=0)("x")["stdout"] == "ok\n"
  with StubSandboxFusion(finished, failures=5) as stub:
    with pytest.raises(RuntimeError, match="failed 2 times"):
      SandboxFusionClient(stub.url, max_attempts=2, backoff_seconds=0)("x")


def test_domain_uses_a_sandbox_fusion_server():
  finished = {"status": "Finished", "return_code": 0, "stdout": "7\n", "stderr": ""}
  with StubSandboxFusion(finished) as stub:
    domain = tasks.get_domain("math", split_sizes=SMALL, sandbox_fusion_url=stub.url)
    assert domain.tools(domain.splits()["test"][0])["python"]("print(7)") == "7\n"


def test_offline_splits_come_from_reasoning_gym():
  domain = tasks.get_domain("math", seed=1, split_sizes=SMALL)
  splits = domain.splits()
  assert {name: len(v) for name, v in splits.items()} == SMALL
  datasets = {i.id.split(":")[0] for v in splits.values() for i in v}
  assert datasets <= set(math_domain.DEFAULT_OFFLINE_DATASETS) and len(datasets) > 1
  instance = splits["test"][0]
  assert domain.verify(instance, f"\\boxed{{{instance.reference['answer']}}}", None) == 1.0
  with pytest.raises(ValueError, match="give every split a size"):
    tasks.get_domain("math", split_sizes={"weight": -1})


def test_file_splits_and_verify(tmp_path):
  pool = tmp_path / "dapo.jsonl"
  pool.write_text("".join(json.dumps({"problem": f"p{i}", "answer": str(i)}) + "\n"
                          for i in range(10)))
  aime = tmp_path / "aime.jsonl"
  aime.write_text(json.dumps({"Problem": "Find x.", "Answer": "204"}) + "\n")
  domain = tasks.get_domain("math", problems=str(pool), split_problems={"test": str(aime)},
                            split_sizes={"weight": -1, "harness": 3})
  splits = domain.splits()
  assert [len(splits[n]) for n in tasks.SPLIT_NAMES] == [7, 3, 0, 1]
  [instance] = splits["test"]
  assert domain.verify(instance, "so \\boxed{204}", None) == 1.0
  assert domain.verify(instance, "\\boxed{204.5}", None) == 0.0
  assert domain.verify(instance, None, None) == 0.0


def test_math_metrics_count_python_calls():
  from whale_jax.harness import trajectory as trajectory_lib
  event = trajectory_lib.ToolEvent("python", {"code": "1"}, "1\n", "", 0.0, 0.0)
  trajectories = [trajectory_lib.Trajectory("e", "t", "h", "ok", answer="\\boxed{1}",
                                            tool_events=[event, event]),
                  trajectory_lib.Trajectory("e", "t", "h", "ok", answer="1")]
  instance = Instance("t", {"question": "q"}, {"answer": "1"})
  metrics = math_domain.math_metrics([instance] * 2, trajectories, [1.0, 0.0])
  assert metrics["python_calls_per_episode"] == 1.0 and metrics["answer_format_rate"] == 0.5
