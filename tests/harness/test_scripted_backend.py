"""ScriptedBackend: scripted replies behave like a model's samples."""
import pytest

from whale_jax.harness import ScriptedBackend
from whale_jax.harness import scripted_backend
from whale_jax.sampling import SamplingParams
from whale_jax.tokenization import load_tokenizer

TOKENIZER = load_tokenizer("byte")
END_OF_TURN = 260  # <|im_end|> in the byte tokenizer


def test_reply_is_tokenized_and_ends_with_the_end_of_turn_token():
  backend = ScriptedBackend(TOKENIZER, replies="ok!")
  [completion] = backend.submit([1, 2, 3], SamplingParams(max_tokens=10, seed=4)).result()
  assert completion.token_ids == [ord("o"), ord("k"), ord("!"), END_OF_TURN]
  assert completion.text == "ok!"  # the end token is in token_ids, not in text
  assert completion.finish_reason == "stop"
  assert completion.prompt_token_ids == [1, 2, 3]
  expected = [-(1 + (7 * t + 13 * p + 4) % 50) / 25 for p, t in enumerate(completion.token_ids)]
  assert completion.logprobs == expected


def test_max_tokens_cuts_the_reply():
  backend = ScriptedBackend(TOKENIZER, replies="abcdef")
  [completion] = backend.generate([[1]], SamplingParams(max_tokens=3))
  assert (completion.token_ids, completion.finish_reason) == ([97, 98, 99], "length")


def test_stop_string_ends_the_reply_after_it():
  backend = ScriptedBackend(TOKENIZER, replies="think</search> more")
  [completion] = backend.generate([[1]], SamplingParams(stop=("</search>",)))
  assert completion.text == "think</search>"
  assert completion.finish_reason == "stop"


def test_queue_is_consumed_in_order_one_reply_per_sample():
  backend = ScriptedBackend(TOKENIZER, replies=["a", "b", "c"])
  texts = [c.text for c in backend.generate([[1], [2]], SamplingParams(n=1))]
  texts += [c.text for c in backend.submit([3], SamplingParams(n=1)).result()]
  assert texts == ["a", "b", "c"]
  with pytest.raises(RuntimeError, match="ran out of scripted replies"):
    backend.submit([4], SamplingParams()).result()


def test_callable_sees_the_decoded_prompt():
  backend = ScriptedBackend(TOKENIZER, replies=lambda prompt: prompt.upper())
  [completion] = backend.generate([TOKENIZER.encode("hey")], SamplingParams())
  assert completion.text == "HEY"
  assert backend.completions == [completion]


def test_latency_lets_requests_overlap():
  backend = ScriptedBackend(TOKENIZER, replies="x", latency_seconds=0.2)
  futures = [backend.submit([i], SamplingParams()) for i in range(3)]
  assert all(len(f.result()) == 1 for f in futures)
  assert backend.max_in_flight == 3
  backend.close()


def test_fake_logprobs_formula_is_documented_one():
  assert scripted_backend.fake_logprobs([0, 10], seed=0) == [-1 / 25, -(1 + 83 % 50) / 25]
