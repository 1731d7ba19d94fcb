r"""Strict \boxed{} extraction and value equivalence on hand-made cases."""
import time

import pytest

from whale_jax.tasks.math import answers as math_answers


@pytest.mark.parametrize("text, expected", [
    (r"so the answer is \boxed{42}.", "42"),
    (r"\boxed{1} then corrected: \boxed{2}", "2"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"\boxed{ {a}{b} }", "{a}{b}"),
    (r"\boxed{7} and a broken \boxed{8", "7"),
    (r"Answer: 42", None),
    (r"\boxed 42", None),
    (r"\fbox{42}", None),
    (r"$42$", None),
    (None, None),
])
def test_extract_boxed(text, expected):
  assert math_answers.extract_boxed(text) == expected


@pytest.mark.parametrize("predicted, reference", [
    ("0.5", r"\frac{1}{2}"),
    (r"\dfrac{3}{4}", "0.75"),
    (r"\frac34", "3/4"),
    ("1,000", "1000"),
    ("12.0", "12"),
    (r"-\frac{3}{4}", r"\frac{-3}{4}"),
    (r"2\sqrt{3}", r"\sqrt{12}"),
    (r"\sqrt[3]{8}", "2"),
    (r"\frac{\pi}{2}", r"\pi/2"),
    ("x = 5", "5"),
    (r"50\%", "50"),
    (r"90^\circ", "90"),
    (r"18 \text{ inches}", "18"),
    (r"\left( 3 \right)", "3"),
    ("2^{-1}", "0.5"),
    ("$7$", "7"),
    (r"\text{(B)}", "(B)"),
])
def test_equivalent_forms(predicted, reference):
  assert math_answers.equivalent(predicted, reference)


@pytest.mark.parametrize("predicted, reference", [
    ("3.14", r"\pi"),
    ("0.33", r"\frac{1}{3}"),
    ("-5", "5"),
    ("12", "21"),
    (r"\frac{1}{0}", "1"),
    ("(1,2)", "(2,1)"),
    ("x+1", "x+2"),
    ("", "0"),
])
def test_different_values(predicted, reference):
  assert not math_answers.equivalent(predicted, reference)


def test_hostile_answers_are_refused_quickly():
  start = time.time()
  for hostile in ["9^{9^{9^{9}}}", "10^{100000000}", "__import__('os').system('true')",
                  r"\sqrt[100000]{2}", "(" * 500 + "1" + ")" * 500]:
    assert not math_answers.equivalent(hostile, "1")
  assert time.time() - start < 2


def test_score_boxed_is_strict():
  assert math_answers.score_boxed(r"Thus \boxed{\dfrac{1}{2}}", "0.5") == 1.0
  assert math_answers.score_boxed("Thus the answer is 0.5", "0.5") == 0.0
  assert math_answers.score_boxed(r"\boxed{0.5} no, \boxed{0.6}", "0.5") == 0.0
  assert math_answers.score_boxed(r"\boxed{204}", r"\boxed{204}") == 1.0
