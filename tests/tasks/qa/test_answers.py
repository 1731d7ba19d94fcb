"""Answer-tag extraction, SQuAD normalization, exact match and F1 on hand-made cases."""
import pytest

from whale_jax.tasks.qa import answers as qa_answers


@pytest.mark.parametrize("text, expected", [
    ("<answer>Paris</answer>", "Paris"),
    ("I think <answer> Paris </answer>.", "Paris"),
    # Repeated tags: the last pair wins.
    ("<answer>Lyon</answer> no wait <answer>Paris</answer>", "Paris"),
    # Nested tags: the innermost pair of the last answer.
    ("<answer>outer <answer>Paris</answer></answer>", "Paris"),
    # A trailing tag that never closes does not hide the last complete answer.
    ("<answer>Paris</answer> and then <answer>Lyon", "Paris"),
    # A stray closing tag before the real answer.
    ("</answer> text <answer>Rome</answer>", "Rome"),
    ("<answer>multi\nline</answer>", "multi\nline"),
    ("<answer></answer>", ""),
    ("no tags at all", None),
    ("<answer>unclosed", None),
    ("</answer>reversed<answer>", None),
    (None, None),
])
def test_extract_answer(text, expected):
  assert qa_answers.extract_answer(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  A   cat, an apple  ", "cat apple"),
    ("U.S.A.", "usa"),
    ("Theatre", "theatre"),  # "the" inside a word stays
])
def test_normalize_answer(text, expected):
  assert qa_answers.normalize_answer(text) == expected


def test_exact_match_against_any_golden_answer():
  assert qa_answers.exact_match("the Beatles", ["Beatles", "The Fab Four"]) == 1.0
  assert qa_answers.exact_match("Fab four!", ["Beatles", "The Fab Four"]) == 1.0
  assert qa_answers.exact_match("Beatles band", ["Beatles"]) == 0.0
  assert qa_answers.exact_match(None, ["Beatles"]) == 0.0


def test_f1_by_hand():
  # prediction tokens: [john, smith, jr]; gold: [john, smith] -> p=2/3, r=1, f1=0.8
  assert qa_answers.f1_score("John Smith Jr.", ["John Smith"]) == pytest.approx(0.8)
  # best over golden answers
  assert qa_answers.f1_score("John Smith Jr.", ["Mary", "John Smith Jr"]) == 1.0
  assert qa_answers.f1_score("Mary", ["John"]) == 0.0
  assert qa_answers.f1_score(None, ["John"]) == 0.0
