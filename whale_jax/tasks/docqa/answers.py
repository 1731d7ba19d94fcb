"""OfficeQA's answer rules: numbers within a relative tolerance, units, percentages, dates, text.

  score_answer("36080 million", "<FINAL_ANSWER>36,080</FINAL_ANSWER>", tolerance=0.0)  # 1.0
  extract_final_answer("... <FINAL_ANSWER>12.5%</FINAL_ANSWER>")                     # "12.5%"

The rules follow OfficeQA's published scorer (reward.py of databricks/officeqa), re-implemented:
  - The answer is the content of the last <FINAL_ANSWER>...</FINAL_ANSWER> (case-insensitive).
  - Numbers are read after removing thousands commas and turning the Unicode minus into "-".
    A number may carry a "%" sign; the sign is ignored ("12.34%" matches "12.34"), so a
    fraction does not match its percent ("0.1234" does not match "12.34%").
  - One number in the ground truth: some number of the prediction must be within the relative
    tolerance, |truth - predicted| <= tolerance * |truth| (a zero truth needs a zero). Year-like
    integers (1900-2100) in the prediction are skipped unless the truth is itself year-like or
    has words, so "in 1953 it was 44,463" matches "44,463".
  - Several numbers in the ground truth (a list such as "[0.096, -184.143]"): each must be
    matched by some number of the prediction.
  - Words in the ground truth beyond numbers and unit words ("March 1977") must also appear in
    the prediction's words ("April 1977" fails, "1977" fails).
  - No numbers in the ground truth: case-insensitive text, quotes and parentheticals removed;
    the truth must appear inside the prediction.
  - Units: like the published scorer, the number as written is compared ("36080 million"
    matches "36080").

Departures from the published scorer (each also tested):
  - A prediction without <FINAL_ANSWER> tags scores 0 when require_tag=True (the domain's
    default; the published scorer then reads the whole text, where any number in a long reply
    can match by chance). Empty or missing predictions score 0 instead of raising.
  - Units also match by value: a number followed by thousand/million/billion/trillion (or
    k/m/mn/bn/b/t right after it) is also compared scaled, so "36.08 billion" matches
    "36,080 million". The published scorer detects the unit words but compares only the
    written numbers.
  - Dates: when the ground truth is a date ("March 3, 1977", "1977-03-03", "3/3/1977",
    "March 1977"), a prediction naming the same date in any of those forms matches.
  - Spraying numbers does not pay: a prediction with more than
    len(truth numbers) + MAX_EXTRA_NUMBERS numbers scores 0.
  - A "-" between two alphanumerics ("1929-1942", "FY2013-2023") is a range, not a minus sign.
"""
import datetime
import re

MAX_EXTRA_NUMBERS = 3
_FINAL_ANSWER = re.compile(r"<FINAL_ANSWER>(.*?)</FINAL_ANSWER>", re.DOTALL | re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\d.])(-?)(\d+(?:\.\d+)?|\.\d+)(%?)")
_UNIT_AFTER = re.compile(
    r"\s*(trillions?|billions?|millions?|thousands?|tn|bn|mn|[kmbt])\b", re.IGNORECASE)
_UNIT_SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "m": 1e6, "mn": 1e6,
                "billion": 1e9, "bn": 1e9, "b": 1e9, "trillion": 1e12, "tn": 1e12, "t": 1e12}
_UNIT_WORDS = ("trillions", "trillion", "billions", "billion", "millions", "million",
               "thousands", "thousand", "hundreds", "hundred", "percentage", "percent")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_MONTH_NAME = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DATE_PATTERNS = (
    (re.compile(_MONTH_NAME + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})", re.IGNORECASE),
     lambda m: (int(m.group(3)), _month(m.group(1)), int(m.group(2)))),
    (re.compile(r"(\d{1,2})\s+" + _MONTH_NAME + r",?\s+(\d{4})", re.IGNORECASE),
     lambda m: (int(m.group(3)), _month(m.group(2)), int(m.group(1)))),
    (re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})"),
     lambda m: (int(m.group(1)), int(m.group(2)), int(m.group(3)))),
    (re.compile(r"(\d{1,2})/(\d{1,2})/(\d{4})"),
     lambda m: (int(m.group(3)), int(m.group(1)), int(m.group(2)))),
    (re.compile(_MONTH_NAME + r",?\s+(\d{4})", re.IGNORECASE),
     lambda m: (int(m.group(2)), _month(m.group(1)), None)),
)


def _month(name):
  return next(i for i, month in enumerate(_MONTHS, 1) if month.startswith(name.lower()[:3]))


def extract_final_answer(text, require_tag=True):
  """The stripped content of the last <FINAL_ANSWER> pair; the whole text when there is none
  and require_tag is False; else None (also for empty text)."""
  if not isinstance(text, str) or not text.strip():
    return None
  matches = _FINAL_ANSWER.findall(text)
  if matches:
    return matches[-1].strip() or None
  return None if require_tag else text.strip()


def _normalize(text):
  return text.replace("\u2212", "-").replace("\u2013", "-").replace("\u2014", "-")


def extract_numbers(text):
  """[(value, scaled value)] for each number in text, in order.

  scaled value applies a unit right after the number ("2.5 billion" -> 2.5e9), else equals
  value. Thousands commas are removed first; a '-' right after a letter or digit is a range.
  """
  text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", _normalize(text))
  numbers = []
  for match in _NUMBER.finditer(text):
    sign, digits, _ = match.groups()
    start = match.start()
    if sign and start > 0 and text[start - 1].isalnum():
      sign = ""  # "1929-1942": a range
    value = float(sign + digits)
    unit = _UNIT_AFTER.match(text, match.end())
    scale = _UNIT_SCALES[unit.group(1).lower().rstrip("s")] if unit and (
        unit.group(1).lower().rstrip("s") in _UNIT_SCALES) else 1.0
    numbers.append((value, value * scale))
  return numbers


def significant_words(text):
  """The text less numbers, unit words and punctuation, lower case ("March 1977" -> "march")."""
  cleaned = re.sub(r"-?\d+(?:\.\d+)?%?", " ", _normalize(text).lower().replace(",", ""))
  for word in _UNIT_WORDS:
    cleaned = re.sub(rf"\b{word}\b", " ", cleaned)
  cleaned = re.sub(r"[^\w\s]", " ", cleaned)
  return re.sub(r"\s+", " ", cleaned).strip()


def _words_match(truth, predicted):
  truth_words = significant_words(truth)
  if len(truth_words) < 2:
    return True
  predicted_words = significant_words(predicted)
  return len(predicted_words) >= 2 and (truth_words in predicted_words or
                                        predicted_words in truth_words)


def _is_year(value):
  return 1900 <= value <= 2100 and value == int(value)


def _close(truth, predicted, tolerance):
  if truth == 0:
    return predicted == 0
  return abs(truth - predicted) <= tolerance * abs(truth) + 1e-12 * abs(truth)


def _number_matches(truth, predicted, tolerance):
  """Written numbers within tolerance, or (departure) unit-scaled values within tolerance."""
  return (_close(truth[0], predicted[0], tolerance) or
          _close(truth[1], predicted[1], tolerance))


def extract_dates(text):
  """[(year, month, day or None)] for each date written in one of the accepted forms."""
  dates, taken = [], []
  for pattern, parse in _DATE_PATTERNS:
    for match in pattern.finditer(text):
      if any(start < match.end() and match.start() < end for start, end in taken):
        continue
      year, month, day = parse(match)
      try:
        datetime.date(year, month, day or 1)
      except ValueError:
        continue
      dates.append((year, month, day))
      taken.append(match.span())
  return dates


def _date_match(truth, predicted):
  """True/False when the truth is exactly one date; None when the truth is not a date."""
  truth_dates = extract_dates(truth)
  if len(truth_dates) != 1:
    return None
  leftover = significant_words(re.sub(_MONTH_NAME, " ", truth, flags=re.IGNORECASE))
  if leftover:
    return None  # words beyond the date: not a pure date answer
  return truth_dates[0] in extract_dates(predicted)


def _text_clean(text):
  text = text.strip().lower().strip("\"'")
  return re.sub(r"\s+", " ", re.sub(r"\([^)]*\)", " ", text)).strip()


def match_answer(truth, predicted, tolerance=0.0):
  """Whether predicted (an answer, not a whole reply) matches truth under the rules above."""
  if not isinstance(truth, str) or not truth.strip():
    raise ValueError(f"The ground-truth answer {truth!r} is empty; every question needs one.")
  if not 0 <= tolerance <= 1:
    raise ValueError(f"tolerance={tolerance!r} must be a relative error in [0, 1] (0.01 = 1%).")
  if not isinstance(predicted, str) or not predicted.strip():
    return False
  date_match = _date_match(truth, predicted)
  if date_match:
    return True
  truth_numbers, predicted_numbers = extract_numbers(truth), extract_numbers(predicted)
  if truth_numbers and predicted_numbers:
    if len(predicted_numbers) > len(truth_numbers) + MAX_EXTRA_NUMBERS:
      return False
    if not _words_match(truth, predicted):
      return False
    keep_years = any(_is_year(value) for value, _ in truth_numbers) or (
        len(truth_numbers) == 1 and len(significant_words(truth)) >= 2)
    candidates = [number for number in predicted_numbers
                  if keep_years or not _is_year(number[0])]
    return all(any(_number_matches(number, candidate, tolerance) for candidate in candidates)
               for number in truth_numbers)
  if truth_numbers:
    return False
  truth_text, predicted_text = _text_clean(truth), _text_clean(predicted)
  return bool(truth_text) and truth_text in predicted_text


def score_answer(truth, reply, tolerance=0.0, require_tag=True):
  """1.0 if the reply's final answer matches truth (see match_answer), else 0.0."""
  predicted = extract_final_answer(reply, require_tag)
  return 1.0 if predicted is not None and match_answer(truth, predicted, tolerance) else 0.0
