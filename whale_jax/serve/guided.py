"""guided_choice of whale_jax.serve: a body's choices read and checked, and scored exactly
under the model (each choice's tokens after the prompt, temperature 1; the highest sum wins)."""
import threading

from whale_jax.serve import protocol

MAX_GUIDED_CHOICES = 64
SCORE_ROWS = 4  # rows of one guided_choice scoring call (more choices: several calls)


def choices(body, tokenizer, prompt_lengths, max_context, params):
  """(choices, their token ids) of a body's guided_choice (or structured_outputs.choice), or
  None when it has neither."""
  choices, field = body.get("guided_choice"), "guided_choice"
  structured = body.get("structured_outputs")
  if structured is not None:
    if not (isinstance(structured, dict) and set(structured) == {"choice"}):
      raise protocol.bad("structured_outputs", '{"choice": [...]} (of the structured outputs '
                         "only choice is supported)", structured)
    if choices is not None and choices != structured["choice"]:
      raise protocol.RequestError(400, "'guided_choice' and 'structured_outputs.choice' differ; "
                                  "send one of them.", "structured_outputs")
    choices, field = structured["choice"], "structured_outputs.choice"
  if choices is None:
    return None
  if not (isinstance(choices, list) and 1 <= len(choices) <= MAX_GUIDED_CHOICES and
          all(isinstance(c, str) and c for c in choices)):
    raise protocol.bad(field, f"a list of 1 to {MAX_GUIDED_CHOICES} non-empty strings",
                       choices)
  if len(set(choices)) != len(choices):
    raise protocol.bad(field, "a list of distinct strings", choices)
  if params.n != 1:
    raise protocol.RequestError(400, f"'n'={params.n} with '{field}': the choice is exact, so "
                                "ask for n=1.", "n")
  if len(prompt_lengths) != 1:
    raise protocol.RequestError(400, f"'{field}' takes one prompt; send one request per "
                                "prompt.", "prompt")
  choice_ids = [tokenizer.encode(c) for c in choices]
  for choice, ids in zip(choices, choice_ids):
    if not ids:
      raise protocol.bad(field, "strings that each encode to at least one token", choice)
    if prompt_lengths[0] + len(ids) > max_context:
      raise protocol.RequestError(400, f"'{field}' {choice!r} ({len(ids)} tokens) after the "
                                  f"{prompt_lengths[0]}-token prompt exceeds this server's "
                                  f"context of {max_context} tokens.", field)
  return choices, choice_ids


class Scorer:
  """Per-token log-probabilities of token rows under a sampler's current params, in calls of
  SCORE_ROWS rows by one of its cache lengths (shapes that warm-up compiles once each)."""

  def __init__(self, sampler):
    self.sampler = sampler
    self._lock = threading.Lock()
    self._function = None

  def score_rows(self, rows):
    """Per-token log-probabilities [len(rows), bucket] of token rows under the model
    (train.logprobs.token_logprobs: entry t is log p(row[t] | row[:t]), temperature 1), in
    calls of SCORE_ROWS rows by one of the engine's cache lengths (the shapes warm_up
    compiles)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from whale_jax.sampling import buckets  # pylint: disable=import-outside-toplevel
    length = buckets.bucket_for(self.sampler.cache_lengths,
                                   max(len(row) for row in rows))
    return np.concatenate([self.score_call(rows[i:i + SCORE_ROWS], length)
                           for i in range(0, len(rows), SCORE_ROWS)])

  def score_call(self, rows, length):
    """score_rows of at most SCORE_ROWS rows, padded to [SCORE_ROWS, length]: one call."""
    import jax  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    from whale_jax.train import logprobs as logprobs_lib  # pylint: disable=import-outside-toplevel
    tokens = np.zeros((SCORE_ROWS, length), np.int32)
    segment_ids = np.zeros((SCORE_ROWS, length), np.int32)
    for r, row in enumerate(rows):
      tokens[r, :len(row)] = row
      segment_ids[r, :len(row)] = 1
    batch = {"tokens": tokens, "segment_ids": segment_ids,
             "positions": np.broadcast_to(np.arange(length, dtype=np.int32), tokens.shape)}
    with self._lock:  # one compile per length bucket, made by warm_up
      if self._function is None:
        config = self.sampler.config
        self._function = jax.jit(
            lambda params, batch: logprobs_lib.token_logprobs(params, config, batch))
      return np.asarray(self._function(self.sampler.params, batch))[:len(rows)]

  def choose(self, prompt, choice_ids):
    """(index of the best choice, its per-token logprobs, every choice's total)."""
    scores = self.score_rows([list(prompt) + list(ids) for ids in choice_ids])
    per_token = [[float(scores[r, len(prompt) + j]) for j in range(len(ids))]
                 for r, ids in enumerate(choice_ids)]
    totals = [sum(values) for values in per_token]
    best = max(range(len(totals)), key=lambda r: (totals[r], -r))
    return best, per_token[best], totals
