"""The in-process LLM client: chat renders once, keeps token ids, names its random streams."""
import jax
import jax.numpy as jnp
import pytest

from tests.train import random_params
from whale_jax.models import ModelConfig
from whale_jax.sampling import LLM
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.tokenization import load_tokenizer

TOKENIZER = load_tokenizer("byte")
CONFIG = ModelConfig(vocab_size=TOKENIZER.vocab_size, num_layers=2, embed_dim=32, mlp_dim=48,
                     num_heads=4, num_kv_heads=2, head_dim=8, max_position_embeddings=512)
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]


@pytest.fixture(scope="module")
def sampler():
  params = jax.tree.map(jnp.asarray, random_params.numpy_params(CONFIG, seed=4))
  with Sampler(CONFIG, params, tokenizer=TOKENIZER, max_slots=4, steps_per_call=8) as sampler:
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
