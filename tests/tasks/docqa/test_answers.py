"""OfficeQA's answer rules, case by case; expected values are written by hand from the rules
of OfficeQA's published scorer (and, marked so, from the departures docqa_answers states)."""
import pytest

from whale_jax.tasks.docqa import answers as docqa_answers


def tagged(text):
  return f"Working...\n<FINAL_ANSWER>{text}</FINAL_ANSWER>"


@pytest.mark.parametrize("truth, predicted, tolerance, expected", [
    # Numeric tolerance: |truth - predicted| <= tolerance * |truth|.
    ("2,602", "2602", 0.0, True),
    ("2,602", "2,602.0", 0.0, True),
    ("2,602", "2,603", 0.0, False),
    ("2,602", "2,603", 0.001, True),        # 1/2602 = 0.038% <= 0.1%
    ("2,602", "2,630", 0.01, False),        # 28/2602 = 1.08% > 1%
    ("2,602", "2,628", 0.01, True),         # 26/2602 = 0.9992% <= 1%
    ("4962.46", "4962.4", 0.0, False),
    ("0", "0", 0.0, True),
    ("0", "0.001", 0.05, False),             # a zero truth needs a zero
    ("-649", "-649", 0.0, True),
    ("-649", "649", 0.0, False),
    ("[0.096, \u2212184.143]", "[0.096, -184.143]", 0.0, True),   # Unicode minus
    # Lists: every number of the truth must be matched.
    ("[273.28, 54244, 56703]", "slope 273.28, intercept 54244, predicted 56703", 0.0, True),
    ("[273.28, 54244, 56703]", "[273.28, 54244]", 0.0, False),
    # Percentages: the sign is ignored, a fraction is not its percent.
    ("1608.80%", "1608.8%", 0.0, True),
    ("1608.80%", "1608.8", 0.0, True),
    ("1608.80%", "1608.8 percent", 0.0, True),
    ("12.34%", "0.1234", 0.0, False),
    # Units: the written number is compared ("36080 million" matches "36080").
    ("36080 million", "36080", 0.0, True),
    ("36080 million", "36,080 million", 0.0, True),
    ("997.3 billion", "997.3", 0.0, True),
    # Units by value (departure): scaled numbers also match.
    ("36080 million", "36.08 billion", 0.0, True),
    ("36080 million", "$36.08bn", 0.0, True),
    ("36080 million", "36.08 thousand", 0.0, False),
    # Years in the prediction are skipped unless the truth is a year or has words.
    ("44,463", "In 1953 the total was 44,463", 0.0, True),
    ("44,463", "1953", 0.0, False),
    ("1990", "1990", 0.0, True),
    ("1990", "around 1990", 0.0, True),
    # Hybrid answers: the words must match too.
    ("August 1986", "August 1986", 0.0, True),
    ("August 1986", "September 1986", 0.0, False),
    ("August 1986", "1986", 0.0, False),
    ("March 3, 1977", "March 3, 1977", 0.0, True),
    ("March 3, 1977", "March 4, 1977", 0.0, False),
    # Dates in other forms (departure).
    ("March 3, 1977", "1977-03-03", 0.0, True),
    ("March 3, 1977", "3/3/1977", 0.0, True),
    ("March 3, 1977", "3 March 1977", 0.0, True),
    ("March 3, 1977", "1977-03-04", 0.0, False),
    ("August 1986", "Aug. 1986", 0.0, True),
    # Text answers: case-insensitive containment, quotes and parentheticals removed.
    ("Bureau of the Public Debt", "the bureau of the public debt", 0.0, True),
    ("Federal Old-Age and Survivors Insurance (OASI) Trust Fund",
     "\"Federal Old-Age and Survivors Insurance Trust Fund\"", 0.0, True),
    ("Bureau of the Public Debt", "Bureau of Engraving", 0.0, False),
    # Ranges are not minus signs (departure).
    ("97.3", "over 1929-1942 it is 97.3", 0.0, True),
    # Malformed predictions.
    ("2,602", "", 0.0, False),
    ("2,602", "   ", 0.0, False),
    ("2,602", "no number here", 0.0, False),
    ("5", "1 2 3 4 5 6 7 8 9", 0.0, False),     # spraying numbers (departure)
])
def test_match_answer(truth, predicted, tolerance, expected):
  assert docqa_answers.match_answer(truth, predicted, tolerance) is expected
  assert docqa_answers.score_answer(truth, tagged(predicted), tolerance) == float(expected)


def test_the_last_final_answer_tag_counts_and_a_missing_tag_scores_zero():
  reply = "<FINAL_ANSWER>1</FINAL_ANSWER> no, <final_answer> 2,602 </final_answer>"
  assert docqa_answers.extract_final_answer(reply) == "2,602"
  assert docqa_answers.score_answer("2,602", reply) == 1.0
  assert docqa_answers.score_answer("2,602", "The answer is 2,602.") == 0.0
  # The published scorer's fallback: without tags, the whole reply is the answer.
  assert docqa_answers.score_answer("2,602", "The answer is 2,602.", require_tag=False) == 1.0
  assert docqa_answers.score_answer("2,602", "<FINAL_ANSWER> </FINAL_ANSWER>") == 0.0
  assert docqa_answers.score_answer("2,602", None) == 0.0


def test_bad_truth_or_tolerance_is_an_error():
  with pytest.raises(ValueError, match="ground-truth answer"):
    docqa_answers.match_answer("", "1")
  with pytest.raises(ValueError, match="tolerance"):
    docqa_answers.match_answer("1", "1", tolerance=5)


def test_numbers_units_and_dates_are_read():
  assert docqa_answers.extract_numbers("-5, 1,234.5 and 2.5 billion; FY2013-2023") == [
      (-5.0, -5.0), (1234.5, 1234.5), (2.5, 2.5e9), (2013.0, 2013.0), (2023.0, 2023.0)]
  assert docqa_answers.extract_dates("On March 3, 1977 and 1980-12-01, then June 1990") == [
      (1977, 3, 3), (1980, 12, 1), (1990, 6, None)]
