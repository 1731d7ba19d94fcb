"""The in-process LLM client: chat renders once, keeps token ids, names its random streams."""
import pytest

from tests.sampling import tiny_model
from whale_jax.sampling import LLM
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams

TOKENIZER = tiny_model.TOKENIZER
CONFIG = tiny_model.CONFIG
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]


@pytest.fixture(scope="module")
def sampler():
  with Sampler(CONFIG, tiny_model.params(seed=4), tokenizer=TOKENIZER, max_slots=4,
               steps_per_call=tiny_model.STEPS_PER_CALL) as sampler:
    yield sampler


def test_chat_sends_the_template_ids_and_records_completion_ids_as_generated(sampler):
  llm = LLM(sampler, TOKENIZER, max_tokens=10, temperature=1.0, seed=5, request_key=2)
  reply = llm.chat(MESSAGES)
  call, = llm.calls
  assert call.prompt_ids == TOKENIZER.apply_chat_template(MESSAGES, add_generation_prompt=True)
  assert call.request_key == 2 * 2**32
  direct, = sampler.submit(call.prompt_ids, SamplingParams(max_tokens=10, temperature=1.0,
                                                           seed=5), request_key=2 * 2**32).result()
  assert call.completion.token_ids == direct.token_ids
  assert call.completion.logprobs == direct.logprobs
  assert reply == direct.text == call.completion.text


def test_calls_count_up_their_request_keys_and_overrides_apply(sampler):
  llm = LLM(sampler, TOKENIZER, max_tokens=6, request_key=7)
  llm.chat(MESSAGES)
  llm.generate("Once upon a time", max_tokens=3, temperature=0.0)
  first, second = llm.calls
  assert (first.request_key, second.request_key) == (7 * 2**32, 7 * 2**32 + 1)
  assert second.prompt_ids == TOKENIZER.encode("Once upon a time")
  assert second.params.max_tokens == 3 and len(second.completion.token_ids) <= 3
  assert first.params.max_tokens == 6


def test_bad_arguments_name_what_is_allowed(sampler):
  llm = LLM(sampler, TOKENIZER)
  with pytest.raises(TypeError, match="Unknown sampling argument.*max_new_tokens.*allowed: "
                                      "max_tokens"):
    llm.chat(MESSAGES, max_new_tokens=5)
  with pytest.raises(ValueError, match="complete"):
    llm.chat(MESSAGES, n=2)
  with pytest.raises(TypeError, match="takes text"):
    llm.generate([1, 2, 3])
  assert len(llm.complete([1, 2, 3], n=2, max_tokens=2)) == 2
