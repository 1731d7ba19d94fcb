"""Proposers served by a chat model: in-process (the sampler) or an OpenAI-compatible endpoint.

  proposer = ModelProposer(client, name="qwen3-8b", sampling={"temperature": 1.0,
                                                               "max_tokens": 4096})
  proposer = openai_proposer("http://localhost:8000/v1", model="Qwen/Qwen3-8B",
                             api_key_env=None, timeout_seconds=600, max_retries=4)
  proposer = in_process_proposer(backend, tokenizer, SamplingParams(max_tokens=4096))
  proposals = proposer.propose(context, n=3)

A client is any object with `chat(messages, **sampling)` returning a str or an object with
.text (and optionally .prompt_tokens and .completion_tokens): the OpenAI-compatible client
(whale_jax.sampling.openai_client), an in-process chat client, or a scripted fake in tests.
propose(context, n) makes n calls with context.messages; call i gets seed =
seeds.derive_seed(base seed, "proposer_call", *context.call_site, i) (the iteration, then the
search's session when it is named), so runs are reproducible where the server honours seeds;
with max_concurrent_calls > 1 the calls run on threads (the in-process engine batches them). Each
reply is parsed by whale_jax.search.proposal.parse_reply. A call that raises gives a
proposal.failed_call (the search logs and counts it, archives nothing and asks again on
resume) instead of ending the search; propose_at(context, indices) makes just the calls of
those indices (their seeds as in propose), which is how a resume retries failed calls.

in_process_proposer serves the model through any LLMBackend (the in-process sampler, possibly
another checkpoint than the solver's): messages are rendered with the tokenizer's chat
template, one request per call. Token counts come from the reply when it has them, else from
the tokenizer, else the chars/4 estimate of whale_jax.search.context.
"""
import concurrent.futures

from whale_jax import seeds as seeds_lib
from whale_jax.sampling import api
from whale_jax.sampling import openai_client
from whale_jax.search import context as context_lib
from whale_jax.search import proposal as proposal_lib



class ModelProposer:
  """Proposals from a chat client (see the module docstring).

  Args:
    client: an object with chat(messages, **sampling).
    name: recorded as each proposal's proposer.
    sampling: keyword arguments for every chat call (e.g. temperature, max_tokens).
    seed: base seed (None: no seed is sent).
    tokenizer: counts tokens when the client does not report them.
    max_concurrent_calls: chat calls in flight at once (threads); results keep their order.
  """

  def __init__(self, client, name="model", sampling=None, seed=0, tokenizer=None,
               max_concurrent_calls=1):
    if not callable(getattr(client, "chat", None)):
      raise TypeError(f"ModelProposer needs a client with chat(messages, **sampling); got "
                      f"{type(client).__name__}.")
    self.client, self.name = client, name
    self.sampling = dict(sampling or {})
    self.seed, self.tokenizer = seed, tokenizer
    if not isinstance(max_concurrent_calls, int) or max_concurrent_calls < 1:
      raise ValueError(f"max_concurrent_calls={max_concurrent_calls!r} must be an int >= 1.")
    self.max_concurrent_calls = max_concurrent_calls

  def _one(self, context, index):
    sampling = dict(self.sampling)
    if self.seed is not None:
      sampling["seed"] = seeds_lib.derive_seed(self.seed, "proposer_call",
                                               *context.call_site, index)
    try:
      reply = self.client.chat([dict(message) for message in context.messages], **sampling)
    except openai_client.EndpointUnavailable:
      raise  # the endpoint is down for good: stop the run (sampling/openai_client.py)
    except Exception as error:  # pylint: disable=broad-except  # no reply: a failed call
      return proposal_lib.failed_call(f"{type(error).__name__}: {error}", self.name)
    text = reply if isinstance(reply, str) else getattr(reply, "text", None)
    if not isinstance(text, str):
      return proposal_lib.Proposal(
          kind="patch", text="", proposer=self.name,
          error=f"The client's chat() returned {type(reply).__name__} without a str .text.")
    prompt_tokens = getattr(reply, "prompt_tokens", 0) or context.num_tokens
    completion_tokens = (getattr(reply, "completion_tokens", 0) or
                         context_lib.count_tokens(text, self.tokenizer))
    return proposal_lib.parse_reply(text, self.name, prompt_tokens, completion_tokens)

  def propose(self, context, n):
    return self.propose_at(context, range(n))

  def propose_at(self, context, indices):
    """The proposals of calls number `indices` (each with its own seed), in that order."""
    indices = list(indices)
    if self.max_concurrent_calls == 1 or len(indices) <= 1:
      return [self._one(context, index) for index in indices]
    with concurrent.futures.ThreadPoolExecutor(
        min(len(indices), self.max_concurrent_calls)) as pool:
      return list(pool.map(lambda index: self._one(context, index), indices))


def openai_proposer(base_url, model, api_key_env="OPENAI_API_KEY", timeout_seconds=600.0,
                    max_retries=4, sampling=None, seed=0, name=None, **client_options):
  """A ModelProposer over an OpenAI-compatible endpoint (retries with backoff in the client)."""
  client = openai_client.OpenAICompatibleClient(
      base_url, model, api_key_env=api_key_env, timeout_seconds=timeout_seconds,
      max_retries=max_retries, **client_options)
  return ModelProposer(client, name=name or model, sampling=sampling, seed=seed)


class BackendChatClient:
  """chat(messages, **sampling) over an LLMBackend: the in-process model as a chat client.

  Args:
    backend: an LLMBackend (e.g. the in-process sampler).
    tokenizer: renders the chat template and decodes replies.
    sampling: default SamplingParams; chat() keywords replace its fields.
    timeout_seconds: how long to wait for one reply.
  """

  def __init__(self, backend, tokenizer, sampling=api.SamplingParams(max_tokens=4096),
               timeout_seconds=1800.0):
    self.backend, self.tokenizer = backend, tokenizer
    self.sampling, self.timeout_seconds = sampling, timeout_seconds

  def chat(self, messages, **sampling):
    params = self.sampling.replace(**sampling)
    prompt_ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True)
    completion = self.backend.submit(prompt_ids, params).result(self.timeout_seconds)[0]
    token_ids = list(completion.token_ids)
    if token_ids and token_ids[-1] in self.tokenizer.eos_ids:
      token_ids = token_ids[:-1]
    return openai_client.ChatReply(
        text=self.tokenizer.decode(token_ids), prompt_tokens=len(prompt_ids),
        completion_tokens=len(completion.token_ids), finish_reason=completion.finish_reason,
        raw={})


def in_process_proposer(backend, tokenizer, sampling=api.SamplingParams(max_tokens=4096),
                        seed=0, name="in_process", timeout_seconds=1800.0):
  """A ModelProposer served by an LLMBackend through the generate API."""
  client = BackendChatClient(backend, tokenizer, sampling, timeout_seconds)
  return ModelProposer(client, name=name, seed=seed, tokenizer=tokenizer)
