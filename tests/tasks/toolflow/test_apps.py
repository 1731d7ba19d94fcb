"""The simulated apps: every tool's schema errors, each tool's state change, API-style errors."""
import copy

import pytest

from whale_jax.tasks.toolflow import apps as toolflow_apps
from whale_jax.tasks.toolflow.apps import Environment

STATE = {
    "contacts": [{"id": "c1", "name": "Dana Whitfield", "email": "dana@company.example.com",
                  "company": "Meridian Corp", "phone": "", "title": "", "status": "active",
                  "tier": "SMB"},
                 {"id": "c2", "name": "Dana Whitfeld", "email": "dana@partner.example.com",
                  "company": "Partner Co", "phone": "", "title": "", "status": "active",
                  "tier": ""}],
    "emails": [{"id": "m1", "folder": "inbox", "from": "boss@company.example.com",
                "to": ["ops@company.example.com"], "cc": [], "subject": "Routing policy",
                "body": "Enterprise goes to exec.", "date": "2026-01-02"},
               {"id": "m2", "folder": "inbox", "from": "news@company.example.com",
                "to": ["ops@company.example.com"], "cc": [], "subject": "Newsletter",
                "body": "Hello.", "date": "2026-01-05"}],
    "events": [{"id": "e1", "title": "Standup", "start": "2026-03-02T09:00",
                "end": "2026-03-02T09:15", "attendees": ["ops@company.example.com"],
                "status": "confirmed"}],
    "spreadsheets": [{"id": "ss1", "title": "Tracker", "worksheets": [
        {"id": "ws1", "title": "Main", "columns": ["Name", "Status"]},
        {"id": "ws2", "title": "Archive", "columns": ["Name"]}]}],
    "rows": [{"id": "ss1:ws1:1", "spreadsheet_id": "ss1", "worksheet_id": "ws1", "row_id": 1,
              "cells": {"Name": "Dana", "Status": "Pending"}}],
    "channels": [{"id": "C1", "name": "general"}],
    "chat_users": [{"id": "U1", "name": "Dana Whitfield", "email": "dana@company.example.com"}],
    "chat_messages": [{"id": "chat_0", "channel": "general", "to_user": None, "user": "U1",
                       "text": "hi"}],
    "tickets": [{"id": "t1", "subject": "Printer jam", "requester": "x@company.example.com",
                 "queue": "it", "priority": "low", "status": "open", "description": "3rd floor"}],
}

# A valid call of every tool, against STATE.
VALID = {
    "crm_search_contacts": {"query": "dana"},
    "crm_get_contact": {"contact_id": "c1"},
    "crm_update_contact": {"contact_id": "c1", "fields": {"phone": "555-0100"}},
    "crm_create_contact": {"name": "Omar Sato", "email": "omar@company.example.com"},
    "crm_add_note": {"contact_id": "c1", "body": "Called."},
    "inbox_search": {"query": "policy"},
    "inbox_read": {"message_id": "m1"},
    "inbox_send": {"to": ["dana@company.example.com"], "subject": "Hi", "body": "Done."},
    "calendar_find_events": {"date": "2026-03-02"},
    "calendar_create_event": {"title": "Payout", "start": "2026-03-04T09:00",
                              "end": "2026-03-04T09:30", "attendees": ["dana@company.example.com"]},
    "calendar_cancel_event": {"event_id": "e1"},
    "sheets_list": {},
    "sheets_get_rows": {"spreadsheet_id": "ss1"},
    "sheets_update_row": {"spreadsheet_id": "ss1", "row_id": 1, "values": {"Status": "Done"}},
    "sheets_add_row": {"spreadsheet_id": "ss1", "values": {"Name": "Omar"}},
    "chat_list_channels": {},
    "chat_read_channel": {"channel": "general"},
    "chat_post_message": {"channel": "#general", "text": "Done"},
    "chat_find_user": {"query": "whitfield"},
    "chat_send_dm": {"user_id": "U1", "text": "Hi"},
    "tickets_search": {"status": "open"},
    "tickets_get": {"ticket_id": "t1"},
    "tickets_create": {"subject": "Review RB-1", "requester": "dana@company.example.com",
                       "queue": "hr-review", "priority": "high", "description": "Please."},
    "tickets_update": {"ticket_id": "t1", "status": "resolved"},
    "tickets_add_note": {"ticket_id": "t1", "body": "Fixed."},
}


def test_every_tool_has_a_valid_call_here():
  assert sorted(VALID) == sorted(toolflow_apps.TOOLS_BY_NAME)
  for tool, arguments in VALID.items():
    answer = Environment(STATE).call(tool, arguments)
    assert "error" not in answer, (tool, answer)


@pytest.mark.parametrize("tool", sorted(toolflow_apps.TOOLS_BY_NAME))
def test_schema_errors_change_nothing_and_say_what_is_wrong(tool):
  schema = toolflow_apps.TOOLS_BY_NAME[tool]["parameters"]
  environment = Environment(STATE)
  before = copy.deepcopy(environment.state)
  bad_calls = [({**VALID[tool], "colour": "red"}, "unknown field 'colour'"),
               ("not a dict", "arguments must be an object")]
  for name in schema["required"]:
    bad_calls.append(({k: v for k, v in VALID[tool].items() if k != name},
                      f"missing required field(s) {name}"))
  for name, value in VALID[tool].items():
    wrong = 7 if not isinstance(value, int) else "seven"
    bad_calls.append(({**VALID[tool], name: wrong}, f"arguments.{name} must be a"))
  for arguments, message in bad_calls:
    answer = environment.call(tool, arguments)
    assert answer["error"]["status"] == 400 and answer["error"]["type"] == "invalid_request"
    assert message in answer["error"]["message"] and answer["error"]["message"].startswith(tool)
  assert environment.state == before


@pytest.mark.parametrize("tool, arguments, status, message", [
    ("inbox_send", {"to": ["not-an-address"], "subject": "s", "body": "b"}, 400,
     "arguments.to[0] must be an e-mail address"),
    ("inbox_send", {"to": [], "subject": "s", "body": "b"}, 400, "at least 1 item"),
    ("inbox_send", {"to": ["a@b.co"], "subject": " ", "body": "b"}, 400, "must not be empty"),
    ("calendar_create_event", {"title": "t", "start": "March 4", "end": "2026-03-04T10:00",
                               "attendees": ["a@b.co"]}, 400, "YYYY-MM-DDTHH:MM"),
    ("calendar_create_event", {"title": "t", "start": "2026-03-04T10:00",
                               "end": "2026-03-04T09:00", "attendees": ["a@b.co"]}, 400,
     "must be after start"),
    ("calendar_find_events", {"date": "2026/03/02"}, 400, "YYYY-MM-DD"),
    ("tickets_create", {"subject": "s", "requester": "a@b.co", "queue": "q", "priority": "p1",
                        "description": "d"}, 400, "must be one of low, normal, high, urgent"),
    ("tickets_update", {"ticket_id": "t1"}, 400, "at least one of status"),
    ("sheets_update_row", {"spreadsheet_id": "ss1", "row_id": 0, "values": {"Status": "x"}},
     400, "must be >= 1"),
    ("sheets_update_row", {"spreadsheet_id": "ss1", "row_id": 1, "values": {}}, 400,
     "at least 1 field"),
    ("sheets_update_row", {"spreadsheet_id": "ss1", "row_id": 1, "values": {"Stat": "x"}}, 400,
     "unknown column(s) 'Stat'; the columns are Name, Status"),
    ("sheets_update_row", {"spreadsheet_id": "ss1", "row_id": 1, "values": {"Status": 3}}, 400,
     "arguments.values.Status must be a string"),
    ("crm_update_contact", {"contact_id": "c1", "fields": {"owner": "me"}}, 400,
     "unknown field 'owner'"),
    ("crm_create_contact", {"name": "D", "email": "dana@company.example.com"}, 409,
     "already exists"),
    ("crm_get_contact", {"contact_id": "c9"}, 404, "no contact with id 'c9'"),
    ("inbox_read", {"message_id": "m9"}, 404, "no e-mail with id 'm9'"),
    ("sheets_get_rows", {"spreadsheet_id": "ss1", "worksheet_id": "ws9"}, 404,
     "has no worksheet 'ws9' (it has ws1, ws2)"),
    ("sheets_update_row", {"spreadsheet_id": "ss1", "row_id": 5, "values": {"Status": "x"}},
     404, "has no row 5"),
    ("chat_post_message", {"channel": "random", "text": "x"}, 404, "no channel #random"),
    ("chat_send_dm", {"user_id": "U9", "text": "x"}, 404, "no chat user"),
    ("tickets_add_note", {"ticket_id": "t9", "body": "x"}, 404, "no ticket"),
    ("calendar_cancel_event", {"event_id": "e9"}, 404, "no event"),
    ("delete_everything", {}, 404, "There is no tool 'delete_everything'"),
])
def test_api_errors(tool, arguments, status, message):
  environment = Environment(STATE)
  answer = environment.call(tool, arguments)
  assert answer["error"]["status"] == status and message in answer["error"]["message"], answer
  assert environment.state == Environment(STATE).state


def test_crm_transitions():
  environment = Environment(STATE)
  found = environment.call("crm_search_contacts", {"query": "WHITF"})["contacts"]
  assert [c["id"] for c in found] == ["c1", "c2"]
  assert environment.call("crm_search_contacts", {"query": "meridian"})["contacts"][0]["id"] == "c1"
  environment.call("crm_update_contact", {"contact_id": "c2", "fields": {"tier": "Enterprise"}})
  assert environment.state["contacts"][1]["tier"] == "Enterprise"
  created = environment.call("crm_create_contact", {"name": "Omar Sato",
                                                    "email": "omar@company.example.com"})
  assert created["contact"]["id"] == "contact_3"
  environment.call("crm_add_note", {"contact_id": "contact_3", "body": "New lead."})
  assert environment.call("crm_get_contact", {"contact_id": "contact_3"})["notes"] == ["New lead."]


def test_inbox_transitions():
  environment = Environment(STATE)
  assert [e["id"] for e in environment.call("inbox_search", {})["emails"]] == ["m2", "m1"]
  assert [e["id"] for e in environment.call("inbox_search", {"query": "exec"})["emails"]] == ["m1"]
  environment.call("inbox_send", {"to": ["a@b.co"], "cc": ["c@d.co"], "subject": "S",
                                  "body": "B"})
  [sent] = [e for e in environment.state["emails"] if e["folder"] == "sent"]
  assert sent == {"id": "msg_3", "folder": "sent", "from": toolflow_apps.AGENT_EMAIL,
                  "to": ["a@b.co"], "cc": ["c@d.co"], "subject": "S", "body": "B", "date": ""}
  assert [e["id"] for e in environment.call("inbox_search", {"folder": "sent"})["emails"]] == [
      "msg_3"]


def test_calendar_sheets_chat_and_ticket_transitions():
  environment = Environment(STATE)
  environment.call("calendar_create_event", VALID["calendar_create_event"])
  environment.call("calendar_cancel_event", {"event_id": "e1"})
  assert [(e["id"], e["status"]) for e in environment.state["events"]] == [
      ("e1", "cancelled"), ("event_2", "confirmed")]
  assert len(environment.call("calendar_find_events", {"query": "payout"})["events"]) == 1
  environment.call("sheets_update_row", {"spreadsheet_id": "ss1", "row_id": 1,
                                         "values": {"Status": "Done"}})
  environment.call("sheets_add_row", {"spreadsheet_id": "ss1", "values": {"Name": "Omar"}})
  environment.call("sheets_add_row", {"spreadsheet_id": "ss1", "worksheet_id": "ws2",
                                      "values": {"Name": "Old"}})
  rows = environment.call("sheets_get_rows", {"spreadsheet_id": "ss1"})
  assert rows == {"worksheet_id": "ws1", "columns": ["Name", "Status"],
                  "rows": [{"row_id": 1, "cells": {"Name": "Dana", "Status": "Done"}},
                           {"row_id": 2, "cells": {"Name": "Omar", "Status": ""}}]}
  assert environment.call("sheets_get_rows", {"spreadsheet_id": "ss1", "worksheet_id": "ws2"})[
      "rows"] == [{"row_id": 1, "cells": {"Name": "Old"}}]
  environment.call("chat_post_message", {"channel": "#general", "text": "Done"})
  environment.call("chat_send_dm", {"user_id": "U1", "text": "Psst"})
  assert environment.call("chat_read_channel", {"channel": "general"})["messages"] == [
      {"user": "U1", "text": "hi"}, {"user": toolflow_apps.AGENT_USER, "text": "Done"}]
  assert environment.state["chat_messages"][-1]["to_user"] == "U1"
  created = environment.call("tickets_create", VALID["tickets_create"])["ticket"]
  assert (created["id"], created["status"]) == ("ticket_2", "open")
  environment.call("tickets_update", {"ticket_id": "ticket_2", "priority": "urgent"})
  environment.call("tickets_add_note", {"ticket_id": "ticket_2", "body": "Escalated."})
  assert environment.call("tickets_get", {"ticket_id": "ticket_2"})["notes"] == ["Escalated."]
  assert environment.state["tickets"][1]["priority"] == "urgent"
  assert [t["id"] for t in environment.call("tickets_search", {"query": "review"})[
      "tickets"]] == ["ticket_2"]


def test_the_initial_state_is_copied_and_schemas_are_openai_functions():
  environment = Environment(STATE)
  environment.call("crm_update_contact", {"contact_id": "c1", "fields": {"phone": "1"}})
  assert STATE["contacts"][0]["phone"] == ""
  schemas = toolflow_apps.tool_schemas()
  assert all(s["type"] == "function" and s["function"]["parameters"]["type"] == "object"
             for s in schemas)
  assert {s["function"]["name"] for s in schemas} == set(toolflow_apps.TOOLS_BY_NAME)


@pytest.mark.parametrize("tool", ["_crm_get_contact", "_get", "__init__", "state", "call",
                                  None, ["inbox_read"]])
def test_only_published_tools_can_be_called(tool):
  environment = Environment(STATE)
  answer = environment.call(tool, {"contact_id": "c1"})
  assert answer["error"]["status"] == 404 and "There is no tool" in answer["error"]["message"]
  assert environment.state == Environment(STATE).state
