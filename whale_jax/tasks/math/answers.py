r"""Math answers: the last \boxed{…} of a solution, normalized, and compared by value.

Strict extraction (as DAPO's strict_box_verify): only the content of the last `\boxed{…}`
counts, with balanced braces; a solution without one has no answer. `\boxed 5`, `\fbox{}` and
"Answer: 5" lines do not count.

Equivalence: both sides are normalized (right-hand side of the last "=", no `$`, `\left`,
`\right`, spacing commands, `\text{…}` wrappers, degree and percent signs, trailing unit
words, thousands separators; `\dfrac`/`\tfrac` -> `\frac`, `\frac12` -> `\frac{1}{2}`) and equal
strings match. Otherwise both are parsed as numbers by a small parser of their own — decimals,
fractions a/b and `\frac{a}{b}`, `\sqrt{…}`, `\sqrt[n]{…}`, `\pi`, powers, products and sums,
implicit products such as `2\sqrt{3}` — into exact sympy values, and match when equal
(rationals exactly, anything else to 40 significant digits). Nothing is ever passed to eval,
and powers are bounded, so a hostile answer cannot run code or exhaust the host.
Not handled: variables and equations, intervals, sets with reordered elements, matrices.

Departure from DAPO: the whole final answer is searched, not only its last 300 characters.
"""
import re

import sympy

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64

_SPACING = (r"\left", r"\right", r"\!", r"\,", r"\;", r"\:", r"\ ", "$", r"\displaystyle")
_TEXT_COMMANDS = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\s*{")
_UNIT_SUFFIX = re.compile(r"^([-+]?[\d.,/]+)\s*(?:[A-Za-z]{2,}\.?\s*)+$")
_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d+)?$")


def _matching_brace(text, open_index):
  """Index of the "}" closing the "{" at open_index, or -1."""
  depth = 0
  for i in range(open_index, len(text)):
    if text[i] == "{":
      depth += 1
    elif text[i] == "}":
      depth -= 1
      if depth == 0:
        return i
  return -1


def extract_boxed(text):
  r"""Content of the last \boxed{…} in text (balanced braces), or None."""
  if not isinstance(text, str):
    return None
  start = text.rfind("\\boxed{")
  while start != -1:
    close = _matching_brace(text, start + len("\\boxed"))
    if close != -1:
      return text[start + len("\\boxed{"):close].strip()
    start = text.rfind("\\boxed{", 0, start)
  return None


def _unwrap_commands(text, pattern):
  """Replaces `\\cmd{content}` by content for every command that pattern matches."""
  while True:
    match = pattern.search(text)
    if not match:
      return text
    close = _matching_brace(text, match.end() - 1)
    if close == -1:
      return text[:match.start()] + text[match.end():]
    text = text[:match.start()] + text[match.end():close] + text[close + 1:]


def normalize_math_answer(answer):
  """A canonical string for a final answer (see the module docstring)."""
  text = answer.strip()
  if "=" in text:
    text = text.rsplit("=", 1)[1]
  text = _unwrap_commands(text, _TEXT_COMMANDS)
  for spacing in _SPACING:
    text = text.replace(spacing, "")
  for degree in ("^{\\circ}", "^\\circ", "\\circ", "°", "\\%", "%"):
    text = text.replace(degree, "")
  text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
  text = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", text)
  text = re.sub(r"\\sqrt(\d)", r"\\sqrt{\1}", text)
  text = text.strip().rstrip(".").strip()
  unit = _UNIT_SUFFIX.match(text)
  if unit:
    text = unit.group(1)
  text = text.replace(" ", "")
  if _THOUSANDS.match(text):
    text = text.replace(",", "")
  return text


_TOKEN = re.compile(r"\s*(\d+\.\d*|\.\d+|\d+|\\frac|\\sqrt|\\pi|pi|\\cdot|\\times|\*\*|"
                    r"[-+*/^(){}\[\]])")


class _Parser:
  """Recursive descent over the tokens of a numeric expression; builds sympy values."""

  def __init__(self, text):
    self.tokens, position = [], 0
    while position < len(text):
      match = _TOKEN.match(text, position)
      if not match:
        raise ValueError(f"unsupported text at {text[position:position + 10]!r}")
      self.tokens.append(match.group(1))
      position = match.end()
    self.index = 0

  def peek(self):
    return self.tokens[self.index] if self.index < len(self.tokens) else None

  def take(self, expected=None):
    token = self.peek()
    if token is None or (expected is not None and token != expected):
      raise ValueError(f"expected {expected!r}, found {token!r}")
    self.index += 1
    return token

  def parse(self):
    value = self.sum()
    if self.peek() is not None:
      raise ValueError(f"unexpected {self.peek()!r}")
    return value

  def sum(self):
    value = self.product()
    while self.peek() in ("+", "-"):
      value = value + self.product() if self.take() == "+" else value - self.product()
    return value

  def product(self):
    value = self.unary()
    while True:
      token = self.peek()
      if token in ("*", "\\cdot", "\\times"):
        self.take()
        value = value * self.unary()
      elif token == "/":
        self.take()
        divisor = self.unary()
        if divisor == 0:
          raise ValueError("division by zero")
        value = value / divisor
      elif token is not None and (token[0].isdigit() or token in ("(", "\\frac", "\\sqrt",
                                                                  "\\pi", "pi", "{")):
        value = value * self.unary()  # implicit product: 2\sqrt{3}, 3\pi, 2(1+1)
      else:
        return value

  def unary(self):
    if self.peek() in ("+", "-"):
      sign = -1 if self.take() == "-" else 1
      return sign * self.unary()
    return self.power()

  def power(self):
    base = self.atom()
    if self.peek() in ("^", "**"):
      self.take()
      exponent = self.unary() if self.peek() != "{" else self.group("{", "}")
      if not exponent.is_Rational or abs(exponent) > MAX_EXPONENT or exponent.q > MAX_EXPONENT:
        raise ValueError(f"exponent {exponent} outside the supported range")
      return base**exponent
    return base

  def group(self, open_token, close_token):
    self.take(open_token)
    value = self.sum()
    self.take(close_token)
    return value

  def atom(self):
    token = self.peek()
    if token is None:
      raise ValueError("unexpected end")
    if token[0].isdigit() or token[0] == ".":
      return sympy.Rational(self.take())
    if token in ("\\pi", "pi"):
      self.take()
      return sympy.pi
    if token == "(":
      return self.group("(", ")")
    if token == "{":
      return self.group("{", "}")
    if token == "\\frac":
      self.take()
      numerator, denominator = self.group("{", "}"), self.group("{", "}")
      if denominator == 0:
        raise ValueError("division by zero")
      return numerator / denominator
    if token == "\\sqrt":
      self.take()
      degree = self.group("[", "]") if self.peek() == "[" else sympy.Integer(2)
      if not degree.is_Integer or not 2 <= degree <= MAX_EXPONENT:
        raise ValueError(f"root degree {degree} outside the supported range")
      return sympy.root(self.group("{", "}"), degree)
    raise ValueError(f"unexpected {token!r}")


def parse_number(text):
  """An exact sympy number for a normalized answer, or None if it is not a plain number."""
  if not text or len(text) > MAX_EXPRESSION_CHARS:
    return None
  try:
    value = _Parser(text).parse()
  except (ValueError, ZeroDivisionError, TypeError):
    return None
  if not value.is_number or value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
    return None
  return value


def equivalent(predicted, reference):
  """Whether two final answers (without \\boxed) denote the same value."""
  predicted, reference = normalize_math_answer(predicted), normalize_math_answer(reference)
  if predicted == reference:
    return True
  predicted_value, reference_value = parse_number(predicted), parse_number(reference)
  if predicted_value is None or reference_value is None:
    return False
  if predicted_value.is_Rational and reference_value.is_Rational:
    return predicted_value == reference_value
  difference = sympy.N(predicted_value - reference_value, 40)
  scale = max(1, abs(sympy.N(reference_value, 40)))
  return bool(abs(difference) <= sympy.Float("1e-30", 40) * scale)


def score_boxed(solution, reference):
  r"""1.0 when the last \boxed{} of solution is equivalent to the reference, else 0.0."""
  predicted = extract_boxed(solution)
  if predicted is None:
    return 0.0
  reference = extract_boxed(reference) or reference
  return float(equivalent(predicted, str(reference)))
