"""AutomationBench task records (the published task/assertion layout), written by the test."""
import json

import pytest

from whale_jax import tasks
from whale_jax.harness.trajectory import ToolEvent
from whale_jax.harness.trajectory import Trajectory
from whale_jax.tasks.toolflow import apps as toolflow_apps
from whale_jax.tasks.toolflow import files as toolflow_files

TASK = {
    "name": "hr.referral_bonus_processing", "example_id": 5109,
    "prompt": "Process the pending employee referral bonuses and notify referrers.",
    "system_prompt": "You are a workflow automation agent.",
    "tools": ["find_email", "sheets_update_row", "send_email"],
    "initial_state": {
        "gmail": {"messages": [
            {"id": "msg_policy", "thread_id": "th1", "from_": "hr@company.example.com",
             "to": "ops@company.example.com", "subject": "Referral program guidelines",
             "body_plain": "Bonus after 90 days.", "labels": ["INBOX"]}]},
        "google_sheets": {"spreadsheets": [
            {"id": "ss_referrals", "title": "Referrals", "worksheets": [
                {"id": "ws_1", "title": "Tracker", "columns": ["Referrer", "Bonus Status"],
                 "rows": [{"row_id": 1, "cells": {"Referrer": "Amy Liu",
                                                  "Bonus Status": "Pending"}},
                          ["Ben Okafor", "Pending"]]}]}]},
        "slack.channels": [{"id": "C1", "name": "recruiting"}],
        "slack.messages": [{"id": "s1", "channel_id": "C1", "user": "U1", "text": "hello"}],
        "hubspot": {"contacts": [{"id": "h1", "firstname": "Amy", "lastname": "Liu",
                                  "email": "amy.liu@company.example.com"}]},
    },
    "assertions": [
        {"type": "google_sheets_row_updated", "spreadsheet_id": "ss_referrals", "row_id": 1,
         "cell_contains": {"Bonus Status": "Paid"}},
        {"type": "gmail_message_sent_to_with_body_contains", "to": "amy.liu@company.example.com",
         "body_contains": "$5,000"},
        {"type": "google_sheets_row_not_updated", "spreadsheet_id": "ss_referrals", "row_id": 2},
        {"type": "gmail_message_not_sent_to", "to": "ben.okafor@company.example.com"},
        {"type": "slack_message_exists", "channel_name": "recruiting", "text_contains": "Amy"},
        {"type": "hubspot_contact_exists", "email": "amy.liu@company.example.com"},
        {"type": "hubspot_contact_not_exists", "email": "ben.okafor@company.example.com"},
    ],
}


def write(path, records, jsonl=True):
  path.write_text("".join(json.dumps(r) + "\n" for r in records) if jsonl else
                  json.dumps(records))
  return str(path)


def test_state_and_assertions_are_mapped(tmp_path):
  [task] = toolflow_files.load_automationbench_tasks(write(tmp_path / "ab.jsonl", [TASK]))
  assert task["id"] == "automationbench:hr.referral_bonus_processing:5109"
  assert task["domain"] == "hr" and task["trigger"] == TASK["prompt"]
  state = task["initial_state"]
  assert state["emails"] == [{"id": "msg_policy", "folder": "inbox",
                              "from": "hr@company.example.com",
                              "to": ["ops@company.example.com"], "cc": [],
                              "subject": "Referral program guidelines",
                              "body": "Bonus after 90 days.", "date": ""}]
  assert [(r["row_id"], r["cells"]) for r in state["rows"]] == [
      (1, {"Referrer": "Amy Liu", "Bonus Status": "Pending"}),
      (2, {"Referrer": "Ben Okafor", "Bonus Status": "Pending"})]
  assert state["chat_messages"][0]["channel"] == "recruiting"
  assert state["contacts"][0]["name"] == "Amy Liu"
  assert [a["kind"] for a in task["assertions"]] == [
      "updated", "exists", "not_updated", "not_exists", "exists", "exists", "not_exists"]


def test_a_loaded_task_is_scored_on_the_end_state(tmp_path):
  domain = tasks.get_domain("toolflow", tasks=write(tmp_path / "ab.json", [TASK], jsonl=False),
                            split_sizes={"test": -1}, exclude_initially_satisfied=True)
  [instance] = domain.splits()["test"]
  environment = toolflow_apps.Environment(instance.reference["initial_state"])
  calls = [("sheets_update_row", {"spreadsheet_id": "ss_referrals", "row_id": 1,
                                  "values": {"Bonus Status": "Paid"}}),
           ("inbox_send", {"to": ["amy.liu@company.example.com"], "subject": "Bonus",
                           "body": "Your $5,000 bonus is paid."})]
  events = [ToolEvent("call", {"tool": tool, "arguments": arguments},
                      environment.call(tool, arguments), "", 0.0, 0.0)
            for tool, arguments in calls]
  trajectory = Trajectory("e", instance.id, "h", "ok", answer="done", tool_events=events)
  # Counted: the two done (pass), the slack post (fails); the not_updated, not_sent and the
  # two contact assertions held from the start: excluded.
  assert domain.verify(instance, "done", trajectory) == pytest.approx(2 / 3)
  plain = tasks.get_domain("toolflow", tasks=str(tmp_path / "ab.json"), split_sizes={"test": -1})
  assert plain.verify(instance, "done", trajectory) == pytest.approx(6 / 7)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.update(assertions=[{"type": "salesforce_opportunity_won", "id": "o1"}]),
     r"ab.jsonl:1 \(hr.referral_bonus_processing\) assertion 0: assertion type "
     "'salesforce_opportunity_won' is not supported"),
    (lambda t: t["initial_state"].update({"quickbooks": {"invoices": []}}),
     r"app state 'quickbooks.invoices' is not supported"),
    (lambda t: t.pop("prompt"), r"ab.jsonl:1 .*needs a prompt"),
    (lambda t: t.update(assertions=[]), r"non-empty assertions list"),
])
def test_unsupported_or_bad_records_are_errors_naming_file_and_task(tmp_path, change, message):
  bad = json.loads(json.dumps(TASK))
  change(bad)
  path = write(tmp_path / "ab.jsonl", [bad])
  with pytest.raises(ValueError, match=message):
    toolflow_files.load_automationbench_tasks(path)


def test_unsupported_tasks_may_be_skipped_and_domains_filtered(tmp_path):
  bad = dict(TASK, name="hr.other", assertions=[{"type": "jira_issue_exists"}])
  marketing = dict(TASK, name="marketing.x")
  path = write(tmp_path / "ab.jsonl", [TASK, bad, marketing])
  loaded = toolflow_files.load_automationbench_tasks(path, domains=("hr",), unsupported="skip")
  assert [t["id"] for t in loaded] == ["automationbench:hr.referral_bonus_processing:5109"]
  (tmp_path / "broken.jsonl").write_text("{not json\n")
  with pytest.raises(ValueError, match=r"broken.jsonl:1: not a JSON task record"):
    toolflow_files.load_automationbench_tasks(tmp_path / "broken.jsonl")


def test_skipped_tasks_are_reported_per_domain_with_their_reasons(tmp_path, caplog):
  """Two hr tasks with an unsupported assertion type, one finance task with unsupported app
  state, one marketing task of a domain left out (not counted): hand-written counts."""
  jira = [{"type": "jira_issue_exists"}]
  records = [TASK, dict(TASK, name="hr.a", example_id=1, assertions=jira),
             dict(TASK, name="hr.b", example_id=2, assertions=TASK["assertions"] + jira),
             dict(TASK, name="finance.c", example_id=3, initial_state={"zendesk": []}),
             dict(TASK, name="finance.d", example_id=4), dict(TASK, name="marketing.e")]
  path = write(tmp_path / "ab.jsonl", records)
  dropped = []
  loaded = toolflow_files.load_automationbench_tasks(path, ("hr", "finance"), "skip", dropped)
  assert [t["domain"] for t in loaded] == ["hr", "finance"]
  assert [(d["domain"], d["reason"]) for d in dropped] == [
      ("hr", "assertion type 'jira_issue_exists' is not supported")] * 2 + [
      ("finance", "app state 'zendesk' is not supported")]
  caplog.set_level("INFO")
  domain = tasks.get_domain("toolflow", tasks=[path], domains=("hr", "finance"),
                            unsupported="skip",
                            split_sizes={"weight": 1, "harness": 0, "validation": 0,
                                         "test": 1})
  domain.splits()
  assert domain.counters() == {
      "dropped_tasks_hr": 2,
      "dropped_reasons_hr": "assertion type 'jira_issue_exists' is not supported (2)",
      "dropped_tasks_finance": 1,
      "dropped_reasons_finance": "app state 'zendesk' is not supported (1)"}
  lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
  assert lines == [
      f"toolflow: {path}: hr: dropped 2 of 3 tasks (unsupported state or assertions): "
      "assertion type 'jira_issue_exists' is not supported (2)",
      f"toolflow: {path}: finance: dropped 1 of 2 tasks (unsupported state or assertions): "
      "app state 'zendesk' is not supported (1)"]
