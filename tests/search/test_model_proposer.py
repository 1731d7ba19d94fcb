"""Model proposers: a chat client's replies become proposals; the OpenAI-compatible one is
tested against a local stub server."""
import json
import time

from tests import http_stub
from tests.search import fakes
from tests import test_seeds
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import ScriptedBackend
from whale_jax.harness import patches
from whale_jax.sampling import SamplingParams
from whale_jax.search import context as context_lib
from whale_jax.search import meta_harness
from whale_jax.search import model_proposer
from whale_jax.tasks import seed_harnesses
from whale_jax.tokenization import load_tokenizer

SEED = seed_harnesses.source("searchqa")
REPLY = ("<think>TOPK looks small.</think>HYPOTHESIS: Three passages contain the answer more "
         "often.\n<<<<<<< SEARCH\nTOPK = 1\n=======\nTOPK = 3\n>>>>>>> REPLACE\n")


def _context(iteration=2):
  return context_lib.ProposerContext(
      domain_name="synthetic_qa", incumbent=Harness(SEED), incumbent_id="c0000",
      iteration=iteration, messages=({"role": "system", "content": "rules"},
                                     {"role": "user", "content": "archive"}),
      num_tokens=40, budget_tokens=100, instruction_version="v", instruction_hash="h")


class FakeClient:
  def __init__(self, replies):
    self.replies, self.requests = list(replies), []

  def chat(self, messages, **sampling):
    self.requests.append((messages, sampling))
    reply = self.replies.pop(0)
    if isinstance(reply, Exception):
      raise reply
    return reply


def test_replies_become_proposals_with_seeds_per_iteration_and_index():
  client = FakeClient([REPLY, "no idea", ConnectionError("reset")])
  proposer = model_proposer.ModelProposer(client, name="m", sampling={"temperature": 1.0},
                                          seed=5)
  proposals = proposer.propose(_context(iteration=3), 3)
  assert [sampling["seed"] for _, sampling in client.requests] == [
      test_seeds.reference_seed(5, "proposer_call", 3, index) for index in range(3)]
  assert all(sampling["temperature"] == 1.0 for _, sampling in client.requests)
  assert client.requests[0][0] == [{"role": "system", "content": "rules"},
                                   {"role": "user", "content": "archive"}]
  first, second, third = proposals
  assert first.hypothesis == "Three passages contain the answer more often."
  assert patches.apply_proposal(SEED, first.text).source == SEED.replace("TOPK = 1", "TOPK = 3")
  assert first.raw_output == REPLY and first.proposer == "m"
  assert first.prompt_tokens == 40 and first.completion_tokens == -(-len(REPLY) // 4)
  assert second.kind == "patch" and not second.error
  assert third.error == "ConnectionError: reset" and third.text == ""


def test_concurrent_calls_keep_the_order_of_their_seeds():

  class BySeed:
    def chat(self, messages, seed):
      time.sleep(0.05 * (seed % 3))  # later calls may finish first
      return f"HYPOTHESIS: seed {seed}\nno blocks"

  proposer = model_proposer.ModelProposer(BySeed(), seed=0, max_concurrent_calls=3)
  proposals = proposer.propose(_context(iteration=1), 5)
  assert [p.hypothesis for p in proposals] == [
      f"seed {test_seeds.reference_seed(0, 'proposer_call', 1, i)}" for i in range(5)]


StubServer = http_stub.ScriptedServer  # (status, body bytes, headers, delay) per request


def _completion(text):
  return json.dumps({"choices": [{"message": {"role": "assistant", "content": text},
                                  "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 321, "completion_tokens": 45}}).encode()


def test_openai_proposer_against_a_stub_server():
  script = [(429, b"slow down", {"Retry-After": "0"}, 0), (200, _completion(REPLY), {}, 0),
            (200, b"{not json", {}, 0), (200, b"{still not json", {}, 0)]
  with StubServer(script) as url:
    proposer = model_proposer.openai_proposer(url, "proposer-model", api_key_env=None,
                                              max_retries=1, initial_backoff_seconds=0.0,
                                              sampling={"max_tokens": 256})
    good, malformed = proposer.propose(_context(), 2)
  assert good.kind == "patch" and good.hypothesis.startswith("Three passages")
  assert (good.prompt_tokens, good.completion_tokens) == (321, 45)
  assert patches.apply_proposal(SEED, good.text).ok
  assert "Malformed chat-completions reply" in malformed.error
  assert good.proposer == "proposer-model"


def test_openai_proposer_times_out_into_a_recorded_error():
  with StubServer([(200, _completion(REPLY), {}, 0.5)]) as url:
    proposer = model_proposer.openai_proposer(url, "m", api_key_env=None, timeout_seconds=0.1,
                                              max_retries=0)
    [proposal] = proposer.propose(_context(), 1)
  assert "timed out" in proposal.error and proposal.text == ""


def test_in_process_proposer_serves_the_model_through_a_backend():
  tokenizer = load_tokenizer("byte")
  prompts = []

  def reply(prompt):
    prompts.append(prompt)
    return REPLY

  proposer = model_proposer.in_process_proposer(
      ScriptedBackend(tokenizer, reply), tokenizer, SamplingParams(max_tokens=512), seed=0)
  [proposal] = proposer.propose(_context(), 1)
  assert "rules" in prompts[0] and "archive" in prompts[0]
  assert proposal.hypothesis.startswith("Three passages")
  assert proposal.completion_tokens == len(tokenizer.encode(REPLY)) + 1   # + end of turn
  assert patches.apply_proposal(SEED, proposal.text).ok


def test_search_with_a_model_proposer(tmp_path):
  domain = tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)
  client = FakeClient([REPLY, "HYPOTHESIS: nothing\nno blocks here"])
  result = meta_harness.search(Harness(domain.seed_harness), fakes.FakeEvaluate(),
                               model_proposer.ModelProposer(client, name="m"), tmp_path,
                               domain=domain, instances=domain.splits()["harness"],
                               weights_id="w", iterations=2, candidates_per_iteration=2)
  first, second = result.archive.candidates[1:]
  assert first.status == "evaluated" and first.success > 0
  assert second.reasons[0]["code"] == "no_blocks"
  assert client.requests[0][0][0]["content"].startswith("You improve a harness")
  assert result.accepted_id == first.id
  meta = json.loads(open(result.archive.path("iterations", "iteration_002",
                                             "proposals.json")).read())
  assert result.proposer_prompt_tokens == 2 * meta["context_tokens"]   # two calls, same context
