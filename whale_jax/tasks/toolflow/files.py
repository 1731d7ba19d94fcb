"""AutomationBench task records as toolflow tasks: seeded app state, prompt, assertions.

  tasks = load_automationbench_tasks("automationbench_hr.jsonl", domains=("hr",))

AutomationBench (Zapier) publishes each task as a name "<domain>.<task>" (e.g.
"hr.referral_bonus_processing"), an example_id, a user prompt, a system prompt, the declared
tools, a seeded world state per app ("gmail.messages", "google_sheets...", "slack...") and
a list of assertions {"type": "<app>_<predicate>", ...parameters}. This loader reads such
records from .json (one task or a list) or .jsonl files, with the prompt under "prompt",
"user_prompt" or "instruction" and the state under "initial_state", "world_state" or "state",
keyed "<app>.<collection>" or {"<app>": {"<collection>": [...]}}.

Supported, mapped onto the toolflow apps (whale_jax.tasks.toolflow.apps):
  gmail.messages            -> emails (from_/from, to, cc, subject, body_plain/body, date;
                               folder "sent" when labelled SENT, else "inbox")
  google_sheets.spreadsheets -> spreadsheets and rows (worksheets with columns and rows of
                               {row_id, cells} or lists of cells)
  slack.channels, slack.users, slack.messages -> channels, chat_users, chat_messages
  hubspot.contacts, salesforce.contacts -> contacts (name or firstname/lastname, email, ...)
  google_calendar.events    -> events
  freshdesk.tickets, zendesk.tickets -> tickets
Assertion types: gmail_message_sent[_to][_with_body_contains], gmail_message_not_sent[_to]
[_with_body_contains], google_sheets_row_exists / _not_exists / _updated / _not_updated,
slack_message_exists / _in_channel / _not_exists / _not_in_channel, slack_dm_sent_to,
hubspot_contact_exists / _not_exists, freshdesk_ticket_has_note. Anything else is an error
naming the file, the task and the type (or, with unsupported="skip", the task is left out).
The tasks run on the toolflow tools, not AutomationBench's vendor-named tools; the declared
tools are kept only as a record.

Per-domain splits (split_by_domain): VACE splits its 209 HR / Marketing / Finance tasks
26/15/24, 27/22/23 and 27/21/24 (train/validation/test; VACE_SPLIT_SIZES_BY_DOMAIN). The
paper does not say how the tasks were drawn; here each domain's tasks are split on their own
by a seeded draw (splits.split_instances seeded by (seed, crc32 of the domain name)), a
guess. Partial credit follows toolflow_assertions, optionally with
AutomationBench's exclusion of assertions already true of the seeded state.
"""
import json
import os
import re
import zlib

from whale_jax.tasks import splits as splits_lib
from whale_jax.tasks.toolflow import assertions as toolflow_assertions

# VACE's AutomationBench subset (SPEC 2.5, Table 1): each domain's tasks split on their own.
VACE_SPLIT_SIZES_BY_DOMAIN = {
    "hr": {"weight": 26, "harness": 0, "validation": 15, "test": 24},
    "marketing": {"weight": 27, "harness": 0, "validation": 22, "test": 23},
    "finance": {"weight": 27, "harness": 0, "validation": 21, "test": 24},
}

APP_COLLECTIONS = {"gmail.messages": "emails", "google_sheets.spreadsheets": "spreadsheets",
                   "slack.channels": "channels", "slack.users": "chat_users",
                   "slack.messages": "chat_messages", "hubspot.contacts": "contacts",
                   "salesforce.contacts": "contacts", "google_calendar.events": "events",
                   "freshdesk.tickets": "tickets", "zendesk.tickets": "tickets"}


GMAIL_TYPES = ("gmail_message_sent", "gmail_message_sent_to",
               "gmail_message_sent_to_with_body_contains", "gmail_message_not_sent",
               "gmail_message_not_sent_to", "gmail_message_not_sent_to_with_body_contains",
               "gmail_message_not_sent_with_body")

SHEET_TYPES = {"google_sheets_row_exists": "exists", "google_sheets_row_not_exists": "not_exists",
               "google_sheets_row_updated": "updated",
               "google_sheets_row_not_updated": "not_updated"}


def _list(value):
  if value is None:
    return []
  return list(value) if isinstance(value, (list, tuple)) else [value]


def _emails(records):
  emails = []
  for i, record in enumerate(records):
    labels = [str(label).upper() for label in _list(record.get("labels") or
                                                    record.get("label_ids"))]
    to = record.get("to")
    emails.append({"id": str(record.get("id", f"msg_seed_{i}")),
                   "folder": "sent" if "SENT" in labels else "inbox",
                   "from": record.get("from_", record.get("from", "")),
                   "to": [t.strip() for t in to.split(",")] if isinstance(to, str) else
                   _list(to), "cc": _list(record.get("cc")),
                   "subject": record.get("subject", ""),
                   "body": record.get("body_plain", record.get("body", "")),
                   "date": str(record.get("date", ""))})
  return emails


def _spreadsheets(records):
  spreadsheets, rows = [], []
  for sheet in records:
    worksheets = []
    for k, worksheet in enumerate(sheet.get("worksheets") or [sheet]):
      worksheet_id = str(worksheet.get("id", f"ws_{k + 1}") if worksheet is not sheet
                         else "ws_1")
      columns = list(worksheet.get("columns") or worksheet.get("headers") or [])
      for i, row in enumerate(worksheet.get("rows") or [], 1):
        if isinstance(row, list):
          cells = dict(zip(columns, (str(v) for v in row)))
          row_id = i
        else:
          cells = {str(k): str(v) for k, v in (row.get("cells") or row.get("values") or
                                               {}).items()}
          row_id = int(row.get("row_id", row.get("id", i)))
        columns += [c for c in cells if c not in columns]
        rows.append({"id": f"{sheet['id']}:{worksheet_id}:{row_id}",
                     "spreadsheet_id": sheet["id"], "worksheet_id": worksheet_id,
                     "row_id": row_id, "cells": cells})
      worksheets.append({"id": worksheet_id, "title": worksheet.get("title", worksheet_id),
                         "columns": columns})
    spreadsheets.append({"id": sheet["id"], "title": sheet.get("title", sheet["id"]),
                         "worksheets": worksheets})
  return spreadsheets, rows


def _contacts(records):
  contacts = []
  for i, record in enumerate(records):
    name = record.get("name") or " ".join(
        str(record.get(k, "")) for k in ("firstname", "lastname")).strip()
    contacts.append({"id": str(record.get("id", f"contact_seed_{i}")), "name": name,
                     "email": record.get("email", ""), "company": record.get("company", ""),
                     "phone": record.get("phone", ""), "title": record.get("title", ""),
                     "status": record.get("status", ""), "tier": record.get("tier", "")})
  return contacts


def _state_items(raw):
  if not isinstance(raw, dict):
    return []
  items = []
  for key, value in raw.items():
    if isinstance(value, dict):
      items += [(f"{key}.{collection}", records) for collection, records in value.items()]
    else:
      items.append((key, value))
  return items


def convert_state(raw, where_from):
  state = {}
  for key, records in _state_items(raw):
    if key not in APP_COLLECTIONS:
      raise ValueError(f"{where_from}: app state {key!r} is not supported; supported: "
                       f"{', '.join(APP_COLLECTIONS)}.")
    records = _list(records)
    collection = APP_COLLECTIONS[key]
    if collection == "emails":
      state["emails"] = state.get("emails", []) + _emails(records)
    elif collection == "spreadsheets":
      spreadsheets, rows = _spreadsheets(records)
      state["spreadsheets"] = state.get("spreadsheets", []) + spreadsheets
      state["rows"] = state.get("rows", []) + rows
    elif collection == "contacts":
      state["contacts"] = state.get("contacts", []) + _contacts(records)
    elif collection == "chat_messages":
      channels = {c.get("id"): c.get("name") for c in _list(raw.get("slack", {}).get(
          "channels") if isinstance(raw.get("slack"), dict) else raw.get("slack.channels"))}
      state["chat_messages"] = state.get("chat_messages", []) + [
          {"id": str(m.get("id", f"chat_seed_{i}")),
           "channel": channels.get(m.get("channel_id"), m.get("channel_name",
                                                              m.get("channel"))),
           "to_user": m.get("to_user"), "user": m.get("user", m.get("user_id")),
           "text": m.get("text", "")} for i, m in enumerate(records)]
    else:
      state[collection] = state.get(collection, []) + [
          {"id": str(r.get("id", f"{collection}_seed_{i}")), **r} for i, r in enumerate(records)]
  return state


def _contains_list(value):
  return value if isinstance(value, list) else [value]


def convert_assertion(assertion, where_from):
  """The toolflow assertion for one AutomationBench assertion (see the module docstring)."""
  kind = assertion.get("type")
  params = {k: v for k, v in assertion.items() if k != "type"}
  if kind in GMAIL_TYPES:
    positive = "_not_" not in kind
    where = {"folder": "sent"}
    if params.get("to"):
      where["to"] = params["to"]
    contains = {}
    if "body_contains" in params:
      contains["body"] = _contains_list(params["body_contains"])
    if "subject_contains" in params:
      contains["subject"] = _contains_list(params["subject_contains"])
    return {"kind": "exists" if positive else "not_exists", "collection": "emails",
            "where": where, "contains": contains}
  if kind in SHEET_TYPES:
    where = {"spreadsheet_id": params.get("spreadsheet_id")}
    for key in ("worksheet_id", "row_id"):
      if key in params:
        where[key] = params[key]
    cells = params.get("cell_contains")
    contains = ({str(k): str(v) for k, v in cells.items()} if isinstance(cells, dict) else
                {"*": str(cells)} if cells is not None else {})
    return {"kind": SHEET_TYPES[kind], "collection": "rows", "where": where,
            "contains": contains}
  if kind in ("slack_message_exists", "slack_message_in_channel", "slack_message_not_exists",
              "slack_message_not_in_channel", "slack_dm_sent_to"):
    where = ({"to_user": params.get("user_id")} if kind == "slack_dm_sent_to" else
             {"channel": str(params.get("channel_name", params.get("channel", ""))).lstrip("#")})
    contains = ({"text": _contains_list(params["text_contains"])}
                if "text_contains" in params else {})
    return {"kind": "not_exists" if "_not_" in kind else "exists",
            "collection": "chat_messages", "where": where, "contains": contains}
  if kind in ("hubspot_contact_exists", "hubspot_contact_not_exists"):
    return {"kind": "exists" if kind == "hubspot_contact_exists" else "not_exists",
            "collection": "contacts",
            "where": {k: v for k, v in params.items() if k in ("email", "name")}}
  if kind == "freshdesk_ticket_has_note":
    return {"kind": "exists", "collection": "ticket_notes",
            "where": {"ticket_id": str(params.get("ticket_id"))},
            "contains": {"body": _contains_list(params.get("body_contains", []))}}
  raise ValueError(f"{where_from}: assertion type {kind!r} is not supported; see "
                   "whale_jax.tasks.toolflow.files for the supported types.")


def _records(path):
  with open(path, encoding="utf-8") as file:
    if path.endswith(".jsonl"):
      records = []
      for line_number, line in enumerate(file, 1):
        if line.strip():
          try:
            records.append((f"{path}:{line_number}", json.loads(line)))
          except ValueError as error:
            raise ValueError(f"{path}:{line_number}: not a JSON task record ({error}).") from None
      return records
    try:
      data = json.load(file)
    except ValueError as error:
      raise ValueError(f"{path}: not JSON ({error}).") from None
  data = data if isinstance(data, list) else [data]
  return [(f"{path}[{i}]", record) for i, record in enumerate(data)]


def _without_label(message, label):
  """The error's first clause with the task's label (and an 'assertion N' after it) left
  out: "assertion type 'x' is not supported", shared by every task that fails alike."""
  if message.startswith(label):
    message = message[len(label):]
    message = re.sub(r"^ assertion \d+", "", message)
  return message.lstrip(": ").split("; ")[0].strip()


def load_automationbench_tasks(path, domains=None, unsupported="error", dropped=None):
  """Toolflow task dicts {"id", "domain", "trigger", "initial_state", "assertions", "traps"}.

  Args:
    path: a .json or .jsonl file of AutomationBench task records.
    domains: keep only tasks of these domains (e.g. ("hr", "marketing", "finance")).
    unsupported: "error" (default) or "skip" for tasks with unsupported state or assertions.
    dropped: a list that each skipped task (of a kept domain) is appended to, as
      {"domain", "task", "reason"} (reason: the conversion error without the task's label).
  """
  path = os.fspath(path)
  if unsupported not in ("error", "skip"):
    raise ValueError(f"unsupported={unsupported!r}; use 'error' or 'skip'.")
  tasks = []
  for where, record in _records(path):
    if not isinstance(record, dict):
      raise ValueError(f"{where}: a task record must be a JSON object.")
    name = record.get("name") or record.get("task") or ""
    domain = record.get("domain") or (name.split(".")[0] if "." in name else "")
    prompt = record.get("prompt") or record.get("user_prompt") or record.get("instruction")
    label = f"{where} ({name or 'unnamed'})"
    if not prompt or not isinstance(record.get("assertions"), list) or not record["assertions"]:
      raise ValueError(f"{label}: a task needs a prompt (prompt/user_prompt) and a non-empty "
                       "assertions list.")
    if domains is not None and domain not in domains:
      continue
    try:
      state = convert_state(record.get("initial_state", record.get(
          "world_state", record.get("state", {}))), label)
      assertions = [convert_assertion(a, f"{label} assertion {i}")
                    for i, a in enumerate(record["assertions"])]
      for i, assertion in enumerate(assertions):
        toolflow_assertions.check_assertion(assertion, f"{label} assertion {i}")
    except ValueError as error:
      if unsupported == "skip":
        if dropped is not None:
          dropped.append({"domain": domain, "task": label,
                          "reason": _without_label(str(error), label)})
        continue
      raise
    task_id = record.get("example_id", record.get("id", len(tasks)))
    tasks.append({"id": f"automationbench:{name or domain}:{task_id}", "domain": domain,
                  "trigger": prompt, "system_prompt": record.get("system_prompt", ""),
                  "declared_tools": list(record.get("tools", [])), "initial_state": state,
                  "assertions": assertions, "traps": {}})
  return tasks


def split_by_domain(instances, sizes_by_domain, seed):
  """{split: [Instance]}: each domain's instances (instance.public["domain"]) split on their
  own with that domain's sizes (a stratified split), concatenated in sizes_by_domain's order.

  Args:
    instances: toolflow Instances of every domain in sizes_by_domain (others are refused).
    sizes_by_domain: {domain: {split: size, -1 for the rest}}.
    seed: with a domain's name, seeds that domain's draw (the same inputs, the same splits).
  """
  by_domain = {domain: [] for domain in sizes_by_domain}
  for instance in instances:
    domain = instance.public.get("domain")
    if domain not in by_domain:
      raise ValueError(f"Task {instance.id!r} is of domain {domain!r}, which "
                       f"split_sizes_by_domain does not name ({', '.join(by_domain)}); add its "
                       "sizes or leave the domain out of domains=.")
    by_domain[domain].append(instance)
  splits = {name: [] for name in splits_lib.SPLIT_NAMES}
  for domain, sizes in sizes_by_domain.items():
    try:
      drawn = splits_lib.split_instances(by_domain[domain], sizes,
                                         [seed, zlib.crc32(domain.encode())])
    except ValueError as error:
      raise ValueError(f"split_sizes_by_domain[{domain!r}]: {error}") from None
    for name in splits_lib.SPLIT_NAMES:
      splits[name].extend(drawn[name])
  splits_lib.unique_instances([i for name in splits_lib.SPLIT_NAMES for i in splits[name]])
  return splits
