"""Generated toolflow tasks: a scripted policy that works only through the tools scores 1.0 on
every task, and one that falls for a trap loses exactly the assertions the trap targets."""
import decimal
import difflib
import re

import pytest

from whale_jax.tasks.toolflow import apps as toolflow_apps
from whale_jax.tasks.toolflow import assertions as toolflow_assertions
from whale_jax.tasks.toolflow import generator as toolflow_generator

TASKS_PER_DOMAIN = 24
TRAPS = ("buried_policy", "stale_row", "near_duplicate")


def scripted_policy(call, trigger, trap=None):
  """Does the task through call(tool, arguments) as its trigger and inbox say; with `trap`, it
  reads the oldest policy, the oldest FX rate, or mails the requester's CRM namesake."""
  listed = call("inbox_search", {"query": "policy"})["emails"]
  policies = [call("inbox_read", {"message_id": e["id"]})["email"] for e in listed]
  policies = [p for p in policies if "need review:" in p["body"]]
  policy = (min if trap == "buried_policy" else max)(policies, key=lambda p: p["date"])["body"]
  review = re.search(r"need review: (.+?)\. For", policy).group(1).split(", ")
  queue = re.search(r"in the (\S+) queue", policy).group(1)
  channel = re.search(r"post the request id in #([\w-]+)", policy).group(1)
  event = re.search(r'calendar event "(.+?) <request id>"', policy).group(1)
  sheets = {s["title"]: s["id"] for s in call("sheets_list", {})["spreadsheets"]}
  items_sheet = sheets[re.search(r"in the (.+?) spreadsheet", trigger).group(1)]
  dated_rates = {}
  for row in call("sheets_get_rows", {"spreadsheet_id": sheets["FX Rates"]})["rows"]:
    cells = row["cells"]
    dated_rates.setdefault(cells["Currency"], []).append((cells["As of"], cells["Rate to USD"]))
  pick = min if trap == "stale_row" else max
  rates = {currency: pick(values)[1] for currency, values in dated_rates.items()}
  rates["USD"] = "1"
  for row in call("sheets_get_rows", {"spreadsheet_id": items_sheet})["rows"]:
    cells = row["cells"]
    if cells["Status"] != "Pending":
      continue
    name = cells["Requester"]
    found = call("crm_search_contacts", {"query": name.split()[0]})["contacts"]
    namesakes = [c for c in found if c["name"] != name and
                 difflib.SequenceMatcher(None, c["name"], name).ratio() > 0.85]
    contact = (namesakes[0] if trap == "near_duplicate" and namesakes else
               next(c for c in found if c["name"] == name))
    usd = (decimal.Decimal(cells["Amount"]) * decimal.Decimal(rates[cells["Currency"]])).quantize(
        decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_UP)
    escalate = cells["Category"] in review
    request = cells["Request"]
    call("sheets_update_row", {"spreadsheet_id": items_sheet, "row_id": row["row_id"],
                               "values": {"Status": "Escalated" if escalate else "Approved"}})
    call("inbox_send", {"to": [contact["email"]], "subject": f"Request {request}",
                        "body": f"Hello {name}, request {request} comes to {usd:,.2f} USD."})
    if escalate:
      call("tickets_create", {"subject": f"Review {request}", "requester": contact["email"],
                              "queue": queue, "priority": "high",
                              "description": f"{cells['Category']} request of {name}."})
      call("chat_post_message", {"channel": channel, "text": f"{request} is in review."})
    else:
      call("calendar_create_event", {"title": f"{event} {request}",
                                     "start": f"{cells['Date']}T09:00",
                                     "end": f"{cells['Date']}T09:30",
                                     "attendees": [contact["email"]]})


def run_policy(task, trap=None):
  environment = toolflow_apps.Environment(task["initial_state"])
  answers = []

  def call(tool, arguments):
    answers.append(environment.call(tool, arguments))
    assert "error" not in answers[-1], (tool, arguments, answers[-1])
    return answers[-1]
  scripted_policy(call, task["trigger"], trap)
  initial = toolflow_apps.Environment(task["initial_state"]).state
  return toolflow_assertions.evaluate(task["assertions"], initial, environment.state)


@pytest.fixture(scope="module", params=sorted(toolflow_generator.DOMAINS))
def generated(request):
  return toolflow_generator.generate_tasks(request.param, TASKS_PER_DOMAIN, seed=0)


def test_the_perfect_policy_scores_one_on_every_task(generated):
  for task in generated:
    results = run_policy(task)
    assert toolflow_assertions.partial_credit(results) == 1.0, (task["id"], [
        a for a, r in zip(task["assertions"], results) if not r])


@pytest.mark.parametrize("trap", TRAPS)
def test_each_trap_costs_exactly_its_assertions(generated, trap):
  for task in generated:
    assert task["traps"][trap], (task["id"], trap)
    failed = [i for i, result in enumerate(run_policy(task, trap)) if not result]
    assert failed == sorted(task["traps"][trap]), (task["id"], trap)


def test_doing_nothing_scores_only_the_negative_assertions(generated):
  task = generated[0]
  initial = toolflow_apps.Environment(task["initial_state"]).state
  results = toolflow_assertions.evaluate(task["assertions"], initial, initial)
  negative = [a["kind"] in ("not_exists", "not_updated", "unchanged") for a in
              task["assertions"]]
  assert results == negative
  counts = toolflow_assertions.counted(task["assertions"], initial, results, True)
  assert toolflow_assertions.partial_credit(results, counts) == 0.0


def test_tasks_are_seeded_distinct_and_json():
  first = toolflow_generator.generate_tasks("hr", 3, seed=1)
  assert first == toolflow_generator.generate_tasks("hr", 3, seed=1)
  assert first != toolflow_generator.generate_tasks("hr", 3, seed=2)
  assert len({task["trigger"] for task in first}) == 3
  kinds = {a["kind"] for task in first for a in task["assertions"]}
  assert kinds == {"updated", "exists", "not_exists", "unchanged", "count", "field_equals"}
  with pytest.raises(ValueError, match="choose from hr, marketing, finance"):
    toolflow_generator.generate_tasks("sales", 1)
