"""Where a generation ends, and its text: stop strings, stop tokens, end-of-sequence.

Rules (the same for every tokenizer):
  * A stop token (end-of-sequence id or SamplingParams.stop_token_ids) ends the sample; it is
    the last of token_ids, and text is the decoding of the tokens before it.
  * A stop string ends the sample at the first token j whose prefix decode(token_ids[:j + 1])
    contains any stop string. token_ids end with token j (the one that completes the stop
    string, even when it carries text past it); text is that prefix's decoding cut right after
    the earliest-ending occurrence of a stop string: it ends with the stop string.
  * Otherwise (max_tokens reached) text is the decoding of all token_ids.
Text is a view for people and harnesses; training uses token_ids, never re-tokenized text.
"""


def earliest_stop(text, stop_strings, start=0):
  """(end, stop string) of the occurrence that ends first at or after start, or None.

  Among occurrences ending at the same place, the longest (earliest-starting) wins.
  """
  best = None
  for stop in stop_strings:
    index = text.find(stop, start)
    if index < 0:
      continue
    candidate = (index + len(stop), -len(stop), stop)
    if best is None or candidate < best:
      best = candidate
  return None if best is None else (best[0], best[2])


class StopStringWatcher:
  """Watches one growing sample for stop strings, decoding once per batch of new tokens."""

  def __init__(self, tokenizer, stop_strings):
    self.tokenizer = tokenizer
    self.stop_strings = tuple(stop_strings)
    self._longest = max((len(s) for s in self.stop_strings), default=0)
    self._checked_tokens = 0
    self._checked_chars = 0

  def check(self, token_ids):
    """(number of tokens to keep, text, stop string) once a stop string appears, else None.

    Call after each batch of tokens appended to token_ids (the full list so far).
    """
    if not self.stop_strings or len(token_ids) == self._checked_tokens:
      return None
    text = self.tokenizer.decode(token_ids)
    # A stop string may straddle the boundary with text already checked.
    start = max(0, self._checked_chars - self._longest + 1)
    if earliest_stop(text, self.stop_strings, start) is None:
      self._checked_tokens = len(token_ids)
      # The last characters can change when more tokens arrive (an incomplete UTF-8 sequence
      # decodes to a replacement character), so the tail is checked again next time.
      self._checked_chars = max(0, len(text) - 4)
      return None
    for count in range(self._checked_tokens + 1, len(token_ids) + 1):
      prefix = self.tokenizer.decode(token_ids[:count])
      found = earliest_stop(prefix, self.stop_strings)
      if found is not None:
        return count, prefix[:found[0]], found[1]
    raise AssertionError("a stop string found in the full text must appear in a prefix")


def completion_text(tokenizer, token_ids, ended_by_token):
  """The text of a sample that ended by a stop token (dropped from text) or by length."""
  if tokenizer is None:
    return ""
  return tokenizer.decode(token_ids[:-1] if ended_by_token else token_ids)
