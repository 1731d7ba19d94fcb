"""Question-answering answers: reading the <answer> tag, SQuAD normalization, EM and F1.

The answer of a QA episode is the content of the last innermost <answer>…</answer> pair in
the text the harness returns: an <answer> followed by a </answer> with no other answer tag
between them. For plain and repeated tags this is WHALE's rfind rule (the last </answer>
with the nearest <answer> before it); for nested tags it keeps the inner answer instead of
a fragment that still holds a closing tag. Text without a complete pair has no answer.
"""
import collections
import re
import string

_ANSWER_PATTERN = re.compile(r"<answer>((?:(?!<answer>|</answer>).)*)</answer>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def extract_answer(text):
  """The stripped content of the last innermost <answer>…</answer> pair, or None."""
  if not isinstance(text, str):
    return None
  matches = _ANSWER_PATTERN.findall(text)
  if not matches:
    return None
  return matches[-1].strip()


def normalize_answer(text):
  """SQuAD normalization: lower case, no punctuation, no articles, single spaces."""
  text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def exact_match(prediction, golden_answers):
  """1.0 when the normalized prediction equals any normalized golden answer, else 0.0."""
  if prediction is None:
    return 0.0
  normalized = normalize_answer(prediction)
  return float(any(normalized == normalize_answer(gold) for gold in golden_answers))


def f1_score(prediction, golden_answers):
  """The best token-level F1 between the normalized prediction and any golden answer."""
  if prediction is None:
    return 0.0
  predicted_tokens = normalize_answer(prediction).split()
  best = 0.0
  for gold in golden_answers:
    gold_tokens = normalize_answer(gold).split()
    common = collections.Counter(predicted_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
      continue
    precision = overlap / len(predicted_tokens)
    recall = overlap / len(gold_tokens)
    best = max(best, 2 * precision * recall / (precision + recall))
  return best
