"""The LLM-judge verifier of SearchQA (WHALE): CORRECT/INCORRECT with an exact-match fallback.

The judge model sees JUDGE_PROMPT (WHALE's "V11" prompt, verbatim) filled with the question,
the reference answers and the predicted answer, and must reply with one word. It is asked at
temperature 0 with at most 256 completion tokens. A reply that is neither CORRECT nor
INCORRECT, or a call that raises or times out, is asked again with exponential backoff; when
every attempt fails the verdict falls back to normalized exact match (Verdict.source says
which, and the counts keep the two apart).

  llm_judge = judge.openai_judge("https://api.openai.com/v1", model="gpt-5.4-mini",
                                 api_key_env="OPENAI_API_KEY", cache_dir="runs/r1/judge_cache")
  verdict = llm_judge(question, golden_answers, prediction)     # Verdict(score, source, ...)
  verdicts = llm_judge.judge_many([(question, golden_answers, prediction), ...])

Concurrency (WHALE: 64): judge_many asks up to max_concurrency distinct requests at once, and
the judge never has more than max_concurrency calls in flight, whatever thread asks. The
SearchQA domain scores a batch of episodes through it (Domain.verify_many).

Constrained choice (openai_judge's `constrained`): vLLM and whale_jax.serve can restrict the
reply to JUDGE_CHOICES, the prompt's own two words, so even a small judge model answers with
one of them. Every such request carries the choice in both spellings vLLM has used,
guided_choice (before 0.12) and structured_outputs={"choice": ...} (0.12 on; each version
ignores the other's field). A hosted API refuses unknown fields with a 400 that names one
("Unrecognized request argument supplied: guided_choice").
  "auto" (default): send the fields; on such a 400 warn once, stop sending them (for this
    judge) and ask the same request as free text, whose reply parse_judge_reply reads.
  "always": such a 400 stops the run with GuidedChoiceRefused.
  "never": never send the fields.
The mode in use ("guided_choice" or "free_text") is in judge.counts.to_json()["mode"].

Retries: the client re-sends a request after a 429 (waiting what Retry-After says, as seconds
or as an HTTP date), a 5xx, a timeout or a dropped connection, max_retries times with
exponential backoff from backoff_seconds; the judge then asks again after a failed call or a
malformed reply, up to max_attempts calls, before the exact-match fallback. An endpoint that
is down does not degrade into exact match for the rest of the run: the client raises
openai_client.EndpointUnavailable after max_consecutive_failures failed calls in a row (any
thread; a success resets it), and the judge lets it through, so the run stops with that error.
With max_attempts <= max_consecutive_failures, a verdict whose every call fails falls back
only when other calls succeed in between (as at 64 in flight); raise
max_consecutive_failures for WHALE's fallback on a lone failing request.

Cache (VerdictCache): judged verdicts (never fallbacks or no-answers) are kept under a key of
the judge model, the constrained setting, the reply budget, JUDGE_PROMPT's hash, and the
question, reference answers and prediction; with a folder (builders: the run's
workdir/judge_cache) they are appended to verdicts.jsonl there, so a resumed or repeated
evaluation asks nothing it has asked before. One os.write per line on an O_APPEND file:
threads and processes on one machine never interleave lines; a line cut off by a kill is
skipped on reading and the next line starts on a fresh one.

Counts: every LLMJudge keeps JudgeCounts (judge.counts.to_json()): calls made, calls whose
reply parsed to a verdict, unparsable replies, failed calls, verdicts by source (judge,
exact_match_fallback, no_answer), cache hits, retries (requests sent again), 429s, 5xx
answers, refused constrained-choice requests, prompt and completion tokens (the replies'
usage), and the constrained setting and mode. The SearchQA domain reports them
(Domain.counters, as judge_<name>), and runs put them in summary.json ("domain_counters") and
the evaluation metrics rows.

The judge is served by anything that turns a prompt into a reply (`complete(prompt) -> str`):
`backend_completer` wraps any whale_jax LLMBackend (the in-process sampler),
`client_completer` an OpenAICompatibleClient, and `EndpointCompleter` (what openai_judge
uses) an OpenAI-compatible endpoint with the constrained-choice modes and the accounting.

Departures from WHALE: reference answers are joined with " | " in the {gold} slot (the exact
joining in WHALE's judge file is not known); retries are two-level (transport, then verdict)
and a run stops when the endpoint is down instead of scoring everything by exact match.
"""
import concurrent.futures
import dataclasses
import datetime
import email.utils
import hashlib
import io
import json
import os
import re
import threading
import time
import urllib.error

from absl import logging

from whale_jax.sampling import openai_client
from whale_jax.sampling.api import SamplingParams
from whale_jax.tasks.qa import answers as qa_answers

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
JUDGE_PROMPT_SHA256 = hashlib.sha256(JUDGE_PROMPT.encode()).hexdigest()
CONSTRAINED = ("auto", "always", "never")
GUIDED_FIELDS = {"guided_choice": list(JUDGE_CHOICES),
                 "structured_outputs": {"choice": list(JUDGE_CHOICES)}}
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
    attempts: calls made to the judge model (0 for a verdict read from the cache).
    errors: why each failed attempt failed (malformed reply text or the exception).
  """
  score: float
  source: str
  attempts: int
  errors: tuple[str, ...] = ()


class GuidedChoiceRefused(RuntimeError):
  """The endpoint answered a 400 naming guided_choice / structured_outputs.

  With constrained="auto" the judge falls back to free text; with "always" it stops the run.
  """


class JudgeCounts:
  """What one judge did, thread-safe (verdicts are asked on worker threads).

  Attributes:
    constrained: the setting ("auto", "always", "never").
    mode: the fields the judge sends now: "guided_choice" or "free_text".
  """

  FIELDS = ("calls", "parsed", "unparsable", "failed_calls", "verdicts_judge",
            "verdicts_exact_match_fallback", "verdicts_no_answer", "cache_hits", "retries",
            "rate_limited", "server_errors", "guided_choice_refusals", "prompt_tokens",
            "completion_tokens")

  def __init__(self, constrained="never", mode="free_text"):
    self._lock = threading.Lock()
    self._counts = dict.fromkeys(self.FIELDS, 0)
    self.constrained, self.mode = constrained, mode

  def add(self, name, amount=1):
    with self._lock:
      self._counts[name] += amount

  def fall_back_to_free_text(self):
    """Sets mode to "free_text"; True for the one call that changed it."""
    with self._lock:
      changed, self.mode = self.mode != "free_text", "free_text"
      return changed

  def to_json(self):
    with self._lock:
      return {**self._counts, "constrained": self.constrained, "mode": self.mode}


class VerdictCache:
  """Judged scores by request, in memory and (with a folder) in folder/verdicts.jsonl.

  Args:
    folder: where verdicts.jsonl lives (created if missing); None keeps verdicts in memory.
    identity: what besides the pair decides the verdict: {"model", "constrained",
      "max_tokens"}; JUDGE_PROMPT's hash is added. A different identity never hits.
  Attributes:
    path: the file, or None.
    skipped_lines: lines of the file that did not parse (cut off by a kill) when it was read.
  """

  FILE_NAME = "verdicts.jsonl"

  def __init__(self, folder=None, identity=None):
    self._identity = json.dumps({**(identity or {}), "prompt_sha256": JUDGE_PROMPT_SHA256},
                                sort_keys=True)
    self._lock = threading.Lock()
    self._scores = {}
    self.path, self._fd, self.skipped_lines = None, None, 0
    if folder is None:
      return
    os.makedirs(folder, exist_ok=True)
    self.path = os.path.join(os.fspath(folder), self.FILE_NAME)
    ends_in_newline = True
    if os.path.exists(self.path):
      with open(self.path, "rb") as file:
        data = file.read()
      ends_in_newline = not data or data.endswith(b"\n")
      for line in data.splitlines():
        try:
          record = json.loads(line)
          self._scores[str(record["key"])] = float(record["score"])
        except (ValueError, KeyError, TypeError):
          self.skipped_lines += 1
    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    if not ends_in_newline:  # a line cut off by a kill: the next one starts on its own line
      self._write(b"\n")

  def key(self, question, golden_answers, prediction):
    request = json.dumps([question, list(golden_answers), prediction], ensure_ascii=False)
    return hashlib.sha256(f"{self._identity}\n{request}".encode()).hexdigest()

  def get(self, question, golden_answers, prediction):
    """The cached score of the request, or None."""
    with self._lock:
      return self._scores.get(self.key(question, golden_answers, prediction))

  def put(self, question, golden_answers, prediction, score):
    key = self.key(question, golden_answers, prediction)
    with self._lock:
      if key in self._scores:
        return
      self._scores[key] = float(score)
      if self._fd is not None:
        self._write(json.dumps({"key": key, "score": float(score)}).encode() + b"\n")

  def _write(self, data):
    while data:  # one write in practice; a short write finishes the same line under the lock
      data = data[os.write(self._fd, data):]

  def __len__(self):
    with self._lock:
      return len(self._scores)

  def close(self):
    with self._lock:
      if self._fd is not None:
        os.close(self._fd)
        self._fd = None


@dataclasses.dataclass(frozen=True)
class LLMJudge:
  """Scores QA predictions with a judge model.

  Attributes:
    complete: prompt -> reply text; may raise (TimeoutError, connection errors).
    max_attempts: calls before falling back to exact match (WHALE: 3).
    backoff_seconds: wait before the second attempt; doubles after each failure.
    max_concurrency: calls in flight at most, over all threads (WHALE: 64).
    cache: a VerdictCache, or None to ask every time.
    counts: the JudgeCounts of every call and verdict (module docstring).
  """
  complete: object
  max_attempts: int = 3
  backoff_seconds: float = 1.0
  max_concurrency: int = 64
  cache: VerdictCache | None = dataclasses.field(default=None, compare=False)
  counts: JudgeCounts = dataclasses.field(default_factory=JudgeCounts, compare=False)
  _slots: threading.BoundedSemaphore = dataclasses.field(init=False, repr=False, compare=False)

  def __post_init__(self):
    if not callable(self.complete):
      raise TypeError("LLMJudge.complete must be a callable prompt -> reply text; wrap a "
                      "backend with judge.backend_completer(backend, tokenizer) or an endpoint "
                      "with judge.client_completer(OpenAICompatibleClient(...)).")
    if self.max_attempts < 1:
      raise ValueError(f"LLMJudge.max_attempts={self.max_attempts} must be >= 1.")
    if (not isinstance(self.max_concurrency, int) or isinstance(self.max_concurrency, bool)
        or self.max_concurrency < 1):
      raise ValueError(f"max_concurrency={self.max_concurrency!r} must be an int >= 1 (the "
                       "judge calls in flight at once; WHALE: 64).")
    object.__setattr__(self, "_slots", threading.BoundedSemaphore(self.max_concurrency))

  def __call__(self, question, golden_answers, prediction):
    """A Verdict for `prediction` (None when the episode gave no answer)."""
    if prediction is None or not prediction.strip():
      self.counts.add("verdicts_no_answer")
      return Verdict(0.0, "no_answer", 0)
    if self.cache is not None:
      score = self.cache.get(question, golden_answers, prediction)
      if score is not None:
        self.counts.add("cache_hits")
        return Verdict(score, "judge", 0)
    prompt = judge_prompt(question, golden_answers, prediction)
    errors = []
    for attempt in range(self.max_attempts):
      if attempt:
        self.counts.add("retries")
        if self.backoff_seconds > 0:
          time.sleep(self.backoff_seconds * 2**(attempt - 1))
      self.counts.add("calls")
      try:
        with self._slots:
          reply = self.complete(prompt)
      except (openai_client.EndpointUnavailable, GuidedChoiceRefused):
        self.counts.add("failed_calls")
        raise  # the endpoint is down or refuses the setting: stop rather than exact match
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
      if self.cache is not None:
        self.cache.put(question, golden_answers, prediction, float(decision))
      return Verdict(float(decision), "judge", attempt + 1, tuple(errors))
    score = qa_answers.exact_match(prediction, golden_answers)
    self.counts.add("verdicts_exact_match_fallback")
    return Verdict(score, "exact_match_fallback", self.max_attempts, tuple(errors))

  def judge_many(self, requests):
    """Verdicts of [(question, golden_answers, prediction)], in order.

    Distinct requests are asked once each, up to max_concurrency at a time; a request that
    appears twice shares its verdict. EndpointUnavailable or GuidedChoiceRefused from any
    of them is raised after the calls in flight end (the rest are not asked).
    """
    requests = [(question, tuple(golden_answers), prediction)
                for question, golden_answers, prediction in requests]
    distinct = list(dict.fromkeys(requests))
    if len(distinct) <= 1 or self.max_concurrency == 1:
      verdicts = {request: self(*request) for request in distinct}
      return [verdicts[request] for request in requests]
    with concurrent.futures.ThreadPoolExecutor(min(self.max_concurrency, len(distinct)),
                                               thread_name_prefix="judge") as pool:
      futures = {request: pool.submit(self, *request) for request in distinct}
      try:
        verdicts = {request: future.result() for request, future in futures.items()}
      except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    return [verdicts[request] for request in requests]


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


def retry_after_seconds(value, now=None):
  """The wait a Retry-After header asks for, in seconds (>= 0): delay-seconds ("2") or an
  HTTP date ("Wed, 21 Oct 2015 07:28:00 GMT"); None for anything else."""
  if not isinstance(value, str) or not value.strip():
    return None
  try:
    return max(float(value), 0.0)
  except ValueError:
    pass
  try:
    date = email.utils.parsedate_to_datetime(value.strip())
  except (TypeError, ValueError, IndexError):
    return None
  if date is None:
    return None
  if date.tzinfo is None:
    date = date.replace(tzinfo=datetime.timezone.utc)
  now = datetime.datetime.now(datetime.timezone.utc) if now is None else now
  return max((date - now).total_seconds(), 0.0)


class _JudgeClient(openai_client.OpenAICompatibleClient):
  """The client with the judge's view of each HTTP answer: counts 429s and 5xx, turns an
  HTTP-date Retry-After into seconds (the base client reads only seconds), and raises
  GuidedChoiceRefused for a 400/422 that names a guided field the request carried."""

  def __init__(self, *args, counts, **kwargs):
    super().__init__(*args, **kwargs)
    self._counts = counts

  def _request(self, body):
    try:
      return super()._request(body)
    except urllib.error.HTTPError as error:
      detail = error.read()
      if error.code == 429:
        self._counts.add("rate_limited")
      elif error.code >= 500:
        self._counts.add("server_errors")
      named = [field for field in GUIDED_FIELDS if field in body and field.encode() in detail]
      if error.code in (400, 422) and named:
        self._counts.add("guided_choice_refusals")
        raise GuidedChoiceRefused(
            f"{self.url} refused {' and '.join(named)} (HTTP {error.code}: "
            f"{detail[:300].decode('utf-8', errors='replace')})") from None
      headers = error.headers
      if headers is not None and headers.get("Retry-After") is not None:
        wait = retry_after_seconds(headers.get("Retry-After"))
        del headers["Retry-After"]
        if wait is not None:
          headers["Retry-After"] = f"{wait:.3f}"
      raise urllib.error.HTTPError(error.url, error.code, error.msg, headers,
                                   io.BytesIO(detail)) from None


class EndpointCompleter:
  """complete(prompt) over an OpenAI-compatible endpoint: greedy, max_completion_tokens, the
  constrained-choice setting (module docstring), usage and failures counted in counts.

  Args:
    base_url, model, api_key_env, timeout_seconds, max_retries, max_consecutive_failures,
      backoff_seconds (the first retry's wait), sleep: the OpenAICompatibleClient's.
    constrained: "auto", "always" or "never".
    counts: the judge's JudgeCounts (mode, tokens, retries, 429s).
    max_tokens: the reply budget, sent as max_completion_tokens (WHALE: 256).
  """

  def __init__(self, base_url, model, constrained, counts, max_tokens, api_key_env=None,
               timeout_seconds=60.0, max_retries=3, max_consecutive_failures=3,
               backoff_seconds=1.0, sleep=time.sleep):
    if constrained not in CONSTRAINED:
      raise ValueError(f"constrained={constrained!r}; use 'auto' (constrain the reply to "
                       f"{' or '.join(JUDGE_CHOICES)} where the endpoint accepts it, free text "
                       "elsewhere), 'always' (vLLM, whale_jax.serve) or 'never'.")
    self.constrained, self.counts = constrained, counts

    def counted_sleep(seconds):
      counts.add("retries")
      sleep(seconds)

    def client(guided):
      return _JudgeClient(
          base_url, model, api_key_env=api_key_env, timeout_seconds=timeout_seconds,
          max_retries=max_retries, max_consecutive_failures=max_consecutive_failures,
          initial_backoff_seconds=backoff_seconds, sleep=counted_sleep, counts=counts,
          extra_body={"max_completion_tokens": max_tokens, **(GUIDED_FIELDS if guided else {})})
    self._guided = client(True) if constrained != "never" else None
    self._free_text = client(False) if constrained != "always" else None
    self.url = (self._guided or self._free_text).url

  def __call__(self, prompt):
    messages = [{"role": "user", "content": prompt}]
    if self.counts.mode == "guided_choice":
      try:
        return self._ask(self._guided, messages)
      except GuidedChoiceRefused as refusal:
        if self._free_text is None:
          raise GuidedChoiceRefused(
              f"The judge endpoint {refusal}; config.domain.judge.constrained='always' needs "
              "an endpoint that constrains replies (vLLM, whale_jax.serve). Set "
              "config.domain.judge.constrained='auto' (free-text verdicts where refused) or "
              "'never'.") from None
        if self.counts.fall_back_to_free_text():
          logging.warning("The judge endpoint %s; asking for free-text verdicts from now on "
                          "(constrained='auto'; the mode is recorded as judge_mode).",
                          refusal)
    return self._ask(self._free_text, messages)

  def _ask(self, client, messages):
    reply = client.chat(messages, temperature=0.0)
    self.counts.add("prompt_tokens", reply.prompt_tokens)
    self.counts.add("completion_tokens", reply.completion_tokens)
    return reply.text


def openai_judge(base_url, model, api_key_env=None, timeout_seconds=60.0, max_retries=3,
                 max_consecutive_failures=3, max_attempts=3, backoff_seconds=1.0,
                 max_tokens=JUDGE_SAMPLING.max_tokens, constrained="auto", max_concurrency=64,
                 cache=True, cache_dir=None):
  """An LLMJudge over an OpenAI-compatible endpoint (JUDGE_PROMPT, temperature 0).

  Args:
    base_url: the endpoint's API root, e.g. "http://127.0.0.1:8001/v1".
    model: the model name the endpoint serves (WHALE: gpt-5.4-mini).
    api_key_env: environment variable with the API key; None for a keyless local server.
    timeout_seconds, max_retries, max_consecutive_failures: the client's (transport retries of
      one request, WHALE: 3; failed calls in a row before EndpointUnavailable stops the run).
    max_attempts, backoff_seconds: calls per verdict before the exact-match fallback (a
      malformed reply or a failed call uses one), and the first wait of both retry levels.
    max_tokens: the judge's reply budget, sent as max_completion_tokens (WHALE: 256).
    constrained: "auto", "always" or "never" (module docstring).
    max_concurrency: judge calls in flight at once (WHALE: 64).
    cache: keep judged verdicts (VerdictCache); False asks every time.
    cache_dir: the folder of the verdict file; None keeps them in memory only (builders pass
      the run's workdir/judge_cache).
  """
  if not isinstance(cache, bool):
    raise ValueError(f"cache={cache!r} must be True (keep judged verdicts, on disk in "
                     "cache_dir when given) or False.")
  counts = JudgeCounts(constrained, "free_text" if constrained == "never" else "guided_choice")
  complete = EndpointCompleter(
      base_url, model, constrained, counts, max_tokens, api_key_env=api_key_env,
      timeout_seconds=timeout_seconds, max_retries=max_retries,
      max_consecutive_failures=max_consecutive_failures, backoff_seconds=backoff_seconds)
  verdict_cache = None
  if cache:
    verdict_cache = VerdictCache(cache_dir or None, identity={
        "model": model, "constrained": constrained, "max_tokens": max_tokens})
  return LLMJudge(complete, max_attempts=max_attempts, backoff_seconds=backoff_seconds,
                  max_concurrency=max_concurrency, cache=verdict_cache, counts=counts)
