"""Where generations end: stop strings, stop tokens, end-of-sequence, max_tokens."""
import pytest

from tests.sampling import reference as greedy_reference
from tests.sampling import tiny_model
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.sampling import stops

TOKENIZER = tiny_model.TOKENIZER
CONFIG = tiny_model.CONFIG
STEPS = tiny_model.STEPS_PER_CALL
PROMPT = TOKENIZER.encode("The answer is")
REFERENCE_LENGTH = 24


def feed(watcher, token_ids, chunk):
  """Runs the watcher as the engine does: after each chunk of new tokens."""
  for end in range(chunk, len(token_ids) + chunk, chunk):
    found = watcher.check(token_ids[:min(end, len(token_ids))])
    if found is not None:
      return found
  return None


@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_stop_string_straddling_chunks_cuts_after_it(chunk):
  text = "hello world. bye"
  ids = TOKENIZER.encode(text)
  found = feed(stops.StopStringWatcher(TOKENIZER, ["world"]), ids, chunk)
  end = text.index("world") + len("world")  # one byte per character
  assert found == (end, "hello world", "world")


def test_earliest_ending_stop_wins_and_longest_among_ties():
  ids = TOKENIZER.encode("abcdef")
  assert feed(stops.StopStringWatcher(TOKENIZER, ["def", "bc", "c"]), ids, 6) == (
      3, "abc", "bc")


def test_completing_token_may_carry_text_past_the_stop():
  ids = TOKENIZER.encode("ok<|im_end|>more")  # <|im_end|> is one token
  found = feed(stops.StopStringWatcher(TOKENIZER, ["|im"]), ids, 4)
  assert found == (3, "ok<|im", "|im")  # token ids keep all of <|im_end|>; text stops at "|im"


def test_multibyte_character_matches_only_when_complete():
  ids = TOKENIZER.encode("café au lait")
  found = feed(stops.StopStringWatcher(TOKENIZER, ["é"]), ids, 1)
  assert found == (len("café".encode()), "café", "é")


def test_no_stop_string_returns_none():
  assert feed(stops.StopStringWatcher(TOKENIZER, ["zzz"]), TOKENIZER.encode("abc" * 9), 4) is None


@pytest.fixture(scope="module")
def model():
  params = tiny_model.params(seed=3)
  reference = greedy_reference.greedy(params, CONFIG, PROMPT, REFERENCE_LENGTH)
  with Sampler(CONFIG, params, tokenizer=TOKENIZER, max_slots=4, steps_per_call=STEPS) as sampler:
    yield sampler, reference


GREEDY = SamplingParams(max_tokens=REFERENCE_LENGTH, temperature=0.0, ignore_eos=True)


def test_greedy_reference_and_max_tokens(model):
  sampler, reference = model
  out, = sampler.generate([PROMPT], GREEDY)
  assert out.token_ids == reference
  assert (out.finish_reason, out.stop_reason) == ("length", None)
  assert out.text == TOKENIZER.decode(reference)
  short, = sampler.generate([PROMPT], GREEDY.replace(max_tokens=5))
  assert short.token_ids == reference[:5] and short.finish_reason == "length"


def test_stop_string_cuts_text_and_tokens_exactly(model):
  sampler, reference = model
  text = TOKENIZER.decode(reference)
  stop = text[9:12]
  end = text.index(stop) + len(stop)
  count = next(n for n in range(1, len(reference) + 1)
               if stop in TOKENIZER.decode(reference[:n]))
  out, = sampler.generate([PROMPT], GREEDY.replace(stop=(stop, "\x00never")))
  assert out.token_ids == reference[:count]
  assert len(out.logprobs) == count
  assert out.text == text[:end] and out.text.endswith(stop)
  assert (out.finish_reason, out.stop_reason) == ("stop", stop)


def test_stop_token_ends_at_its_first_occurrence_and_text_leaves_it_out(model):
  sampler, reference = model
  stop_id = reference[7]
  first = reference.index(stop_id)
  out, = sampler.generate([PROMPT], GREEDY.replace(stop_token_ids=(stop_id,)))
  assert out.token_ids == reference[:first + 1]
  assert (out.finish_reason, out.stop_reason) == ("stop", stop_id)
  assert out.text == TOKENIZER.decode(reference[:first])


def test_eos_from_config_stops_unless_ignored(model):
  sampler, reference = model
  eos = reference[10]
  first = reference.index(eos)
  with Sampler(CONFIG.replace(eos_token_ids=(eos,)), sampler.params, tokenizer=TOKENIZER,
               max_slots=4, steps_per_call=STEPS) as with_eos:
    out, = with_eos.generate([PROMPT], GREEDY.replace(ignore_eos=False))
    ignored, = with_eos.generate([PROMPT], GREEDY)
  assert out.token_ids == reference[:first + 1] and out.finish_reason == "stop"
  assert ignored.token_ids == reference and ignored.finish_reason == "length"
