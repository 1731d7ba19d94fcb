"""The builders from config sections: the OpenAI-compatible proposer and the LLM judge against
a real local HTTP server (what the server received is the independent observation), and
random parameters created already sharded."""
import dataclasses
import inspect

import jax
import numpy as np
import pytest

from tests import http_stub
from tests import test_seeds
from whale_jax import typed_config
from whale_jax.algorithms import builders
from whale_jax.algorithms import sections
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.models import decoder
from whale_jax.models import hf
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.sampling import openai_client
from whale_jax.search import agentic_proposer
from whale_jax.search import context as context_lib
from whale_jax.search import model_proposer
from whale_jax.tasks import registry

REPLY = ("HYPOTHESIS: the reply format is unclear.\n<<<<<<< SEARCH\nPROMPT = 'a'\n=======\n"
         "PROMPT = 'b'\n>>>>>>> REPLACE\n")


class ChatServer(http_stub.StubServer):
  """A chat-completions endpoint on 127.0.0.1 that answers `reply` and keeps every body."""

  def __init__(self, reply):
    usage = {"prompt_tokens": 11, "completion_tokens": 7}
    super().__init__(lambda path, body: (200, http_stub.chat_reply(reply, usage)))
    self.base_url = self.base + "/v1"


@pytest.fixture
def chat_server(request):
  server = ChatServer(request.param)
  yield server
  server.close()


@pytest.mark.parametrize("chat_server", [REPLY], indirect=True)
def test_openai_proposer_from_config_sends_the_section_sampling_and_parses_the_reply(
    chat_server):
  section = {"proposer": "openai", "base_url": chat_server.base_url, "model": "proposer",
             "api_key_env": None, "seed": 5,
             "sampling": {"max_tokens": 300, "temperature": 0.7}}
  proposer = builders.build_proposer(typed_config.read(sections.SearchSection, section),
                                     policy=None, tokenizer=None)
  context = context_lib.ProposerContext(
      domain_name="synthetic_qa", incumbent=None, incumbent_id="c0000", iteration=3,
      messages=({"role": "user", "content": "revise"},), num_tokens=4, budget_tokens=100,
      instruction_version="v", instruction_hash="h")
  (proposal,) = proposer.propose(context, 1)
  assert proposal.error == "" and proposal.kind == "patch"
  assert proposal.hypothesis == "the reply format is unclear."
  assert "PROMPT = 'b'" in proposal.text
  (body,) = chat_server.bodies
  assert body["model"] == "proposer" and body["max_tokens"] == 300
  assert body["temperature"] == 0.7
  assert body["seed"] == test_seeds.reference_seed(5, "proposer_call", 3, 0)
  assert body["messages"] == [{"role": "user", "content": "revise"}]


@pytest.mark.parametrize("chat_server", ["CORRECT"], indirect=True)
def test_judge_from_config_scores_with_the_endpoint_not_exact_match(chat_server):
  domain = builders.build_domain(typed_config.read(registry.DomainSection, {
      "name": "synthetic_qa", "seed": 0, "verifier": "judge",
      "split_sizes": {"weight": 0, "harness": 0, "validation": 0, "test": 1},
      "judge": {"base_url": chat_server.base_url, "model": "judge", "backoff_seconds": 0.0}}))
  (instance,) = domain.splits()["test"]
  trajectory = trajectory_lib.Trajectory(
      episode_id="e", task_id=instance.id, harness_hash="h", outcome="ok",
      answer="<answer>certainly not the reference</answer>", calls=[])
  assert domain.verify(instance, trajectory.answer, trajectory) == 1.0  # the judge said so
  (body,) = chat_server.bodies
  assert body["model"] == "judge" and body["temperature"] == 0.0
  assert "certainly not the reference" in body["messages"][0]["content"]


def test_random_parameters_are_created_sharded_and_equal_the_unsharded_ones():
  model = {"source": "random", "seed": 3, "vocab_size": 64, "num_layers": 1, "embed_dim": 32,
           "mlp_dim": 64, "num_heads": 4, "num_kv_heads": 2, "head_dim": 8}
  mesh = mesh_lib.make_mesh(data=1, fsdp=4, tensor=2, devices=jax.devices()[:8])
  model_config, params, model_dir = builders.load_model(
      typed_config.read(sections.ModelSection, model), mesh)
  assert model_dir is None
  expected = decoder.init_params(model_config, jax.random.key(3))
  embedding = params["embedding"]  # [V, D]: vocab over tensor, embed over fsdp
  assert len(embedding.sharding.device_set) == 8 and not embedding.sharding.is_fully_replicated
  for actual, reference in zip(jax.tree.leaves(params), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(reference), rtol=1e-6, atol=1e-7)


def _arguments(*functions):
  return {name for function in functions for name in inspect.signature(function).parameters}


def test_the_sections_keys_are_what_the_builders_pass_on():
  """A key a section takes reaches a real argument: every proposer's keys are SearchSection
  fields, an openai section's are openai_proposer's or its client's, an agentic endpoint's its
  tool client's; an "hf" model section's own keys are load_hf's."""
  fields = {field.name for field in dataclasses.fields(sections.SearchSection)}
  for keys in sections.PROPOSER_KEYS.values():
    assert set(keys) <= fields
  assert set(sections.PROPOSER_KEYS["openai"]) <= _arguments(
      model_proposer.openai_proposer, openai_client.OpenAICompatibleClient.__init__)
  endpoint_keys = {"base_url", "model", "api_key_env", "timeout_seconds", "max_retries",
                   "max_consecutive_failures"}
  assert endpoint_keys <= set(sections.PROPOSER_KEYS["agentic"])
  assert endpoint_keys <= _arguments(agentic_proposer.OpenAIToolClient.__init__)
  assert set(sections.MODEL_SOURCE_KEYS["hf"]) - {"source"} <= _arguments(hf.load_hf)


def test_defaults_that_differ_by_proposer_are_that_proposers():
  def read(section):
    return typed_config.read(sections.SearchSection, section, "config.search")
  openai = read({"proposer": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "m"})
  assert (openai.api_key_env, openai.max_retries, openai.sampling) == (
      "OPENAI_API_KEY", 4, {"max_tokens": 1024})
  assert read({"proposer": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "m",
               "api_key_env": None}).api_key_env is None   # a keyless endpoint, as given
  agentic = read({"proposer": "agentic"})
  assert (agentic.api_key_env, agentic.max_retries, agentic.sampling) == (None, 3, {})
  assert read({"proposer": "in_process"}).sampling == {"max_tokens": 1024}
  assert read({}) == sections.SearchSection(proposer="edit_library")
