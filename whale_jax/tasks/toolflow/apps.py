"""Simulated business applications behind JSON-schema tools: one stateful environment per task.

  env = Environment(initial_state)
  env.call("crm_search_contacts", {"query": "Meridian"})   # {"contacts": [...]}
  env.call("inbox_send", {"to": "x"})                        # {"error": {"status": 400, ...}}
  env.state                                                  # the current state (JSON)

Apps and their collections (the state is one JSON dict of lists of records, each with an "id"):
  CRM          contacts {id, name, email, company, phone, title, status, tier},
               crm_notes {id, contact_id, body}
  inbox        emails {id, folder ("inbox" | "sent"), from, to [..], cc [..], subject, body, date}
  calendar     events {id, title, start, end, attendees [..], status}
  spreadsheet  spreadsheets {id, title, worksheets [{id, title, columns}]},
               rows {id, spreadsheet_id, worksheet_id, row_id, cells {column: text}}
  chat         channels {id, name}, chat_users {id, name, email},
               chat_messages {id, channel, to_user, user, text}
  ticketing    tickets {id, subject, requester, queue, priority, status, description},
               ticket_notes {id, ticket_id, body}
Every call is validated against its tool's JSON schema (types, required and unknown fields,
enums, e-mail and date formats) before anything changes; a bad call changes nothing and gets
{"error": {"status": 400, "type": "invalid_request", "message": ...}} back, a missing record
{"error": {"status": 404, "type": "not_found", ...}}, an unknown tool status 404 naming the
tools — what a real API would answer. New records get ids "<prefix>_<n>" in creation order, so
replaying the same calls on the same initial state gives the same state.
"""
import copy
import re

AGENT_EMAIL = "ops@company.example.com"
AGENT_USER = "U_AGENT"
COLLECTIONS = ("contacts", "crm_notes", "emails", "events", "spreadsheets", "rows", "channels",
               "chat_users", "chat_messages", "tickets", "ticket_notes")
PRIORITIES = ("low", "normal", "high", "urgent")
TICKET_STATUSES = ("open", "pending", "resolved", "closed")
CONTACT_FIELDS = ("phone", "email", "title", "status", "tier", "company")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$")
_FORMATS = {"email": (_EMAIL, "an e-mail address"), "date": (_DATE, "a date YYYY-MM-DD"),
            "date-time": (_DATE_TIME, "a time YYYY-MM-DDTHH:MM")}


def _string(description, **extra):
  return {"type": "string", "minLength": 1, "description": description, **extra}


EMAILS = {"type": "array", "items": _string("an e-mail address", format="email"), "minItems": 1}
CELL_VALUES = {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1,
               "description": "column name -> new cell text"}


def _tool(name, description, properties=None, required=()):
  return {"name": name, "description": description,
          "parameters": {"type": "object", "properties": properties or {},
                         "required": list(required), "additionalProperties": False}}


TOOLS = (
    _tool("crm_search_contacts", "Find CRM contacts whose name, email or company contains the "
          "query (case-insensitive).", {"query": _string("text to look for")}, ["query"]),
    _tool("crm_get_contact", "One CRM contact with its notes.",
          {"contact_id": _string("the contact's id")}, ["contact_id"]),
    _tool("crm_update_contact", "Change fields of a CRM contact.",
          {"contact_id": _string("the contact's id"),
           "fields": {"type": "object", "minProperties": 1, "additionalProperties": False,
                      "properties": {f: {"type": "string"} for f in CONTACT_FIELDS}}},
          ["contact_id", "fields"]),
    _tool("crm_create_contact", "Create a CRM contact.",
          {"name": _string("full name"), "email": _string("e-mail", format="email"),
           "company": {"type": "string"}, "phone": {"type": "string"},
           "title": {"type": "string"}, "tier": {"type": "string"}}, ["name", "email"]),
    _tool("crm_add_note", "Add a note to a CRM contact.",
          {"contact_id": _string("the contact's id"), "body": _string("note text")},
          ["contact_id", "body"]),
    _tool("inbox_search", "List e-mails, newest first, whose sender, subject or body contains "
          "the query; all of them without a query.",
          {"query": {"type": "string"}, "folder": {"type": "string", "enum": ["inbox", "sent"]}}),
    _tool("inbox_read", "One e-mail in full.", {"message_id": _string("the e-mail's id")},
          ["message_id"]),
    _tool("inbox_send", "Send an e-mail.",
          {"to": EMAILS, "cc": {**EMAILS, "minItems": 0}, "subject": _string("subject line"),
           "body": _string("message text")}, ["to", "subject", "body"]),
    _tool("calendar_find_events", "Calendar events whose title contains the query and/or that "
          "start on the date.", {"query": {"type": "string"},
                                 "date": _string("YYYY-MM-DD", format="date")}),
    _tool("calendar_create_event", "Create a calendar event.",
          {"title": _string("event title"), "start": _string("YYYY-MM-DDTHH:MM",
                                                             format="date-time"),
           "end": _string("YYYY-MM-DDTHH:MM", format="date-time"), "attendees": EMAILS},
          ["title", "start", "end", "attendees"]),
    _tool("calendar_cancel_event", "Cancel a calendar event.",
          {"event_id": _string("the event's id")}, ["event_id"]),
    _tool("sheets_list", "All spreadsheets with their worksheets and columns."),
    _tool("sheets_get_rows", "All rows of a worksheet (the first one by default).",
          {"spreadsheet_id": _string("the spreadsheet's id"),
           "worksheet_id": _string("the worksheet's id")}, ["spreadsheet_id"]),
    _tool("sheets_update_row", "Change cells of one row.",
          {"spreadsheet_id": _string("the spreadsheet's id"),
           "worksheet_id": _string("the worksheet's id"),
           "row_id": {"type": "integer", "minimum": 1}, "values": CELL_VALUES},
          ["spreadsheet_id", "row_id", "values"]),
    _tool("sheets_add_row", "Append a row to a worksheet.",
          {"spreadsheet_id": _string("the spreadsheet's id"),
           "worksheet_id": _string("the worksheet's id"), "values": CELL_VALUES},
          ["spreadsheet_id", "values"]),
    _tool("chat_list_channels", "All chat channels."),
    _tool("chat_read_channel", "Messages of a chat channel, oldest first.",
          {"channel": _string("channel name without #")}, ["channel"]),
    _tool("chat_post_message", "Post a message in a chat channel.",
          {"channel": _string("channel name without #"), "text": _string("message text")},
          ["channel", "text"]),
    _tool("chat_find_user", "Chat users whose name or email contains the query.",
          {"query": _string("text to look for")}, ["query"]),
    _tool("chat_send_dm", "Send a direct message to a chat user.",
          {"user_id": _string("the user's id"), "text": _string("message text")},
          ["user_id", "text"]),
    _tool("tickets_search", "Tickets whose subject or description contains the query, and/or "
          "with the status.", {"query": {"type": "string"},
                               "status": {"type": "string", "enum": list(TICKET_STATUSES)}}),
    _tool("tickets_get", "One ticket with its notes.", {"ticket_id": _string("the ticket's id")},
          ["ticket_id"]),
    _tool("tickets_create", "Open a ticket in a queue.",
          {"subject": _string("subject line"), "requester": _string("e-mail", format="email"),
           "queue": _string("queue name"), "priority": {"type": "string",
                                                        "enum": list(PRIORITIES)},
           "description": _string("what is needed")},
          ["subject", "requester", "queue", "priority", "description"]),
    _tool("tickets_update", "Change a ticket's status, priority or queue.",
          {"ticket_id": _string("the ticket's id"),
           "status": {"type": "string", "enum": list(TICKET_STATUSES)},
           "priority": {"type": "string", "enum": list(PRIORITIES)},
           "queue": _string("queue name")}, ["ticket_id"]),
    _tool("tickets_add_note", "Add a note to a ticket.",
          {"ticket_id": _string("the ticket's id"), "body": _string("note text")},
          ["ticket_id", "body"]),
)
TOOLS_BY_NAME = {tool["name"]: tool for tool in TOOLS}
APPS = {"crm": "crm_", "inbox": "inbox_", "calendar": "calendar_", "spreadsheet": "sheets_",
        "chat": "chat_", "ticketing": "tickets_"}


def tool_schemas():
  """The tools as OpenAI-style function schemas (what a harness hands the model)."""
  return [{"type": "function", "function": copy.deepcopy(tool)} for tool in TOOLS]


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def schema_errors(value, schema, path="arguments"):
  """The ways value breaks schema (the subset of JSON Schema the tools use), [] when valid."""
  kind = schema.get("type")
  if kind == "integer":
    if not isinstance(value, int) or isinstance(value, bool):
      return [f"{path} must be an integer; got {type(value).__name__} {value!r:.40}"]
    if "minimum" in schema and value < schema["minimum"]:
      return [f"{path} must be >= {schema['minimum']}; got {value}"]
    return []
  if kind in _TYPES and (not isinstance(value, _TYPES[kind]) or
                         (kind != "boolean" and isinstance(value, bool))):
    return [f"{path} must be a{'n' if kind[0] in 'aeo' else ''} {kind}; got "
            f"{type(value).__name__} {value!r:.40}"]
  errors = []
  if kind == "string":
    if len(value) < schema.get("minLength", 0) or (schema.get("minLength") and not value.strip()):
      errors.append(f"{path} must not be empty")
    if "enum" in schema and value not in schema["enum"]:
      errors.append(f"{path} must be one of {', '.join(schema['enum'])}; got {value!r}")
    pattern, form = _FORMATS.get(schema.get("format"), (None, ""))
    if pattern and value and not pattern.match(value):
      errors.append(f"{path} must be {form}; got {value!r}")
  elif kind == "array":
    if len(value) < schema.get("minItems", 0):
      errors.append(f"{path} needs at least {schema['minItems']} item(s)")
    for i, item in enumerate(value):
      errors += schema_errors(item, schema.get("items", {}), f"{path}[{i}]")
  elif kind == "object":
    properties = schema.get("properties", {})
    missing = [name for name in schema.get("required", []) if name not in value]
    if missing:
      errors.append(f"{path} is missing required field(s) {', '.join(missing)}")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
      if name in properties:
        errors += schema_errors(item, properties[name], f"{path}.{name}")
      elif extra is False:
        allowed = ", ".join(properties) or "none"
        errors.append(f"{path} has unknown field {name!r} (allowed: {allowed})")
      elif isinstance(extra, dict):
        errors += schema_errors(item, extra, f"{path}.{name}")
    if len(value) < schema.get("minProperties", 0):
      errors.append(f"{path} needs at least {schema['minProperties']} field(s)")
  return errors


class ApiError(Exception):
  def __init__(self, status, message):
    super().__init__(message)
    self.status = status


def _error(status, message):
  kind = {400: "invalid_request", 404: "not_found", 409: "conflict"}[status]
  return {"error": {"status": status, "type": kind, "message": message}}


def _has(text, query):
  return query.casefold() in str(text or "").casefold()


class Environment:
  """The state of one task's applications and the handlers of its tools."""

  def __init__(self, initial_state):
    self.state = {name: copy.deepcopy(list(initial_state.get(name, []))) for name in COLLECTIONS}
    self._counters = {name: len(records) for name, records in self.state.items()}

  def call(self, tool, arguments=None):
    """The JSON answer to one tool call (an {"error": ...} object when it is refused)."""
    if not isinstance(tool, str) or tool not in TOOLS_BY_NAME:
      return _error(404, f"There is no tool {tool!r}. Tools: {', '.join(TOOLS_BY_NAME)}.")
    arguments = {} if arguments is None else arguments
    if not isinstance(arguments, dict):
      return _error(400, f"{tool}: arguments must be an object of named fields; got "
                    f"{type(arguments).__name__}.")
    errors = schema_errors(arguments, TOOLS_BY_NAME[tool]["parameters"])
    if errors:
      return _error(400, f"{tool}: " + "; ".join(errors) + ".")
    try:
      return getattr(self, "_" + tool)(**arguments)
    except ApiError as error:
      return _error(error.status, f"{tool}: {error}")

  # ------------------------------------------------------------------ helpers

  def _new_id(self, collection, prefix):
    self._counters[collection] += 1
    return f"{prefix}_{self._counters[collection]}"

  def _get(self, collection, record_id, what):
    for record in self.state[collection]:
      if record["id"] == record_id:
        return record
    raise ApiError(404, f"no {what} with id {record_id!r}")

  def _worksheet(self, spreadsheet_id, worksheet_id=None):
    sheet = self._get("spreadsheets", spreadsheet_id, "spreadsheet")
    worksheets = sheet.get("worksheets") or []
    if not worksheets:
      raise ApiError(404, f"spreadsheet {spreadsheet_id!r} has no worksheets")
    if worksheet_id is None:
      return worksheets[0]
    for worksheet in worksheets:
      if worksheet["id"] == worksheet_id:
        return worksheet
    raise ApiError(404, f"spreadsheet {spreadsheet_id!r} has no worksheet {worksheet_id!r} "
                   f"(it has {', '.join(w['id'] for w in worksheets)})")

  def _rows(self, spreadsheet_id, worksheet_id):
    return [row for row in self.state["rows"] if row["spreadsheet_id"] == spreadsheet_id and
            row.get("worksheet_id") == worksheet_id]

  def _check_columns(self, worksheet, values):
    unknown = [c for c in values if c not in worksheet["columns"]]
    if unknown:
      raise ApiError(400, f"unknown column(s) {', '.join(map(repr, unknown))}; the columns "
                     f"are {', '.join(worksheet['columns'])}")

  # ------------------------------------------------------------------ CRM

  def _crm_search_contacts(self, query):
    return {"contacts": [{k: c.get(k) for k in ("id", "name", "email", "company", "tier",
                                                 "status")}
                         for c in self.state["contacts"]
                         if any(_has(c.get(f), query) for f in ("name", "email", "company"))]}

  def _crm_get_contact(self, contact_id):
    contact = self._get("contacts", contact_id, "contact")
    notes = [n["body"] for n in self.state["crm_notes"] if n["contact_id"] == contact_id]
    return {"contact": dict(contact), "notes": notes}

  def _crm_update_contact(self, contact_id, fields):
    contact = self._get("contacts", contact_id, "contact")
    if "email" in fields and not _EMAIL.match(fields["email"]):
      raise ApiError(400, f"fields.email must be an e-mail address; got {fields['email']!r}")
    contact.update(fields)
    return {"contact": dict(contact)}

  def _crm_create_contact(self, name, email, **fields):
    if any(c.get("email", "").casefold() == email.casefold() for c in self.state["contacts"]):
      raise ApiError(409, f"a contact with email {email!r} already exists")
    contact = {"id": self._new_id("contacts", "contact"), "name": name, "email": email,
               "company": "", "phone": "", "title": "", "status": "", "tier": "", **fields}
    self.state["contacts"].append(contact)
    return {"contact": dict(contact)}

  def _crm_add_note(self, contact_id, body):
    self._get("contacts", contact_id, "contact")
    note = {"id": self._new_id("crm_notes", "note"), "contact_id": contact_id, "body": body}
    self.state["crm_notes"].append(note)
    return {"note": dict(note)}

  # ------------------------------------------------------------------ inbox

  def _inbox_search(self, query="", folder=None):
    found = [e for e in self.state["emails"]
             if (folder is None or e["folder"] == folder) and
             any(_has(e.get(f), query) for f in ("from", "subject", "body"))]
    found.sort(key=lambda e: (e.get("date", ""), e["id"]), reverse=True)
    return {"emails": [{k: e.get(k) for k in ("id", "folder", "from", "to", "subject", "date")}
                       for e in found]}

  def _inbox_read(self, message_id):
    return {"email": dict(self._get("emails", message_id, "e-mail"))}

  def _inbox_send(self, to, subject, body, cc=()):
    email = {"id": self._new_id("emails", "msg"), "folder": "sent", "from": AGENT_EMAIL,
             "to": list(to), "cc": list(cc), "subject": subject, "body": body, "date": ""}
    self.state["emails"].append(email)
    return {"email": {"id": email["id"], "status": "sent"}}

  # ------------------------------------------------------------------ calendar

  def _calendar_find_events(self, query="", date=None):
    return {"events": [dict(e) for e in self.state["events"] if _has(e.get("title"), query) and
                       (date is None or str(e.get("start", "")).startswith(date))]}

  def _calendar_create_event(self, title, start, end, attendees):
    if end <= start:
      raise ApiError(400, f"end {end!r} must be after start {start!r}")
    event = {"id": self._new_id("events", "event"), "title": title, "start": start, "end": end,
             "attendees": list(attendees), "status": "confirmed"}
    self.state["events"].append(event)
    return {"event": dict(event)}

  def _calendar_cancel_event(self, event_id):
    event = self._get("events", event_id, "event")
    event["status"] = "cancelled"
    return {"event": dict(event)}

  # ------------------------------------------------------------------ spreadsheet

  def _sheets_list(self):
    return {"spreadsheets": copy.deepcopy(self.state["spreadsheets"])}

  def _sheets_get_rows(self, spreadsheet_id, worksheet_id=None):
    worksheet = self._worksheet(spreadsheet_id, worksheet_id)
    return {"worksheet_id": worksheet["id"], "columns": list(worksheet["columns"]),
            "rows": [{"row_id": r["row_id"], "cells": dict(r["cells"])}
                     for r in self._rows(spreadsheet_id, worksheet["id"])]}

  def _sheets_update_row(self, spreadsheet_id, row_id, values, worksheet_id=None):
    worksheet = self._worksheet(spreadsheet_id, worksheet_id)
    self._check_columns(worksheet, values)
    for row in self._rows(spreadsheet_id, worksheet["id"]):
      if row["row_id"] == row_id:
        row["cells"].update(values)
        return {"row": {"row_id": row_id, "cells": dict(row["cells"])}}
    raise ApiError(404, f"worksheet {worksheet['id']!r} has no row {row_id}")

  def _sheets_add_row(self, spreadsheet_id, values, worksheet_id=None):
    worksheet = self._worksheet(spreadsheet_id, worksheet_id)
    self._check_columns(worksheet, values)
    rows = self._rows(spreadsheet_id, worksheet["id"])
    row_id = max((r["row_id"] for r in rows), default=0) + 1
    cells = {column: values.get(column, "") for column in worksheet["columns"]}
    self.state["rows"].append({"id": f"{spreadsheet_id}:{worksheet['id']}:{row_id}",
                               "spreadsheet_id": spreadsheet_id, "worksheet_id": worksheet["id"],
                               "row_id": row_id, "cells": cells})
    return {"row": {"row_id": row_id, "cells": dict(cells)}}

  # ------------------------------------------------------------------ chat

  def _channel(self, name):
    for channel in self.state["channels"]:
      if channel["name"] == name.lstrip("#"):
        return channel
    raise ApiError(404, f"no channel #{name.lstrip('#')} (channels: "
                   f"{', '.join(c['name'] for c in self.state['channels'])})")

  def _chat_list_channels(self):
    return {"channels": [dict(c) for c in self.state["channels"]]}

  def _chat_read_channel(self, channel):
    name = self._channel(channel)["name"]
    return {"messages": [{"user": m.get("user"), "text": m["text"]}
                         for m in self.state["chat_messages"] if m.get("channel") == name]}

  def _chat_post_message(self, channel, text):
    name = self._channel(channel)["name"]
    message = {"id": self._new_id("chat_messages", "chat"), "channel": name, "to_user": None,
               "user": AGENT_USER, "text": text}
    self.state["chat_messages"].append(message)
    return {"message": {"id": message["id"], "channel": name}}

  def _chat_find_user(self, query):
    return {"users": [dict(u) for u in self.state["chat_users"]
                      if _has(u.get("name"), query) or _has(u.get("email"), query)]}

  def _chat_send_dm(self, user_id, text):
    self._get("chat_users", user_id, "chat user")
    message = {"id": self._new_id("chat_messages", "chat"), "channel": None, "to_user": user_id,
               "user": AGENT_USER, "text": text}
    self.state["chat_messages"].append(message)
    return {"message": {"id": message["id"], "to_user": user_id}}

  # ------------------------------------------------------------------ ticketing

  def _tickets_search(self, query="", status=None):
    return {"tickets": [dict(t) for t in self.state["tickets"]
                        if (status is None or t.get("status") == status) and
                        (_has(t.get("subject"), query) or _has(t.get("description"), query))]}

  def _tickets_get(self, ticket_id):
    ticket = self._get("tickets", ticket_id, "ticket")
    notes = [n["body"] for n in self.state["ticket_notes"] if n["ticket_id"] == ticket_id]
    return {"ticket": dict(ticket), "notes": notes}

  def _tickets_create(self, subject, requester, queue, priority, description):
    ticket = {"id": self._new_id("tickets", "ticket"), "subject": subject,
              "requester": requester, "queue": queue, "priority": priority, "status": "open",
              "description": description}
    self.state["tickets"].append(ticket)
    return {"ticket": dict(ticket)}

  def _tickets_update(self, ticket_id, **fields):
    if not fields:
      raise ApiError(400, "give at least one of status, priority, queue")
    ticket = self._get("tickets", ticket_id, "ticket")
    ticket.update(fields)
    return {"ticket": dict(ticket)}

  def _tickets_add_note(self, ticket_id, body):
    self._get("tickets", ticket_id, "ticket")
    note = {"id": self._new_id("ticket_notes", "tnote"), "ticket_id": ticket_id, "body": body}
    self.state["ticket_notes"].append(note)
    return {"note": dict(note)}
