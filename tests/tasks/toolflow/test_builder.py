"""The toolflow domain: replayed end states, rewards, metrics, and h0 through the real runtime."""
import json

import pytest

from whale_jax import tasks
from whale_jax.harness import sandbox_process
from whale_jax.harness.program import Harness
from whale_jax.harness.runtime import HarnessRuntime
from whale_jax.harness.scripted_backend import ScriptedBackend
from whale_jax.harness.trajectory import ToolEvent
from whale_jax.harness.trajectory import Trajectory
from whale_jax.sampling.api import SamplingParams
from whale_jax.tasks.toolflow import apps as toolflow_apps
from whale_jax.tasks.toolflow import builder as toolflow_domain
from whale_jax.tokenization import load_tokenizer
from tests.tasks.toolflow.test_generator import scripted_policy

TOKENIZER = load_tokenizer("byte")
SAMPLING = SamplingParams(max_tokens=1000)
SMALL = {"weight": 6, "harness": 2, "validation": 2, "test": 2}
BAD_CALL = ("inbox_send", {"to": "dana@company.example.com", "subject": "Hi", "body": "x"})


@pytest.fixture(scope="module")
def domain():
  return tasks.get_domain("toolflow", tasks_per_domain=4, split_sizes=SMALL)


def planned_calls(instance, trap=None):
  """The calls the scripted policy makes, recorded on a separate environment."""
  environment = toolflow_apps.Environment(instance.reference["initial_state"])
  calls = []

  def call(tool, arguments):
    calls.append((tool, arguments))
    return environment.call(tool, arguments)
  scripted_policy(call, instance.public["trigger"], trap)
  return calls


def trajectory_of(instance, calls):
  environment = toolflow_apps.Environment(instance.reference["initial_state"])
  events = [ToolEvent("call", {"tool": tool, "arguments": arguments},
                      environment.call(tool, arguments), "", 0.0, 0.0)
            for tool, arguments in calls]
  return Trajectory("e", instance.id, "h", "ok", answer="done", tool_events=events)


def test_rewards_replay_the_calls(domain):
  binary = tasks.get_domain("toolflow", tasks_per_domain=4, split_sizes=SMALL, reward="binary")
  for instance in domain.splits()["test"]:
    perfect = trajectory_of(instance, planned_calls(instance))
    assert domain.verify(instance, "done", perfect) == 1.0
    assert binary.verify(instance, "done", perfect) == 1.0
    trapped = trajectory_of(instance, planned_calls(instance, "stale_row"))
    targets = instance.reference["traps"]["stale_row"]
    total = len(instance.reference["assertions"])
    assert domain.verify(instance, "done", trapped) == pytest.approx(1 - len(targets) / total)
    assert binary.verify(instance, "done", trapped) == 0.0
    # Errors and refused calls change nothing; a tool that failed on the host is not replayed.
    failed = ToolEvent("call", {"tool": "inbox_send", "arguments": {}}, None, "boom", 0, 0)
    trapped.tool_events.insert(0, failed)
    assert domain.verify(instance, "done", trapped) == pytest.approx(1 - len(targets) / total)
  with pytest.raises(ValueError, match="reward='all'"):
    tasks.get_domain("toolflow", reward="all")
  with pytest.raises(ValueError, match="no generator for sales"):
    tasks.get_domain("toolflow", domains=("sales",)).splits()


def test_metrics_count_validity_kinds_and_traps(domain):
  instances = domain.splits()["test"]
  perfect = trajectory_of(instances[0], [BAD_CALL] + planned_calls(instances[0]))
  trapped = trajectory_of(instances[1], planned_calls(instances[1], "near_duplicate"))
  scores = [domain.verify(i, "done", t) for i, t in zip(instances, [perfect, trapped])]
  metrics = domain.metrics(instances, [perfect, trapped], scores)
  num_calls = len(perfect.tool_events) + len(trapped.tool_events)
  assert metrics["tool_call_validity_rate"] == pytest.approx((num_calls - 1) / num_calls)
  assert metrics["all_assertions_passed_rate"] == 0.5
  assert metrics["partial_credit"] == pytest.approx(sum(scores) / 2)
  assert metrics["trap_assertion_pass_rate_near_duplicate"] == pytest.approx(
      len(instances[0].reference["traps"]["near_duplicate"]) /
      sum(len(i.reference["traps"]["near_duplicate"]) for i in instances))
  # Assertions two traps target (an e-mail to a namesake in the stale currency) fail for both.
  traps = [i.reference["traps"] for i in instances]
  both = set(traps[1]["stale_row"]) & set(traps[1]["near_duplicate"])
  assert metrics["trap_assertion_pass_rate_stale_row"] == pytest.approx(
      1 - len(both) / (len(traps[0]["stale_row"]) + len(traps[1]["stale_row"])))
  assert metrics["assertion_pass_rate_count"] == 1.0
  assert metrics["assertion_pass_rate_unchanged"] == 1.0
  assert metrics["tool_calls_by_app_spreadsheet"] == sum(
      tool.startswith("sheets_") for t in (perfect, trapped)
      for tool in (e.arguments["tool"] for e in t.tool_events)) / 2


# ---------------------------------------------------------------- h0 through the real runtime

@pytest.fixture
def sent_to_sandbox(monkeypatch):
  messages = []
  send = sandbox_process.Channel.send

  def recording_send(self, message, *args, **kwargs):
    messages.append(json.dumps(message))
    return send(self, message, *args, **kwargs)
  monkeypatch.setattr(sandbox_process.Channel, "send", recording_send)
  return messages


def run_h0(domain, instances, reply):
  backend = ScriptedBackend(TOKENIZER, replies=reply)
  with HarnessRuntime(backend, TOKENIZER, num_workers=2, timeout_seconds=60) as runtime:
    episodes = [tasks.make_episode(domain, instance, SAMPLING) for instance in instances]
    trajectories = runtime.run_episodes(Harness(domain.seed_harness), episodes)
  assert [t.outcome for t in trajectories] == ["ok"] * len(instances), [
      t.error for t in trajectories]
  return trajectories, [domain.verify(i, t.answer, t) for i, t in zip(instances, trajectories)]


def scripted_model(instances, plans, calls_per_turn=3):
  """Replies with the next calls of the instance's plan (XML and JSON formats alternating),
  then a summary without calls."""
  def reply(prompt):
    instance = next(i for i in instances if i.public["trigger"] in prompt)
    turn = prompt.count("<|im_start|>user\n<tool_response>")
    calls = plans[instance.id][turn * calls_per_turn:(turn + 1) * calls_per_turn]
    if not calls:
      return "All requests are processed."
    text = []
    for k, (tool, arguments) in enumerate(calls):
      if k % 2:
        text.append("<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) +
                    "</tool_call>")
      else:
        text.append(f"<tool_call><function={tool}>" + "".join(
            f"<parameter={name}>{json.dumps(value)}</parameter>"
            for name, value in arguments.items()) + "</function></tool_call>")
    return "\n".join(text)
  return reply


def test_h0_carries_out_the_workflow_and_scores_one(domain):
  instances = domain.splits()["test"]
  plans = {i.id: [BAD_CALL] + planned_calls(i) for i in instances}
  trajectories, scores = run_h0(domain, instances, scripted_model(instances, plans))
  assert scores == [1.0] * len(instances)
  for instance, trajectory in zip(instances, trajectories):
    assert [(e.arguments["tool"], e.arguments["arguments"]) for e in trajectory.tool_events] == (
        plans[instance.id])
    assert trajectory.tool_events[0].result["error"]["status"] == 400
    second_prompt = TOKENIZER.decode(trajectory.calls[1].prompt_token_ids)
    assert '"status": 400' in second_prompt and "arguments.to must be an array" in second_prompt
    assert trajectory.num_turns == -(-len(plans[instance.id]) // 3) + 1
    assert trajectory.answer == "All requests are processed."
  metrics = domain.metrics(instances, trajectories, scores)
  assert metrics["all_assertions_passed_rate"] == 1.0
  num_calls = sum(len(p) for p in plans.values())
  assert metrics["tool_call_validity_rate"] == pytest.approx((num_calls - 2) / num_calls)


def test_assertions_and_state_never_reach_the_sandbox(domain, sent_to_sandbox):
  instances = domain.splits()["test"]
  plans = {i.id: [("inbox_search", {"query": "policy"}), ("sheets_list", {})]
           for i in instances}
  _, scores = run_h0(domain, instances, scripted_model(instances, plans))
  assert all(0 < score < 1 for score in scores)
  episodes = [json.loads(m) for m in sent_to_sandbox if json.loads(m).get("type") == "episode"]
  assert sorted(json.dumps(e["task"]) for e in episodes) == sorted(
      json.dumps(dict(i.public)) for i in instances)
  assert all(e["tool_names"] == ["call"] for e in episodes)
  everything = "\n".join(sent_to_sandbox)
  for instance in instances:
    for assertion in instance.reference["assertions"]:
      assert json.dumps(assertion) not in everything
      for texts in assertion.get("contains", {}).values():
        for text in texts if isinstance(texts, list) else [texts]:
          if text.endswith(" USD"):          # computed amounts appear in no app
            assert text not in everything
  for key in ('"assertions"', '"traps"', '"initial_state"', "buried_policy", "near_duplicate"):
    assert key not in everything


def test_compact_h0_calls_with_tags_in_short_prompts():
  domain = tasks.get_domain("toolflow", tasks_per_domain=4, split_sizes=SMALL,
                            seed_harness="toolflow_compact")
  instances = domain.splits()["test"]
  update = {"spreadsheet_id": "ss_items", "row_id": 1, "values": {"Status": "Approved"}}
  def reply(prompt):
    turn = prompt.count("<|im_start|>user\n") - 1
    return ['<call>inbox_search {"query": "policy"}</call>', "<call>sheets_update_row "
            + json.dumps(update) + "</call>", "<call>inbox_read [1]</call>", "Done."][turn]
  trajectories, _ = run_h0(domain, instances, reply)
  for instance, trajectory in zip(instances, trajectories):
    assert [e.arguments for e in trajectory.tool_events] == [
        {"tool": "inbox_search", "arguments": {"query": "policy"}},
        {"tool": "sheets_update_row", "arguments": update}]
    last_prompt = TOKENIZER.decode(trajectory.calls[-1].prompt_token_ids)
    assert "The arguments must be one JSON object." in last_prompt
    assert max(len(call.prompt_token_ids) for call in trajectory.calls) < 2048
    [row] = [r for r in toolflow_domain.final_state(instance, trajectory)["rows"]
             if (r["spreadsheet_id"], r["row_id"]) == ("ss_items", 1)]
    assert row["cells"]["Status"] == "Approved"
  with pytest.raises(ValueError, match="seed_harness='x'"):
    tasks.get_domain("toolflow", seed_harness="x")
