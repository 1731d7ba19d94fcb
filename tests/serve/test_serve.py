"""`python -m whale_jax.serve` as a real process on 127.0.0.1, against the in-process sampler.

One server for the serve tests (tests/serve/conftest.py: the embedded solver, 64 slots,
--max_pending_requests=64), driven with the `openai` Python client and with raw HTTP (httpx).
References are computed in this process with sampling.Sampler on the same checkpoint: the same
prompt ids, SamplingParams and request keys must give the same tokens, and logprobs within
float32 rounding (tests/float_bounds.py).
"""
import concurrent.futures
import json
import time

import httpx
import numpy as np
import openai
import pytest

from tests import float_bounds
from tests.serve import server_process
from whale_jax import serve
from whale_jax.models import hf
from whale_jax.sampling import openai_client
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.tasks import judge
from whale_jax.tokenization import load_tokenizer

MODEL = server_process.SHARED_MODEL
MAX_PENDING = server_process.SHARED_MAX_PENDING
CONTEXT = server_process.SHARED_CONTEXT
# Served and in-process logprobs are two float32 computations of the same numbers whose
# reductions run in different orders (the server batches the requests with others, in its own
# slot count, chunking and cache length), so they agree only to float32 rounding: see
# tests/float_bounds.py for the bound and its derivation.
PROMPTS = ["Who founded the Vokzag company?", "hello", "Where is Nuk?"]
STEPS_PER_CALL = server_process.SHARED_STEPS_PER_CALL  # a streamed chunk after each call


@pytest.fixture(scope="module")
def server_url(shared_server):
  return shared_server[0]


@pytest.fixture(scope="module")
def reference():
  """(sampler, tokenizer) of the same checkpoint, in this process."""
  config, params = hf.load_hf(serve.EMBEDDED_SOLVER)
  tokenizer = load_tokenizer(serve.EMBEDDED_SOLVER)
  with Sampler(config, params, tokenizer=tokenizer) as sampler:
    yield sampler, tokenizer


@pytest.fixture(scope="module")
def client(server_url):
  return openai.OpenAI(base_url=server_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def logprob_bound():
  config, params = hf.load_hf(serve.EMBEDDED_SOLVER)
  return float_bounds.float32_logprob_bound(config, params, max_length=CONTEXT)


def _max_logprob_difference(served, expected):
  assert len(served) == len(expected)
  return float(np.max(np.abs(np.asarray(served, np.float64) - np.asarray(expected,
                                                                             np.float64))))


def test_models_and_health(client, server_url):
  assert [model.id for model in client.models.list().data] == [MODEL]
  health = httpx.get(server_url.removesuffix("/v1") + "/health").json()
  assert health["status"] == "ok" and health["max_pending_requests"] == MAX_PENDING


def test_greedy_completions_equal_in_process_tokens_and_logprobs(client, reference,
                                                                 logprob_bound):
  sampler, tokenizer = reference
  reply = client.completions.create(model=MODEL, prompt=PROMPTS, temperature=0, max_tokens=12,
                                    logprobs=1, extra_body={"return_token_ids": True})
  expected = sampler.generate(PROMPTS, SamplingParams(max_tokens=12, temperature=0.0))
  assert len(reply.choices) == len(PROMPTS)
  differences = []
  for choice, completion in zip(reply.choices, expected):
    served = choice.model_dump()
    assert served["token_ids"] == completion.token_ids
    assert served["prompt_token_ids"] == completion.prompt_token_ids
    assert choice.text == completion.text and choice.finish_reason == completion.finish_reason
    assert choice.logprobs.tokens == [tokenizer.decode([t]) for t in completion.token_ids]
    differences.append(_max_logprob_difference(choice.logprobs.token_logprobs,
                                               completion.logprobs))
  print(f"greedy completions: max logprob difference {max(differences):.2e}")
  assert max(differences) <= logprob_bound
  assert reply.usage.prompt_tokens == sum(len(c.prompt_token_ids) for c in expected)
  assert reply.usage.completion_tokens == sum(len(c.token_ids) for c in expected)


def test_chat_uses_the_chat_template_and_equals_in_process(client, reference, logprob_bound):
  sampler, tokenizer = reference
  messages = [{"role": "system", "content": "Answer briefly."},
              {"role": "user", "content": PROMPTS[0]}]
  reply = client.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                         max_tokens=16, logprobs=True,
                                         extra_body={"return_token_ids": True})
  prompt_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
  expected = sampler.submit(prompt_ids, SamplingParams(max_tokens=16, temperature=0.0)
                            ).result()[0]
  choice = reply.choices[0]
  assert choice.model_dump()["token_ids"] == expected.token_ids
  assert choice.message.role == "assistant" and choice.message.content == expected.text
  difference = _max_logprob_difference([entry.logprob for entry in choice.logprobs.content],
                                       expected.logprobs)
  print(f"chat: max logprob difference {difference:.2e}")
  assert difference <= logprob_bound
  assert reply.usage.prompt_tokens == len(prompt_ids)
  assert reply.usage.completion_tokens == len(expected.token_ids)


def test_n_and_seed_are_honoured(client, reference):
  sampler, _ = reference
  options = dict(model=MODEL, prompt=PROMPTS[1], temperature=1.0, top_p=0.9, max_tokens=10,
                 n=3, extra_body={"return_token_ids": True, "top_k": 50})
  first = client.completions.create(seed=7, **options)
  again = client.completions.create(seed=7, **options)
  other = client.completions.create(seed=8, **options)
  expected = sampler.generate([PROMPTS[1]], SamplingParams(max_tokens=10, temperature=1.0,
                                                          top_p=0.9, top_k=50, n=3, seed=7))

  def ids(reply):
    return [choice.model_dump()["token_ids"] for choice in reply.choices]
  assert ids(first) == [c.token_ids for c in expected] == ids(again)
  assert len({tuple(i) for i in ids(first)}) > 1  # the three samples differ
  assert ids(other) != ids(first)
  assert [c.index for c in first.choices] == [0, 1, 2]


def test_stop_string_ends_the_text_and_is_removed(client, reference):
  sampler, _ = reference
  expected = sampler.generate([PROMPTS[2]], SamplingParams(max_tokens=20, temperature=0.0))[0]
  stop = expected.text[3:5]  # two characters the greedy output does produce
  assert len(stop) == 2
  stopped = sampler.generate([PROMPTS[2]], SamplingParams(max_tokens=20, temperature=0.0,
                                                         stop=(stop,)))[0]
  reply = client.completions.create(model=MODEL, prompt=PROMPTS[2], temperature=0,
                                    max_tokens=20, stop=[stop])
  assert stopped.text.endswith(stop) and stopped.finish_reason == "stop"
  assert reply.choices[0].text == stopped.text[:-len(stop)]
  assert reply.choices[0].finish_reason == "stop"


def test_streaming_chunks_add_up_to_the_reply(client, server_url):
  body = {"model": MODEL, "prompt": PROMPTS[0], "temperature": 1.0, "seed": 11,
          "max_tokens": 12, "n": 2, "logprobs": 1}
  whole = httpx.post(server_url + "/completions", json=body, timeout=120).json()
  texts, logprobs, events = {}, {}, []
  with httpx.stream("POST", server_url + "/completions", timeout=120,
                    json={**body, "stream": True, "stream_options": {"include_usage": True}}
                    ) as response:
    assert response.headers["content-type"].startswith("text/event-stream")
    for line in response.iter_lines():
      if line.startswith("data: "):
        events.append(line[len("data: "):])
  assert events[-1] == "[DONE]"
  chunks = [json.loads(event) for event in events[:-1]]
  for chunk in chunks[:-1]:
    (choice,) = chunk["choices"]
    texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    logprobs.setdefault(choice["index"], []).extend(
        (choice["logprobs"] or {}).get("token_logprobs", []))
  assert chunks[-1]["usage"] == whole["usage"] and chunks[-1]["choices"] == []
  for choice in whole["choices"]:
    assert texts[choice["index"]] == choice["text"]
    assert logprobs[choice["index"]] == choice["logprobs"]["token_logprobs"]
  chat_stream = client.chat.completions.create(
      model=MODEL, messages=[{"role": "user", "content": PROMPTS[1]}], temperature=0,
      max_tokens=8, stream=True)
  streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chat_stream)
  plain = client.chat.completions.create(
      model=MODEL, messages=[{"role": "user", "content": PROMPTS[1]}], temperature=0,
      max_tokens=8)
  assert streamed == plain.choices[0].message.content


def _stream_events(server_url, body):
  """[(arrival seconds, chunk dict)] of a streamed /completions request, [DONE] checked."""
  events = []
  with httpx.stream("POST", server_url + "/completions", timeout=120,
                    json={**body, "stream": True}) as response:
    assert response.status_code == 200
    for line in response.iter_lines():
      if line.startswith("data: "):
        events.append((time.perf_counter(), line[len("data: "):]))
  assert events[-1][1] == "[DONE]"
  return [(arrival, json.loads(event)) for arrival, event in events[:-1]]


def test_streamed_chunks_come_while_the_engine_decodes(server_url, reference):
  """A long generation streams one chunk per decode call (at most --steps_per_call tokens
  each), spread over its decoding rather than all at its end; with a stop string the held-back
  text still adds up to the reply's."""
  sampler, _ = reference
  max_tokens = 160
  body = {"model": MODEL, "prompt": PROMPTS[2], "temperature": 1.0, "seed": 5,
          "max_tokens": max_tokens, "ignore_eos": True, "logprobs": 1}
  expected = sampler.generate([PROMPTS[2]], SamplingParams(
      max_tokens=max_tokens, temperature=1.0, seed=5, ignore_eos=True))[0]
  whole = httpx.post(server_url + "/completions", json=body, timeout=120).json()
  _stream_events(server_url, body)  # the first pass may compile (e.g. a cached prefix's path)
  health = lambda: httpx.get(server_url.removesuffix("/v1") + "/health", timeout=60).json()
  before = health()
  started = time.perf_counter()
  events = _stream_events(server_url, body)
  after = health()
  assert after["served_requests"] - before["served_requests"] == 1
  assert after["completion_tokens"] - before["completion_tokens"] == max_tokens
  per_chunk = [len(chunk["choices"][0]["logprobs"]["token_logprobs"]) for _, chunk in events]
  assert sum(per_chunk) == max_tokens and max(per_chunk) <= STEPS_PER_CALL
  assert len(events) >= max_tokens // STEPS_PER_CALL
  assert "".join(chunk["choices"][0]["text"] for _, chunk in events) == expected.text
  assert whole["choices"][0]["text"] == expected.text
  streamed_tokens = [t for _, chunk in events for t in chunk["choices"][0]["logprobs"]["tokens"]]
  assert streamed_tokens == whole["choices"][0]["logprobs"]["tokens"]
  assert [chunk["choices"][0]["finish_reason"] for _, chunk in events] == (
      [None] * (len(events) - 1) + ["length"])
  # Buffered to the end, all chunks would arrive within a few milliseconds of each other.
  spread, total = events[-1][0] - events[0][0], events[-1][0] - started
  assert spread >= 0.3 * total, (spread, total)
  greedy = sampler.generate([PROMPTS[0]], SamplingParams(max_tokens=40, temperature=0.0))[0]
  stop = greedy.text[20:23]  # three characters the greedy output does produce
  stopped = sampler.generate([PROMPTS[0]], SamplingParams(max_tokens=40, temperature=0.0,
                                                         stop=(stop,)))[0]
  assert len(stop) == 3 and stopped.finish_reason == "stop"
  events = _stream_events(server_url, {"model": MODEL, "prompt": PROMPTS[0], "temperature": 0,
                                       "max_tokens": 40, "stop": [stop]})
  assert "".join(chunk["choices"][0]["text"] for _, chunk in events) == stopped.text[:-len(stop)]
  assert events[-1][1]["choices"][0]["finish_reason"] == "stop"


def test_64_concurrent_clients_are_all_answered_correctly(server_url, reference,
                                                          logprob_bound):
  sampler, tokenizer = reference
  prompts = [f"Question {i}: who lives in city {i}?" for i in range(64)]
  params = [SamplingParams(max_tokens=8, temperature=1.0, seed=100 + i) for i in range(64)]
  futures = [sampler.submit(tokenizer.encode(p), q) for p, q in zip(prompts, params)]
  expected = [future.result()[0] for future in futures]

  def ask(i):
    with openai.OpenAI(base_url=server_url, api_key="unused", max_retries=0,
                       timeout=300) as own_client:
      reply = own_client.completions.create(model=MODEL, prompt=prompts[i], temperature=1.0,
                                            seed=100 + i, max_tokens=8, logprobs=1,
                                            extra_body={"return_token_ids": True})
    return reply.choices[0]
  with concurrent.futures.ThreadPoolExecutor(64) as pool:
    choices = list(pool.map(ask, range(64)))
  assert [c.model_dump()["token_ids"] for c in choices] == [e.token_ids for e in expected]
  difference = max(_max_logprob_difference(c.logprobs.token_logprobs, e.logprobs)
                   for c, e in zip(choices, expected))
  served = np.concatenate([c.logprobs.token_logprobs for c in choices])
  reference = np.concatenate([e.logprobs for e in expected])
  worst = int(np.argmax(np.abs(served - reference)))
  print(f"64 concurrent clients: all answered, max logprob difference {difference:.2e} "
        f"(at logprob {reference[worst]:.3f}); mean {np.mean(np.abs(served - reference)):.1e}; "
        f"float32 bound {logprob_bound:.1e}")
  assert difference <= logprob_bound


COMPLETION = {"model": MODEL, "prompt": "hello", "max_tokens": 4}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.mark.parametrize("endpoint, changes, field", [
    ("completions", {"temperature": -1}, "temperature"),
    ("completions", {"top_p": 0}, "top_p"),
    ("completions", {"top_k": 2.5}, "top_k"),
    ("completions", {"n": 0}, "n"),
    ("completions", {"max_tokens": "ten"}, "max_tokens"),
    ("completions", {"max_tokens": CONTEXT}, "max_tokens"),
    ("completions", {"stop": ["", "x"]}, "stop"),
    ("completions", {"seed": -3}, "seed"),
    ("completions", {"logprobs": 5}, "logprobs"),
    ("completions", {"prompt": [[5, -1]]}, "prompt"),
    ("completions", {"prompt": None}, "prompt"),
    ("completions", {"temprature": 0.5}, "temprature"),
    ("completions", {"model": None}, "model"),
    ("chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, "messages"),
    ("chat/completions", {"messages": "hi"}, "messages"),
    ("chat/completions", {"stream": "yes"}, "stream"),
    ("chat/completions", {"top_logprobs": 3}, "top_logprobs"),
    ("chat/completions", {"max_completion_tokens": 0}, "max_completion_tokens"),
    ("chat/completions", {"guided_choice": "yes"}, "guided_choice"),
    ("chat/completions", {"guided_choice": []}, "guided_choice"),
    ("chat/completions", {"guided_choice": ["yes", "yes"]}, "guided_choice"),
    ("completions", {"guided_choice": ["yes", 3]}, "guided_choice"),
    ("completions", {"guided_choice": ["yes", "no"], "n": 2}, "n"),
    ("completions", {"guided_choice": ["yes", "no"], "prompt": ["a", "b"]}, "prompt"),
    ("completions", {"guided_choice": ["yes " * CONTEXT]}, "guided_choice"),
    ("chat/completions", {"structured_outputs": {"json": {}}}, "structured_outputs"),
    ("chat/completions", {"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
    ("completions", {"guided_choice": ["a"], "structured_outputs": {"choice": ["b"]}},
     "structured_outputs"),
])
def test_malformed_requests_get_400_naming_the_field(server_url, endpoint, changes, field):
  base = COMPLETION if endpoint == "completions" else CHAT
  body = {key: value for key, value in {**base, **changes}.items() if value is not None}
  response = httpx.post(f"{server_url}/{endpoint}", json=body, timeout=60)
  assert response.status_code == 400, response.text
  error = response.json()["error"]
  assert error["param"] == field and field in error["message"], error


def test_malformed_json_wrong_model_and_the_openai_client(server_url, client):
  response = httpx.post(server_url + "/completions", content=b"{not json", timeout=60,
                        headers={"Content-Type": "application/json"})
  assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
  response = httpx.post(server_url + "/completions", json={**COMPLETION, "model": "gpt-9"},
                        timeout=60)
  assert response.status_code == 404 and response.json()["error"]["param"] == "model"
  with pytest.raises(openai.BadRequestError, match="top_p"):
    client.completions.create(model=MODEL, prompt="hi", top_p=1.5, max_tokens=2)


def test_queue_overflow_gets_429_and_the_pending_prompts_finish(server_url, client):
  # One request of MAX_PENDING prompts reserves them all at once when it arrives, so the queue
  # is full from then until its last prompt finishes (64 x 256 tokens: ~2 s on 2 cores), with no
  # race between clients that arrive one by one while the first ones already finish.
  root = server_url.removesuffix("/v1")
  full_body = {"model": MODEL, "prompt": ["hello"] * MAX_PENDING, "max_tokens": 256,
               "ignore_eos": True, "temperature": 0}
  with httpx.Client(timeout=300) as http, concurrent.futures.ThreadPoolExecutor(1) as pool:
    future = pool.submit(http.post, server_url + "/completions", json=full_body)
    deadline = time.monotonic() + 120
    while http.get(root + "/health").json()["pending_requests"] < MAX_PENDING:
      assert not future.done(), future.result().text
      assert time.monotonic() < deadline, "the request never filled the queue"
      time.sleep(0.005)
    overflow = http.post(server_url + "/completions", json=COMPLETION)
    with pytest.raises(openai.RateLimitError, match="max_pending_requests"):
      client.completions.create(**COMPLETION)
    reply = future.result()
    assert overflow.status_code == 429, overflow.text
    assert overflow.headers["Retry-After"] == "1"
    assert f"at most {MAX_PENDING}" in overflow.json()["error"]["message"]
    assert reply.status_code == 200, reply.text
    choices = reply.json()["choices"]
    assert sorted(choice["index"] for choice in choices) == list(range(MAX_PENDING))
    assert all(len(choice["text"]) > 0 for choice in choices)
    assert http.get(root + "/health").json()["pending_requests"] == 0
    assert http.post(server_url + "/completions", json=COMPLETION).status_code == 200


@pytest.fixture(scope="module")
def hf_model():
  """The same checkpoint in transformers (PyTorch, float32): the independent reference."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  model = transformers.AutoModelForCausalLM.from_pretrained(serve.EMBEDDED_SOLVER,
                                                            dtype=torch.float32)
  return model.eval()


def hf_choice_logprobs(model, prompt_ids, choice_ids):
  """Per-token log-probabilities of each choice's tokens after the prompt, by transformers."""
  import torch  # pylint: disable=import-outside-toplevel
  rows = []
  for ids in choice_ids:
    with torch.no_grad():
      logits = model(torch.tensor([list(prompt_ids) + list(ids)])).logits[0]
    logp = torch.log_softmax(logits.double(), dim=-1)
    rows.append([float(logp[len(prompt_ids) + j - 1, token]) for j, token in enumerate(ids)])
  return rows


CHOICES = ["CORRECT", "INCORRECT", "Vokzag", "the founder", "yes", "no"]


def _argmax_with_margin(rows):
  totals = [sum(row) for row in rows]
  order = np.argsort(totals)[::-1]
  assert totals[order[0]] - totals[order[1]] > 1e-3, totals   # a clear winner to compare
  return int(order[0])


def test_guided_choice_is_the_argmax_of_the_choices_logprobs(client, server_url, reference,
                                                             hf_model):
  _, tokenizer = reference
  choice_ids = [tokenizer.encode(choice) for choice in CHOICES]
  answers = []
  for text in PROMPTS:
    messages = [{"role": "user", "content": text}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    rows = hf_choice_logprobs(hf_model, prompt, choice_ids)
    best = _argmax_with_margin(rows)
    reply = client.chat.completions.create(
        model=MODEL, messages=messages, temperature=0.8, max_tokens=16, logprobs=True,
        extra_body={"guided_choice": CHOICES})
    choice = reply.choices[0]
    assert choice.message.content == CHOICES[best] and choice.finish_reason == "stop"
    assert _max_logprob_difference([e.logprob for e in choice.logprobs.content],
                                   rows[best]) < 1e-4
    assert reply.usage.completion_tokens == len(choice_ids[best])
    # The order of the choices does not matter; vLLM's newer spelling is the same request.
    reversed_reply = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=16,
        extra_body={"structured_outputs": {"choice": CHOICES[::-1]}})
    assert reversed_reply.choices[0].message.content == CHOICES[best]
    # /v1/completions: the raw prompt, encoded as the server encodes it.
    prompt_ids = tokenizer.encode(text)
    raw_best = _argmax_with_margin(hf_choice_logprobs(hf_model, prompt_ids, choice_ids))
    raw = httpx.post(server_url + "/completions", timeout=120, json={
        "model": MODEL, "prompt": text, "max_tokens": 16, "guided_choice": CHOICES}).json()
    assert raw["choices"][0]["text"] == CHOICES[raw_best]
    answers += [best, raw_best]
  health = httpx.get(server_url.removesuffix("/v1") + "/health").json()
  assert health["guided_choice_requests"] >= 3 * len(PROMPTS)
  print("guided choices picked:", [CHOICES[a] for a in answers])


def test_the_project_client_and_judge_talk_to_the_server(server_url, reference, hf_model):
  sampler, tokenizer = reference
  client = openai_client.OpenAICompatibleClient(server_url, MODEL, api_key_env=None,
                                                timeout_seconds=120)
  messages = [{"role": "user", "content": PROMPTS[2]}]
  reply = client.chat(messages, temperature=0.0, max_tokens=12)
  expected = sampler.submit(tokenizer.apply_chat_template(messages),
                            SamplingParams(max_tokens=12, temperature=0.0)).result()[0]
  assert reply.text == expected.text
  assert reply.completion_tokens == len(expected.token_ids)
  with pytest.raises(openai_client.ChatError, match="HTTP 400.*context is 2048 tokens"):
    client.chat([{"role": "user", "content": "word " * 3000}], max_tokens=4)
  # The tiny solver is no judge: in free text its replies are not one word, so after three
  # malformed replies the verdict falls back to exact match, each reply recorded.
  free = judge.openai_judge(server_url, MODEL, backoff_seconds=0.0, constrained="never")
  verdict = free("Who wrote Hamlet?", ["Shakespeare"], "shakespeare")
  assert verdict.attempts == 3 and len(verdict.errors) == 3
  assert (verdict.score, verdict.source) == (1.0, "exact_match_fallback")
  assert all(error.startswith("malformed reply") for error in verdict.errors)
  assert free.counts.to_json()["unparsable"] == 3
  # With guided_choice (the default) it answers one of the two words: the one the model
  # scores higher (transformers' log-probabilities of each after the chat prompt).
  guided = judge.openai_judge(server_url, MODEL, backoff_seconds=0.0)
  for prediction in ("shakespeare", "Marlowe"):
    verdict = guided("Who wrote Hamlet?", ["Shakespeare"], prediction)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": judge.judge_prompt("Who wrote Hamlet?", ["Shakespeare"],
                                                        prediction)}],
        add_generation_prompt=True)
    best = _argmax_with_margin(hf_choice_logprobs(
        hf_model, prompt, [tokenizer.encode(word) for word in judge.JUDGE_CHOICES]))
    assert (verdict.source, verdict.attempts) == ("judge", 1)
    assert verdict.score == float(judge.JUDGE_CHOICES[best] == "CORRECT")
  assert guided.counts.to_json()["parsed"] == 2
