"""`python -m whale_jax.serve` compiles everything before it listens, and nothing under load.

One real server process on 127.0.0.1 (the embedded solver; 8 slots, a 128-token context and
--bucket_ratio=8, so the warmed grid is 2 slot batches x 2 cache lengths: some 40 programs).
After it is healthy, a burst of requests spread over every prompt and output length the
context allows, completions and chat, n up to the slot count, stop strings, guided_choice,
streamed and not, must leave /health's compilation counters where they were.
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

MODEL = "embedded"
MAX_SLOTS = 8
CONTEXT = 128
BUCKET_RATIO = 8
NUM_REQUESTS = 48


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("compilation_cache")


@pytest.fixture(scope="module")
def server(cache_dir):
  """(base URL, the startup lines) of a server that has finished warming up (with an empty
  compilation cache of its own: every program is compiled)."""
  with server_process.started(
      [f"--model={MODEL}", f"--max_slots={MAX_SLOTS}", f"--max_cache_length={CONTEXT}",
       "--steps_per_call=8", f"--bucket_ratio={BUCKET_RATIO}",
       f"--compilation_cache_dir={cache_dir}"]) as (url, lines):
    yield url.removesuffix("/v1"), lines


def _bodies(tokenizer):
  """NUM_REQUESTS request bodies whose prompt lengths, max_tokens and kinds cover the range."""
  rng = np.random.default_rng(0)
  bodies = []
  for i in range(NUM_REQUESTS):
    kind = i % 6
    # Prompt lengths from 1 token to nearly the whole context; max_tokens from 1 to the rest.
    prompt_length = 1 + (i * (CONTEXT - 3)) // (NUM_REQUESTS - 1)
    room = CONTEXT - prompt_length
    max_tokens = 1 + (i * 7919) % room
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
                     "max_tokens": 1 + (i * 7919) % (CONTEXT - length)})
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


def test_startup_reports_the_warm_up(server, cache_dir):
  base_url, lines = server
  warmed = next(line for line in lines if "warmed" in line)
  assert "2 slot batches [1, 8] x 2 cache lengths [32, 128]" in warmed
  health = httpx.get(f"{base_url}/health").json()
  assert health["status"] == "ok"
  assert health["warmup_seconds"] > 0 and health["warmup_programs"] > 0
  assert f"warmed {health['warmup_programs']} programs" in warmed
  assert health["compilations"] >= health["warmup_programs"]
  assert os.listdir(cache_dir)  # the programs persist for the next start


def test_a_burst_over_the_whole_range_compiles_nothing(server):
  base_url, _ = server
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
