r"""Bytes per rollout of a trace file, before (plain JSON lines) and after (compact, gzip).

  python bench/trace_size.py                      # 1,024 tokens in 2 calls; 8,192 in 4 calls
  python bench/trace_size.py --sizes=32768x8 --rollouts_per_file=4

A synthetic multi-turn chat rollout of T tokens in C calls: every call adds T / (2 C) new
prompt tokens (the task, then a tool result) and generates T / (2 C) tokens, and its prompt is
the previous call's prompt, its completion and the new tokens, as an agent's context grows;
its messages are the chat so far (the text of every token, about 4 characters each). Token ids
are uniform over a 151,936-token vocabulary and logprobs are float32 values (as the sampler
returns them), so neither compresses the way real ones might; the text is drawn from a
2,000-word vocabulary. Each file holds --rollouts_per_file different rollouts of one size.

Before: one line of json.dumps(Trajectory.to_json()) per rollout, uncompressed (the trace
files written before). After: trajectory.write_jsonl (compact form, gzip). Also printed: the
compact form uncompressed and the old lines gzip-compressed, to show what each part gives, and
the seconds to write and read one rollout (read_jsonl checks that every rollout comes back
equal).
"""
import argparse
import gzip
import json
import os
import tempfile
import time

import numpy as np

from whale_jax.harness import trajectory as trajectory_lib

VOCAB_SIZE = 151_936


def synthetic_rollout(num_tokens, num_calls, rng, index=0):
  """One Trajectory of num_tokens tokens over num_calls chat calls (module docstring)."""
  words = [f"w{n:04d}" for n in range(2_000)]
  step = num_tokens // (2 * num_calls)
  draw_ids = lambda: rng.integers(0, VOCAB_SIZE, step).tolist()
  draw_text = lambda: " ".join(words[i] for i in rng.integers(0, len(words), step)) + " "
  prompt_ids, messages, calls, clock = [], [], [], 0.0
  for call_index in range(num_calls):
    prompt_ids = prompt_ids + draw_ids()
    messages = messages + [{"role": "user" if call_index == 0 else "tool",
                            "content": draw_text()}]
    completion_ids = draw_ids()
    logprobs = (-rng.exponential(1.0, step)).astype(np.float32).astype(float).tolist()
    completion = trajectory_lib.RecordedCompletion(completion_ids, logprobs, draw_text(), "stop")
    calls.append(trajectory_lib.LLMCall(
        "chat", messages, None, prompt_ids,
        {"temperature": 1.0, "max_tokens": step, "n": 1, "seed": index}, [completion],
        started_seconds=clock, duration_seconds=0.5))
    clock += 0.75
    prompt_ids = prompt_ids + completion_ids
    messages = messages + [{"role": "assistant", "content": completion.text}]
  return trajectory_lib.Trajectory(
      f"task-{index}#0", f"task-{index}", "0123456789abcdef", "ok", answer="42", calls=calls,
      wall_seconds=clock, sandbox_seconds=0.1)


def measure(num_tokens, num_calls, rollouts_per_file, directory):
  rng = np.random.default_rng(0)
  rollouts = [synthetic_rollout(num_tokens, num_calls, rng, index)
              for index in range(rollouts_per_file)]
  plain = "".join(json.dumps(t.to_json()) + "\n" for t in rollouts).encode()
  compact = "".join(json.dumps({"trajectory": t.to_compact_json()}) + "\n"
                    for t in rollouts).encode()
  path = os.path.join(directory, f"trace_{num_tokens}x{num_calls}.jsonl.gz")
  start = time.perf_counter()
  trajectory_lib.write_jsonl(path, rollouts)
  write_seconds = time.perf_counter() - start
  start = time.perf_counter()
  assert trajectory_lib.read_jsonl(path) == rollouts
  read_seconds = time.perf_counter() - start
  per_rollout = lambda size: size / rollouts_per_file / 1e3
  return {"tokens": num_tokens, "calls": num_calls,
          "before_kb": per_rollout(len(plain)),
          "plain_gzip_kb": per_rollout(len(gzip.compress(plain, mtime=0))),
          "compact_kb": per_rollout(len(compact)),
          "after_kb": per_rollout(os.path.getsize(path)),
          "write_ms": 1e3 * write_seconds / rollouts_per_file,
          "read_ms": 1e3 * read_seconds / rollouts_per_file}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", default="1024x2,8192x4",
                      help="comma-separated TOKENSxCALLS rollout sizes")
  parser.add_argument("--rollouts_per_file", type=int, default=8)
  args = parser.parse_args()
  print("| tokens | calls | before KB | plain + gzip KB | compact KB | after KB (compact + gzip) "
        "| before / after | write ms | read ms |")
  print("|---|---|---|---|---|---|---|---|---|")
  with tempfile.TemporaryDirectory() as directory:
    for size in args.sizes.split(","):
      num_tokens, num_calls = (int(part) for part in size.split("x"))
      row = measure(num_tokens, num_calls, args.rollouts_per_file, directory)
      print(f"| {num_tokens:,} | {num_calls} | {row['before_kb']:.1f} | {row['plain_gzip_kb']:.1f} "
            f"| {row['compact_kb']:.1f} | {row['after_kb']:.1f} "
            f"| {row['before_kb'] / row['after_kb']:.1f}x | {row['write_ms']:.1f} "
            f"| {row['read_ms']:.1f} |")


if __name__ == "__main__":
  main()
