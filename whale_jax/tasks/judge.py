"""The LLM-judge verifier of SearchQA (WHALE): CORRECT/INCORRECT with an exact-match fallback.

The judge model sees JUDGE_PROMPT (WHALE's "V11" prompt, verbatim) filled with the question,
the reference answers and the predicted answer, and must reply with one word. It is asked at
temperature 0 with at most 256 new tokens. A reply that is neither CORRECT nor INCORRECT, a
call that raises or that times out, is retried with exponential backoff; when every attempt
fails the verdict falls back to normalized exact match (Verdict.source says which).

Constrained choice: with guided_choice (openai_judge's default) every request also carries
the choice ["CORRECT", "INCORRECT"] (JUDGE_CHOICES) in both spellings vLLM has used,
guided_choice (before 0.12) and structured_outputs={"choice": ...} (0.12 on; each version
ignores the other's field); whale_jax.serve takes either and answers with the choice of
highest log-probability under the model, so even a small judge model answers with one of
the prompt's two words. The words are the prompt's
own, not "yes"/"no": the prompt asks for CORRECT or INCORRECT. Turn it off
(`config.domain.judge.guided_choice=False`) for an endpoint that rejects unknown fields
(hosted APIs); free-text replies are parsed the same way.

Counts: every LLMJudge keeps JudgeCounts (judge.counts.to_json()): calls made, calls whose
reply parsed to a verdict, unparsable replies, failed calls, and verdicts by source (judge,
exact_match_fallback, no_answer). The SearchQA domain reports them (Domain.counters), and
runs put them in summary.json ("domain_counters") and the evaluation metrics rows.

The judge is served by anything that turns a prompt into a reply (`complete(prompt) -> str`):
`backend_completer` wraps any whale_jax LLMBackend (the in-process sampler), and
`client_completer` an OpenAI-compatible endpoint (whale_jax.sampling.openai_client).
`openai_judge(base_url, model)` builds the whole judge over an endpoint (e.g. a
`python -m whale_jax.serve` process):

  llm_judge = judge.openai_judge("http://127.0.0.1:8001/v1", model="judge", api_key_env=None)
  verdict = llm_judge(question, golden_answers, prediction)   # Verdict(score, source, ...)

An endpoint that is down does not degrade into exact match for the rest of the run: the
client raises openai_client.EndpointUnavailable after max_consecutive_failures failed calls in
a row, and the judge lets it through, so the run stops with that error.

Departure from WHALE: reference answers are joined with " | " in the {gold} slot (the exact
joining in WHALE's judge file is not known).
"""
import dataclasses
import re
import threading
import time

from whale_jax.sampling import openai_client
from whale_jax.sampling.api import SamplingParams
from whale_jax.tasks import qa_answers

JUDGE_PROMPT = (
    "You are an impartial judge for a question-answering task. Mark CORRECT when predicted "
    "answer refers to the same entity/value/fact as any reference. Acceptable: (1) Surface "
    "variation (case, articles, punctuation) (2) Alias / abbreviation / full-vs-short form "
    "('Pete' = 'Peter') (3) Added/removed qualifier ('actor X' = 'X') (4) Less-specific "
    "date/place CONTAINED in reference ('1962' if reference is 'September 10, 1962'; "
    "'Wellington' if reference is 'Wellington, New Zealand') (5) Number/unit form ('4' = "
    "'four', '188 acres' = '188 acre') (6) Different framing of the SAME geographic feature "
    "(e.g., 'Gulf of California' = 'between Baja California and Sonora' | both describe the "
    "same body of water) (7) Self-correcting answer | if the prediction explores alternatives "
    "but commits to a final answer that matches the reference, count CORRECT (e.g., 'X... "
    "actually, Y' where Y matches reference) Mark INCORRECT for: (a) Different specific "
    "person/place/song/team/company/year (b) Numeric/date mismatch where neither contains the "
    "other ('40 miles' vs '35 miles'; '1985' vs '1986') (c) Opposite or contradictory meaning "
    "(winner vs loser; 'no one' vs a named entity) (d) Different ENTITY TYPE even if related "
    "(city is NOT stadium; block is NOT channel; episode title is NOT episode number) (e) "
    "Failure to commit to an entity (only explanation/disclaimer) (f) Listing multiple "
    "distinct candidates joined by separators (slashes \"/\", pipes \"|\", commas, \"or\", "
    "\"either...or\") | even if one candidate matches the reference. A valid answer commits "
    "to a single entity; \"Beijing / Tokyo / Seoul\" listing the gold among 2+ alternatives "
    "is INCORRECT. (g) Verbatim passage or document quote | prediction is a multi-sentence "
    "passage, paragraph, or doc-formatted text (e.g., contains \"Doc N (Title: ...)\" "
    "patterns) that contains the reference answer as a substring but is not itself a concise "
    "answer. A valid answer is the entity/value alone, not the surrounding evidence prose. "
    "Question: {question} Reference answer(s): {gold} Predicted answer: {prediction} Respond "
    "with exactly one word: CORRECT or INCORRECT.")
JUDGE_SAMPLING = SamplingParams(max_tokens=256, temperature=0.0)
JUDGE_CHOICES = ("CORRECT", "INCORRECT")
_THINKING = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def judge_prompt(question, golden_answers, prediction):
  """JUDGE_PROMPT with its three slots filled."""
  return JUDGE_PROMPT.format(question=question, gold=" | ".join(golden_answers),
                             prediction=prediction)


def parse_judge_reply(reply):
  """True for CORRECT, False for INCORRECT, None for anything else (a malformed reply).

  Thinking blocks, surrounding whitespace and punctuation (e.g. "**CORRECT**.") are ignored;
  any other word makes the reply malformed.
  """
  if not isinstance(reply, str):
    return None
  word = re.sub(r"[^A-Za-z]", "", _THINKING.sub("", reply)).upper()
  if word == "CORRECT":
    return True
  if word == "INCORRECT":
    return False
  return None


@dataclasses.dataclass(frozen=True)
class Verdict:
  """The judge's decision on one prediction.

  Attributes:
    score: 1.0 or 0.0.
    source: "judge", "exact_match_fallback" (every attempt failed) or "no_answer".
    attempts: calls made to the judge model.
    errors: why each failed attempt failed (malformed reply text or the exception).
  """
  score: float
  source: str
  attempts: int
  errors: tuple[str, ...] = ()


class JudgeCounts:
  """What one judge did, thread-safe (episodes are scored on worker threads)."""

  FIELDS = ("calls", "parsed", "unparsable", "failed_calls", "verdicts_judge",
            "verdicts_exact_match_fallback", "verdicts_no_answer")

  def __init__(self):
    self._lock = threading.Lock()
    self._counts = dict.fromkeys(self.FIELDS, 0)

  def add(self, name, amount=1):
    with self._lock:
      self._counts[name] += amount

  def to_json(self):
    with self._lock:
      return dict(self._counts)


@dataclasses.dataclass(frozen=True)
class LLMJudge:
  """Scores a QA prediction with a judge model.

  Attributes:
    complete: prompt -> reply text; may raise (TimeoutError, connection errors).
    max_attempts: calls before falling back to exact match (WHALE: 3).
    backoff_seconds: wait before the second attempt; doubles after each failure.
    counts: the JudgeCounts of every call and verdict (module docstring).
  """
  complete: object
  max_attempts: int = 3
  backoff_seconds: float = 1.0
  counts: JudgeCounts = dataclasses.field(default_factory=JudgeCounts, compare=False)

  def __post_init__(self):
    if not callable(self.complete):
      raise TypeError("LLMJudge.complete must be a callable prompt -> reply text; wrap a "
                      "backend with judge.backend_completer(backend, tokenizer) or an endpoint "
                      "with judge.client_completer(OpenAICompatibleClient(...)).")
    if self.max_attempts < 1:
      raise ValueError(f"LLMJudge.max_attempts={self.max_attempts} must be >= 1.")

  def __call__(self, question, golden_answers, prediction):
    """A Verdict for `prediction` (None when the episode gave no answer)."""
    if prediction is None or not prediction.strip():
      self.counts.add("verdicts_no_answer")
      return Verdict(0.0, "no_answer", 0)
    prompt = judge_prompt(question, golden_answers, prediction)
    errors = []
    for attempt in range(self.max_attempts):
      if attempt and self.backoff_seconds > 0:
        time.sleep(self.backoff_seconds * 2**(attempt - 1))
      self.counts.add("calls")
      try:
        reply = self.complete(prompt)
      except openai_client.EndpointUnavailable:
        self.counts.add("failed_calls")
        raise  # the endpoint is down: stop the run rather than score by exact match
      except Exception as error:  # pylint: disable=broad-except  # one failed call
        self.counts.add("failed_calls")
        errors.append(f"{type(error).__name__}: {error}")
        continue
      decision = parse_judge_reply(reply)
      if decision is None:
        self.counts.add("unparsable")
        errors.append(f"malformed reply: {str(reply)[:200]!r}")
        continue
      self.counts.add("parsed")
      self.counts.add("verdicts_judge")
      return Verdict(float(decision), "judge", attempt + 1, tuple(errors))
    score = qa_answers.exact_match(prediction, golden_answers)
    self.counts.add("verdicts_exact_match_fallback")
    return Verdict(score, "exact_match_fallback", self.max_attempts, tuple(errors))


def backend_completer(backend, tokenizer, params=JUDGE_SAMPLING, timeout_seconds=60.0):
  """complete(prompt) served by an LLMBackend: one user message, chat template, greedy.

  A reply that does not arrive within timeout_seconds raises TimeoutError.
  """
  def complete(prompt):
    prompt_ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                               add_generation_prompt=True)
    completions = backend.submit(prompt_ids, params).result(timeout=timeout_seconds)
    completion = completions[0]
    return completion.text or tokenizer.decode(completion.token_ids, skip_special_tokens=True)
  return complete


def client_completer(client, max_tokens=JUDGE_SAMPLING.max_tokens):
  """complete(prompt) served by a sampling.openai_client.OpenAICompatibleClient, greedy.

  The client does its own transport retries; this judge's retries cover malformed replies
  and whatever error the client finally raises.
  """
  def complete(prompt):
    return client.chat([{"role": "user", "content": prompt}], temperature=0.0,
                       max_tokens=max_tokens).text
  return complete


def openai_judge(base_url, model, api_key_env=None, timeout_seconds=60.0, max_retries=3,
                 max_consecutive_failures=3, max_attempts=3, backoff_seconds=1.0,
                 max_tokens=JUDGE_SAMPLING.max_tokens, guided_choice=True):
  """An LLMJudge over an OpenAI-compatible endpoint (JUDGE_PROMPT, temperature 0).

  Args:
    base_url: the endpoint's API root, e.g. "http://127.0.0.1:8001/v1".
    model: the model name the endpoint serves.
    api_key_env: environment variable with the API key; None for a keyless local server.
    timeout_seconds, max_retries, max_consecutive_failures: the client's (transport retries of
      one call, and failed calls in a row before EndpointUnavailable stops the run).
    max_attempts, backoff_seconds: the judge's (calls per verdict before the exact-match
      fallback; a malformed reply or a failed call uses one).
    max_tokens: the judge's reply budget (WHALE: 256).
    guided_choice: send JUDGE_CHOICES as the allowed replies with every request (module
      docstring); False for an endpoint that rejects the fields.
  """
  if not isinstance(guided_choice, bool):
    raise ValueError(f"guided_choice={guided_choice!r} must be True (constrain the reply to "
                     f"{' or '.join(JUDGE_CHOICES)}, for vLLM or whale_jax.serve) or False.")
  client = openai_client.OpenAICompatibleClient(
      base_url, model, api_key_env=api_key_env, timeout_seconds=timeout_seconds,
      max_retries=max_retries, max_consecutive_failures=max_consecutive_failures,
      extra_body={"guided_choice": list(JUDGE_CHOICES),
                  "structured_outputs": {"choice": list(JUDGE_CHOICES)}}
      if guided_choice else None)
  return LLMJudge(client_completer(client, max_tokens=max_tokens), max_attempts=max_attempts,
                  backoff_seconds=backoff_seconds)
