"""Each assertion kind, true and false, on hand-built states; partial credit and exclusion."""
import pytest

from whale_jax.tasks.toolflow import assertions as assertions_lib

INITIAL = {
    "rows": [{"id": "s:w:1", "spreadsheet_id": "s", "row_id": 1,
              "cells": {"Name": "Dana", "Status": "Pending"}},
             {"id": "s:w:2", "spreadsheet_id": "s", "row_id": 2,
              "cells": {"Name": "Omar", "Status": "Approved"}}],
    "emails": [],
    "tickets": [{"id": "t1", "queue": "review", "priority": "low", "subject": "RB-1"}],
}
FINAL = {
    "rows": [{"id": "s:w:1", "spreadsheet_id": "s", "row_id": 1,
              "cells": {"Name": "Dana", "Status": "Escalated"}},
             {"id": "s:w:2", "spreadsheet_id": "s", "row_id": 2,
              "cells": {"Name": "Omar", "Status": "Approved"}}],
    "emails": [{"id": "m1", "folder": "sent", "to": ["dana@x.co", "cc@x.co"],
                "body": "Your refund of 1,234.56 USD is approved."}],
    "tickets": [{"id": "t1", "queue": "review", "priority": "high", "subject": "RB-1"},
                {"id": "t2", "queue": "review", "priority": "high", "subject": "RB-2 review"}],
}


@pytest.mark.parametrize("assertion, expected", [
    ({"kind": "exists", "collection": "emails", "where": {"folder": "sent", "to": "DANA@x.co"},
      "contains": {"body": ["1,234.56 usd", "approved"]}}, True),       # list field, any case
    ({"kind": "exists", "collection": "emails", "where": {"to": "dana@x.co"},
      "contains": {"body": "1,234.57 USD"}}, False),
    ({"kind": "exists", "collection": "rows", "contains": {"*": "escalated"}}, True),
    ({"kind": "not_exists", "collection": "emails", "where": {"to": "omar@x.co"}}, True),
    ({"kind": "not_exists", "collection": "emails", "where": {"to": "cc@x.co"}}, False),
    ({"kind": "field_equals", "collection": "tickets", "where": {"queue": "review"},
      "field": "priority", "value": "high"}, True),
    ({"kind": "field_equals", "collection": "tickets", "where": {"queue": "it"},
      "field": "priority", "value": "high"}, False),                   # nothing matches
    ({"kind": "field_equals", "collection": "rows", "where": {"row_id": 1},
      "field": "Status", "value": "Approved"}, False),                 # a cell, looked up
    ({"kind": "updated", "collection": "rows", "where": {"row_id": 1},
      "contains": {"Status": "Escalated"}}, True),
    ({"kind": "updated", "collection": "rows", "where": {"row_id": 2},
      "contains": {"Status": "Approved"}}, False),                     # right text, never edited
    ({"kind": "not_updated", "collection": "rows", "where": {"row_id": 2}}, True),
    ({"kind": "not_updated", "collection": "rows", "where": {"row_id": 1}}, False),
    ({"kind": "not_updated", "collection": "rows", "where": {"row_id": 1},
      "contains": {"Status": "Approved"}}, True),                      # edited, but not to that
    ({"kind": "unchanged", "collection": "rows", "where": {"row_id": 2}}, True),
    ({"kind": "unchanged", "collection": "tickets", "where": {"id": "t1"}}, False),
    ({"kind": "count", "collection": "tickets", "where": {"queue": "review"}, "count": 2}, True),
    ({"kind": "count", "collection": "emails", "count": 2}, False),
])
def test_each_kind(assertion, expected):
  assertions_lib.check_assertion(assertion)
  assert assertions_lib.holds(assertion, INITIAL, FINAL) is expected


def test_unchanged_fails_when_the_record_is_deleted():
  final = {**FINAL, "rows": FINAL["rows"][:1]}
  assert not assertions_lib.holds({"kind": "unchanged", "collection": "rows",
                                   "where": {"row_id": 2}}, INITIAL, final)


def test_partial_credit_and_the_exclusion_of_assertions_true_from_the_start():
  checks = [{"kind": "updated", "collection": "rows", "where": {"row_id": 1},
             "contains": {"Status": "Escalated"}},                      # done: True
            {"kind": "not_exists", "collection": "emails", "where": {"to": "omar@x.co"}},
            {"kind": "unchanged", "collection": "tickets", "where": {"id": "t1"}},   # broken
            {"kind": "count", "collection": "emails", "count": 3}]      # not done
  results = assertions_lib.evaluate(checks, INITIAL, FINAL)
  assert results == [True, True, False, False]
  assert assertions_lib.partial_credit(results) == 0.5
  # not_exists held from the start to the end: excluded; unchanged held at the start but was
  # broken: still counted.
  counts = assertions_lib.counted(checks, INITIAL, results, exclude_initially_satisfied=True)
  assert counts == [True, False, True, True]
  assert assertions_lib.partial_credit(results, counts) == pytest.approx(1 / 3)
  assert assertions_lib.partial_credit([], []) == 1.0


@pytest.mark.parametrize("assertion, message", [
    ({"kind": "exist", "collection": "rows"}, "needs a kind in exists"),
    ({"kind": "exists"}, "needs a collection"),
    ({"kind": "exists", "collection": "rows", "where": ["x"]}, "where must be a dict"),
    ({"kind": "field_equals", "collection": "rows"}, "needs field, value"),
    ({"kind": "count", "collection": "rows"}, "needs count"),
])
def test_malformed_assertions(assertion, message):
  with pytest.raises(ValueError, match=message):
    assertions_lib.check_assertion(assertion, "tasks.jsonl:3")
