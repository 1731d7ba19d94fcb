"""`python -m whale_jax.serve` compiles everything before it listens, and nothing under load.

The serve tests' one real server process on 127.0.0.1 (tests/serve/conftest.py: the embedded
solver; 64 slots, a 2,048-token context and --bucket_ratio=8, so the warmed grid is 3 slot
batches x 3 cache lengths: some 90 programs, compiled at its start with an empty compilation
cache of its own). A burst of requests spread over every prompt length the context allows and
output lengths up to MAX_NEW_TOKENS (enough to cross every cache length bucket), completions
and chat, n up to the slot count, stop strings, guided_choice, streamed and not, must leave
/health's compilation counters where they were.
"""
import concurrent.futures
import json
import os

import httpx
import numpy as np
import pytest

from tests.serve import server_process
from whale_jax import serve
from whale_jax.tokenization import load_tokenizer

MODEL = server_process.SHARED_MODEL
MAX_SLOTS = server_process.SHARED_MAX_SLOTS
CONTEXT = server_process.SHARED_CONTEXT
NUM_REQUESTS = 48
# Longer outputs than this reach no other program: a short prompt that grows by 300 tokens
# already passes every cache length bucket (32 -> 256 -> 2,048), and the long prompts start in
# the last one. Decoding ~2,000 tokens would only add a minute.
MAX_NEW_TOKENS = 300


@pytest.fixture(scope="module")
def server(shared_server):
  """(base URL, the startup lines, the compilation cache dir) of the warmed server."""
  url, lines, cache_dir = shared_server
  return url.removesuffix("/v1"), lines, cache_dir


def _bodies(tokenizer):
  """NUM_REQUESTS request bodies whose prompt lengths, max_tokens and kinds cover the range."""
  rng = np.random.default_rng(0)
  bodies = []
  for i in range(NUM_REQUESTS):
    kind = i % 6
    # Prompt lengths from 1 token to nearly the whole context; max_tokens from 1 to the rest,
    # at most MAX_NEW_TOKENS.
    prompt_length = 1 + (i * (CONTEXT - 3)) // (NUM_REQUESTS - 1)
    room = CONTEXT - prompt_length
    max_tokens = 1 + (i * 7919) % min(room, MAX_NEW_TOKENS)
    common = {"model": MODEL, "max_tokens": max_tokens, "seed": i,
              "temperature": [0.0, 1.0][i % 2], "ignore_eos": i % 4 == 1}
    prompt = rng.integers(5, tokenizer.vocab_size, prompt_length).tolist()
    if kind == 0:
      bodies.append({"endpoint": "completions", "prompt": prompt, **common})
    elif kind == 1:
      bodies.append({"endpoint": "completions", "prompt": prompt, "stream": True,
                     "stream_options": {"include_usage": True}, **common})
    elif kind in (2, 3):  # chat: a message as long as the context allows
      words = ["solve", "the", "Vokzag", "puzzle", "where", "is", "Nuk"]
      content = " ".join(words[j % len(words)] for j in range(1 + i % 40))
      messages = [{"role": "user", "content": content}]
      length = len(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
      bodies.append({"endpoint": "chat/completions", "messages": messages,
                     "stream": kind == 3, **common,
                     "max_tokens": 1 + (i * 7919) % min(CONTEXT - length, MAX_NEW_TOKENS)})
    elif kind == 4:  # guided_choice: scored, not sampled
      choices = ["CORRECT", "INCORRECT", "maybe so", "no", "yes"][:1 + i % 5]
      longest = max(len(tokenizer.encode(c)) for c in choices)
      bodies.append({"endpoint": "completions", "guided_choice": choices,
                     **common, "prompt": prompt[:CONTEXT - longest]})
    else:  # n > 1 (up to the slot count), stop strings, two prompts in one request
      bodies.append({"endpoint": "completions", "prompt": [prompt, prompt[:1 + i % 9]],
                     "n": 1 + i % MAX_SLOTS, "stop": ["e", "th"], **common})
  return bodies


def _send(base_url, body):
  """(status, the reply: its JSON, or its SSE events' JSON ending in "[DONE]")."""
  body = dict(body)
  endpoint = body.pop("endpoint")
  with httpx.Client(timeout=300) as client:
    if not body.get("stream"):
      reply = client.post(f"{base_url}/v1/{endpoint}", json=body)
      return reply.status_code, reply.json()
    with client.stream("POST", f"{base_url}/v1/{endpoint}", json=body) as reply:
      events = [line.removeprefix("data: ") for line in reply.iter_lines()
                if line.startswith("data: ")]
      return reply.status_code, [json.loads(e) if e != "[DONE]" else e for e in events]


def test_startup_reports_the_warm_up(server):
  base_url, lines, cache_dir = server
  warmed = next(line for line in lines if "warmed" in line)
  # Ratio 8 from 1 to 64 slots; from 32 to 2,048 tokens in multiples of 16.
  assert "3 slot batches [1, 8, 64] x 3 cache lengths [32, 256, 2048]" in warmed
  health = httpx.get(f"{base_url}/health").json()
  assert health["status"] == "ok"
  assert health["warmup_seconds"] > 0 and health["warmup_programs"] > 0
  assert f"warmed {health['warmup_programs']} programs" in warmed
  assert health["compilations"] >= health["warmup_programs"]
  assert os.listdir(cache_dir)  # the programs persist for the next start


def test_a_burst_over_the_whole_range_compiles_nothing(server):
  base_url, _, _ = server
  tokenizer = load_tokenizer(serve.EMBEDDED_SOLVER)
  bodies = _bodies(tokenizer)
  before = httpx.get(f"{base_url}/health").json()
  with concurrent.futures.ThreadPoolExecutor(NUM_REQUESTS) as pool:
    replies = list(pool.map(lambda body: _send(base_url, body), bodies))
  after = httpx.get(f"{base_url}/health").json()
  for body, (status, reply) in zip(bodies, replies):
    assert status == 200, (body, reply)
    if body.get("stream"):
      assert reply[-1] == "[DONE]" and not any("error" in event for event in reply[:-1])
      assert ("usage" in reply[-2]) == ("stream_options" in body), reply[-3:]
    elif "guided_choice" in body:
      assert reply["choices"][0]["text"] in body["guided_choice"]
    else:
      prompts = 2 if isinstance(body.get("prompt", [0])[0], list) else 1
      assert len(reply["choices"]) == prompts * body.get("n", 1)
      assert 1 <= reply["usage"]["completion_tokens"] <= prompts * body.get("n", 1) * body[
          "max_tokens"]
  assert after["served_requests"] - before["served_requests"] == NUM_REQUESTS
  assert after["guided_choice_requests"] > before["guided_choice_requests"]
  assert after["compilations"] == before["compilations"], (before, after)
  assert after["engine"]["compilations"] == before["engine"]["compilations"], (before, after)
