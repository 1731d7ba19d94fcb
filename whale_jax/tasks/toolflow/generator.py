"""Offline business-workflow tasks with traps, for the HR, marketing and finance domains.

  tasks = generate_tasks("finance", count=10, seed=0)
  tasks[0] == {"id": "toolflow:finance:0", "domain": "finance", "trigger": "Please process ...",
               "initial_state": {...}, "assertions": [...],
               "traps": {"buried_policy": [3, 5, 6, 7], "stale_row": [1], "near_duplicate": [...]}}

Every task is one small company: a spreadsheet of pending requests (reimbursements in HR,
sponsorships in marketing, vendor invoices in finance) with one row already processed, an FX
Rates sheet, a CRM directory of the requesters, an inbox holding the review policy among
other mail, chat channels and a ticket queue. The trigger asks to process the pending requests
by the current policy. The policy (found only in the inbox) names the categories that need
review: those get Status "Escalated", a ticket in the review queue and a post in the review
channel; the others get "Approved" and a calendar event with the requester. Every requester
is e-mailed the amount in USD at the most recent FX rate, rounded half up to the cent.

Traps, and the assertions (indices into "assertions") each one targets:
  buried_policy   an older policy e-mail, superseded by the current one, names other
                  categories; following it flips the decision of some requests (their status,
                  ticket, channel post and calendar assertions).
  stale_row       the FX sheet holds an older rate for one currency beside the current one;
                  using it breaks the amount in the e-mails of requests in that currency.
  near_duplicate  one requester has a CRM namesake one letter apart with another address;
                  mailing the namesake breaks that request's e-mail assertions (and its
                  calendar invitation when it is approved).
Assertions that no trap targets guard the rest: the processed row stays unchanged, exactly
one e-mail per request is sent, every review ticket has priority high.
"""
import decimal
import random

DOMAINS = {
    "hr": dict(items="reimbursement requests", sheet="Reimbursement Tracker", prefix="RB",
               categories=("Tuition", "Relocation", "Equipment", "Wellness", "Travel",
                           "Childcare"),
               queue="hr-review", channel="hr-approvals", event="Reimbursement payout",
               policy="reimbursement policy"),
    "marketing": dict(items="sponsorship requests", sheet="Sponsorship Requests", prefix="SP",
                      categories=("Conference", "Podcast", "Influencer", "Print", "Webinar",
                                  "Meetup"),
                      queue="brand-review", channel="marketing-approvals",
                      event="Sponsorship kickoff", policy="sponsorship policy"),
    "finance": dict(items="vendor invoices", sheet="Invoice Queue", prefix="INV",
                    categories=("Software", "Consulting", "Hardware", "Facilities", "Legal",
                                "Catering"),
                    queue="finance-review", channel="finance-approvals", event="Payment run",
                    policy="invoice approval policy"),
}
FIRST_NAMES = ("Dana", "Omar", "Priya", "Lena", "Marco", "Aiko", "Tomas", "Zara", "Felix",
               "Nadia", "Ravi", "Ines")
SURNAMES = ("Whitfield", "Okafor", "Lindqvist", "Moreau", "Castillo", "Brennan", "Sato",
            "Halvorsen", "Adeyemi", "Kowalski", "Ferreira", "Nakamura")
CURRENCIES = ("EUR", "GBP", "CAD")
DISTRACTORS = (("facilities@company.example.com", "Office closed Monday",
                "The office is closed on Monday for maintenance."),
               ("it@company.example.com", "Laptop refresh", "New laptops ship next month."),
               ("events@company.example.com", "Team lunch", "Lunch is on Friday at noon."),
               ("news@company.example.com", "Company newsletter", "Highlights of the quarter "
                "and a note on the policy portal redesign."),
               ("ceo@company.example.com", "All hands", "All hands moves to Thursday."))
POLICY_TEXT = (
    "Effective {date}.{supersedes} Requests in these categories need review: {review}. For "
    "each of them set Status to \"Escalated\" in the sheet, open a ticket with priority high "
    "in the {queue} queue whose subject holds the request id, and post the request id in "
    "#{channel}. Approve all other requests: set Status to \"Approved\" and add a calendar "
    "event \"{event} <request id>\" on the request's date from 09:00 to 09:30 with the "
    "requester as attendee. Email every requester once with the amount in USD, converted at "
    "the most recent rate in the FX Rates sheet and rounded half up to the cent, written like "
    "1,234.56 USD.")
ITEMS_ID, FX_ID, WORKSHEET = "ss_items", "ss_fx", "ws_main"
ITEM_COLUMNS = ("Request", "Requester", "Category", "Amount", "Currency", "Date", "Status")


def usd_text(amount, rate):
  """'1,234.56 USD': amount x rate rounded half up to the cent."""
  value = (decimal.Decimal(amount) * decimal.Decimal(rate)).quantize(
      decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_UP)
  return f"{value:,.2f} USD"


def _near_duplicate(surname, random_state):
  i = random_state.randrange(1, len(surname) - 1)
  return surname[:i] + surname[i + 1:]  # one letter dropped: "Whitfield" -> "Whitfeld"


def _rows(spreadsheet_id, records):
  return [{"id": f"{spreadsheet_id}:{WORKSHEET}:{i}", "spreadsheet_id": spreadsheet_id,
           "worksheet_id": WORKSHEET, "row_id": i, "cells": cells}
          for i, cells in enumerate(records, 1)]


def _sample_categories(spec, random_state, num_items):
  """(current review set, old review set, item categories) with every trap effective."""
  while True:
    current = sorted(random_state.sample(spec["categories"], 2))
    old = sorted(random_state.sample(spec["categories"], 2))
    items = [random_state.choice(spec["categories"]) for _ in range(num_items)]
    for review in (current, old):
      decisions = [c in review for c in items]
      if not (any(decisions) and not all(decisions)):
        break
    else:
      if any((c in current) != (c in old) for c in items):
        return current, old, items


def generate_task(domain, index, seed=0):
  """One task of `domain` (see the module docstring)."""
  spec = DOMAINS[domain]
  random_state = random.Random(f"{domain}:{seed}:{index}")
  num_items = random_state.choice((3, 4))
  current, old, categories = _sample_categories(spec, random_state, num_items)
  people = random_state.sample([(f, s) for f in FIRST_NAMES for s in SURNAMES], num_items + 1)
  stale_currency = random_state.choice(CURRENCIES)
  currencies = [random_state.choice(("USD",) + CURRENCIES) for _ in range(num_items)]
  currencies[random_state.randrange(num_items)] = stale_currency
  rates = {c: f"{random_state.uniform(0.7, 1.5):.4f}" for c in CURRENCIES}
  stale_rate = f"{float(rates[stale_currency]) + random_state.choice((-1, 1)) * 0.07:.4f}"
  day = random_state.randint(2, 20)
  items = []
  for i, ((first, last), category, currency) in enumerate(zip(people, categories, currencies)):
    items.append({"request": f"{spec['prefix']}-{1000 + 7 * index + i}", "name": f"{first} {last}",
                  "email": f"{first}.{last}@company.example.com".lower(), "category": category,
                  "amount": f"{random_state.randint(200, 9000)}.{random_state.randint(0, 99):02d}",
                  "currency": currency, "date": f"2026-03-{day + 2 * i:02d}"})
  done_first, done_last = people[num_items]
  dup = random_state.choice(items)
  dup_last = _near_duplicate(dup["name"].split()[1], random_state)
  dup_name = f"{dup['name'].split()[0]} {dup_last}"
  dup_email = f"{dup_name.replace(' ', '.')}@partner.example.com".lower()

  contacts = [{"id": f"contact_{i + 1}", "name": item["name"], "email": item["email"],
               "company": "Company", "phone": "", "title": "", "status": "active", "tier": ""}
              for i, item in enumerate(items)]
  contacts.insert(random_state.randrange(len(contacts) + 1),
                  {"id": f"contact_{len(contacts) + 1}", "name": dup_name, "email": dup_email,
                   "company": "Partner Co", "phone": "", "title": "", "status": "active",
                   "tier": ""})
  fx_records = [{"Currency": c, "Rate to USD": rates[c], "As of": "2026-02-27"}
                for c in CURRENCIES]
  fx_records.insert(random_state.randrange(len(fx_records) + 1),
                    {"Currency": stale_currency, "Rate to USD": stale_rate, "As of": "2025-11-28"})
  item_records = [{"Request": it["request"], "Requester": it["name"], "Category": it["category"],
                   "Amount": it["amount"], "Currency": it["currency"], "Date": it["date"],
                   "Status": "Pending"} for it in items]
  processed_row = random_state.randint(1, len(item_records) + 1)
  item_records.insert(processed_row - 1, {
      "Request": f"{spec['prefix']}-{1006 + 7 * index}", "Requester": f"{done_first} {done_last}",
      "Category": current[0], "Amount": "150.00", "Currency": "USD", "Date": "2026-02-20",
      "Status": "Approved"})
  policy_subject = spec["policy"][0].upper() + spec["policy"][1:]
  policy = dict(queue=spec["queue"], channel=spec["channel"], event=spec["event"])
  emails = [{"id": "msg_old_policy", "folder": "inbox", "from": "controller@company.example.com",
             "to": ["ops@company.example.com"], "cc": [], "subject": policy_subject,
             "body": POLICY_TEXT.format(date="2025-06-01", supersedes="",
                                        review=", ".join(old), **policy), "date": "2025-06-01"},
            {"id": "msg_policy", "folder": "inbox", "from": "controller@company.example.com",
             "to": ["ops@company.example.com"], "cc": [], "subject": f"Updated {spec['policy']}",
             "body": POLICY_TEXT.format(date="2026-01-15", supersedes=" This replaces the "
                                        "version of 2025-06-01.", review=", ".join(current),
                                        **policy), "date": "2026-01-15"}]
  for k, (sender, subject, body) in enumerate(random_state.sample(DISTRACTORS, 4)):
    emails.append({"id": f"msg_{k + 1}", "folder": "inbox", "from": sender,
                   "to": ["ops@company.example.com"], "cc": [], "subject": subject,
                   "body": body, "date": f"2026-0{random_state.randint(1, 2)}-"
                   f"{random_state.randint(10, 28)}"})
  random_state.shuffle(emails)
  state = {
      "contacts": contacts, "emails": emails,
      "spreadsheets": [{"id": ITEMS_ID, "title": spec["sheet"], "worksheets": [
                            {"id": WORKSHEET, "title": "Requests", "columns": list(ITEM_COLUMNS)}]},
                       {"id": FX_ID, "title": "FX Rates", "worksheets": [
                           {"id": WORKSHEET, "title": "Rates",
                            "columns": ["Currency", "Rate to USD", "As of"]}]}],
      "rows": _rows(ITEMS_ID, item_records) + _rows(FX_ID, fx_records),
      "channels": [{"id": f"C{i}", "name": name} for i, name in
                   enumerate(("general", spec["channel"], "random"), 1)],
      "chat_users": [{"id": f"U{i}", "name": it["name"], "email": it["email"]}
                     for i, it in enumerate(items, 1)],
      "chat_messages": [{"id": "chat_0", "channel": "general", "to_user": None, "user": "U1",
                         "text": "Reminder: policies live in the inbox, not in chat."}],
      "tickets": [{"id": "ticket_0", "subject": "Printer jam", "requester":
                   "facilities@company.example.com", "queue": "it", "priority": "low",
                   "status": "open", "description": "Third floor printer."}],
  }
  assertions, traps = [], {"buried_policy": [], "stale_row": [], "near_duplicate": []}

  def add(assertion, *trap_names):
    for name in trap_names:
      traps[name].append(len(assertions))
    assertions.append(assertion)

  row_of = {cells["Request"]: i for i, cells in enumerate(item_records, 1)}
  for item in items:
    escalate = item["category"] in current
    flipped = ("buried_policy",) if escalate != (item["category"] in old) else ()
    stale = ("stale_row",) if item["currency"] == stale_currency else ()
    duplicate = ("near_duplicate",) if item is dup else ()
    rate = "1" if item["currency"] == "USD" else rates[item["currency"]]
    add({"kind": "updated", "collection": "rows",
         "where": {"spreadsheet_id": ITEMS_ID, "row_id": row_of[item["request"]]},
         "contains": {"Status": "Escalated" if escalate else "Approved"}}, *flipped)
    add({"kind": "exists", "collection": "emails",
         "where": {"folder": "sent", "to": item["email"]},
         "contains": {"body": usd_text(item["amount"], rate)}}, *stale, *duplicate)
    ticket = {"collection": "tickets", "where": {"queue": spec["queue"]},
              "contains": {"subject": item["request"]}}
    post = {"collection": "chat_messages", "where": {"channel": spec["channel"]},
            "contains": {"text": item["request"]}}
    event = {"collection": "events", "where": {"status": "confirmed"},
             "contains": {"title": f"{spec['event']} {item['request']}"}}
    if escalate:
      add({"kind": "exists", **ticket}, *flipped)
      add({"kind": "exists", **post}, *flipped)
      add({"kind": "not_exists", **event}, *flipped)
    else:
      add({"kind": "not_exists", **ticket}, *flipped)
      add({"kind": "not_exists", **post}, *flipped)
      event["where"]["attendees"] = item["email"]
      event["contains"]["start"] = item["date"]
      add({"kind": "exists", **event}, *flipped, *duplicate)
    if duplicate:
      add({"kind": "not_exists", "collection": "emails",
           "where": {"folder": "sent", "to": dup_email}}, "near_duplicate")
  add({"kind": "unchanged", "collection": "rows",
       "where": {"spreadsheet_id": ITEMS_ID, "row_id": processed_row}})
  add({"kind": "count", "collection": "emails", "where": {"folder": "sent"}, "count": num_items})
  add({"kind": "field_equals", "collection": "tickets", "where": {"queue": spec["queue"]},
       "field": "priority", "value": "high"})
  trigger = (f"Please process the pending {spec['items']} ({items[0]['request']} to "
             f"{items[-1]['request']}) in the {spec['sheet']} spreadsheet. "
             f"Follow our current {spec['policy']}, which was sent by email, and email each "
             "requester the amount in USD.")
  return {"id": f"toolflow:{domain}:{index}", "domain": domain, "trigger": trigger,
          "initial_state": state, "assertions": assertions, "traps": traps}


def generate_tasks(domain, count, seed=0):
  """count tasks of domain; request ids have four digits, so count must stay below 1284."""
  if domain not in DOMAINS:
    raise ValueError(f"No generated toolflow domain {domain!r}; choose from "
                     f"{', '.join(DOMAINS)}.")
  return [generate_task(domain, index, seed) for index in range(count)]
