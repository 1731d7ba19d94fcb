"""Trajectory records: token counts, outcome validation, the compact trace file round trip."""
import dataclasses
import gzip
import json
import struct

import numpy as np
import pytest

from whale_jax.harness import trajectory as trajectory_lib

# A line of trajectories.jsonl as whale_jax wrote it before trace files were compact (plain
# json.dumps(Trajectory.to_json())): files written then must still read.
PLAIN_LINE = (
    '{"episode_id": "task-1#0", "task_id": "task-1", "harness_hash": "0123456789abcdef", '
    '"outcome": "ok", "answer": "Paris", "error": "", "calls": [{"method": "chat", "messages": '
    '[{"role": "user", "content": "h\\u00e9llo"}], "prompt": null, "prompt_token_ids": [1, 2, 3, '
    '4], "sampling": {"max_tokens": 8, "stop": ["\\n"], "seed": 3}, "completions": '
    '[{"token_ids": [5, 6, 260], "logprobs": [-0.5, -1.0, -0.25], "text": "hi<|im_end|>", '
    '"finish_reason": "stop"}, {"token_ids": [5, 6, 260], "logprobs": [-0.5, -1.0, -0.25], '
    '"text": "hi<|im_end|>", "finish_reason": "stop"}], "started_seconds": 0.001, '
    '"duration_seconds": 0.25}], "tool_events": [{"name": "search", "arguments": {"query": '
    '"q", "topk": 2}, "result": "Doc 1 (Title: \\"T\\") text", "error": "", "started_seconds": '
    '0.3, "duration_seconds": 0.01}], "stdout": "log\\n", "wall_seconds": 0.5, '
    '"sandbox_seconds": 0.2, "num_prompt_tokens": 4, "num_completion_tokens": 6}')


def make_trajectory():
  completion = trajectory_lib.RecordedCompletion(token_ids=[5, 6, 260], logprobs=[-0.5, -1.0, -0.25],
                                                 text="hi<|im_end|>", finish_reason="stop")
  call = trajectory_lib.LLMCall(
      method="chat", messages=[{"role": "user", "content": "héllo"}], prompt=None,
      prompt_token_ids=[1, 2, 3, 4], sampling={"max_tokens": 8, "stop": ["\n"], "seed": 3},
      completions=[completion, completion], started_seconds=0.001, duration_seconds=0.25)
  event = trajectory_lib.ToolEvent(name="search", arguments={"query": "q", "topk": 2},
                                   result="Doc 1 (Title: \"T\") text", error="",
                                   started_seconds=0.3, duration_seconds=0.01)
  return trajectory_lib.Trajectory(
      episode_id="task-1#0", task_id="task-1", harness_hash="0123456789abcdef", outcome="ok",
      answer="Paris", calls=[call], tool_events=[event], stdout="log\n", wall_seconds=0.5,
      sandbox_seconds=0.2)


def completion(rng, length, text="", finish_reason="stop"):
  logprobs = (-rng.exponential(1.0, length)).astype(np.float32).astype(float).tolist()
  return trajectory_lib.RecordedCompletion(rng.integers(0, 151_936, length).tolist(), logprobs,
                                           text, finish_reason)


def call(prompt_token_ids, completions, messages=None, prompt=None):
  return trajectory_lib.LLMCall("chat" if prompt is None else "generate", messages, prompt,
                                prompt_token_ids, {"temperature": 1.0, "n": len(completions)},
                                completions, started_seconds=0.1, duration_seconds=0.2)


def multi_turn(rng, num_calls=3, num_samples=2, step=40):
  """A chat agent: each prompt is the last prompt, its second sample and a tool result."""
  ids, messages, calls = rng.integers(0, 151_936, step).tolist(), [
      {"role": "system", "content": "Answer."}, {"role": "user", "content": "Où? 🗺"}], []
  for turn in range(num_calls):
    samples = [completion(rng, step, f"reply {turn}.{j} ✓") for j in range(num_samples)]
    calls.append(call(ids, samples, messages))
    ids = ids + samples[-1].token_ids + rng.integers(0, 151_936, step // 2).tolist()
    messages = messages + [{"role": "assistant", "content": samples[-1].text},
                           {"role": "tool", "content": f"result {turn}\u2028line two"}]
  return trajectory_lib.Trajectory("e#0", "e", "abcd", "ok", answer="Paris", calls=calls)


def round_trip(trajectories, tmp_path):
  path = tmp_path / "trajectories.jsonl.gz"
  trajectory_lib.write_jsonl(path, trajectories)
  return trajectory_lib.read_jsonl(path)


def float_bits(values):
  return [struct.pack("<d", value) for value in values]


def test_token_counts_sum_over_calls_and_samples():
  trajectory = make_trajectory()
  assert trajectory.num_prompt_tokens == 4
  assert trajectory.num_completion_tokens == 6  # two samples of three tokens
  assert trajectory.num_turns == 1


def test_jsonl_round_trip_is_exact(tmp_path):
  trajectories = [make_trajectory(),
                  trajectory_lib.Trajectory("e2", "t2", "ffff", "timeout", error="killed")]
  path = tmp_path / "trajectories.jsonl.gz"
  trajectory_lib.write_jsonl(path, trajectories)
  assert trajectory_lib.read_jsonl(path) == trajectories
  first_row = json.loads(gzip.decompress(path.read_bytes()).splitlines()[0])["trajectory"]
  assert (first_row["num_prompt_tokens"], first_row["num_completion_tokens"]) == (4, 6)


def test_multi_turn_prompts_are_stored_once_and_read_back_exactly(tmp_path):
  trajectory = multi_turn(np.random.default_rng(0))
  assert round_trip([trajectory], tmp_path) == [trajectory]
  later = trajectory.to_compact_json()["calls"][1:]
  # Each prompt: the previous prompt, its second sample (index 1), then 20 new ids.
  assert [data["prompt_token_prefix"] for data in later] == [[0, 1, 80], [1, 1, 140]]
  assert all(len(trajectory_lib._unpack(data["prompt_token_ids"])) == 20 for data in later)
  assert [data["messages_prefix"] for data in later] == [[0, 2], [1, 4]]
  assert all(len(data["messages"]) == 2 for data in later)


def test_prompts_that_extend_no_earlier_call_are_stored_whole(tmp_path):
  rng = np.random.default_rng(1)
  calls = [call([1, 2, 3], [completion(rng, 4)], [{"role": "user", "content": "a"}]),
           call([9, 8], [completion(rng, 4)], [{"role": "user", "content": "b"}]),
           call([1, 2, 7, 7], [completion(rng, 4)], [{"role": "user", "content": "a"},
                                                     {"role": "user", "content": "c"}])]
  trajectory = trajectory_lib.Trajectory("e#0", "e", "abcd", "ok", answer="", calls=calls)
  assert round_trip([trajectory], tmp_path) == [trajectory]
  encoded = trajectory.to_compact_json()["calls"]
  assert "prompt_token_prefix" not in encoded[1] and "messages_prefix" not in encoded[1]
  # Shares [1, 2] with call 0's prompt, and with its prompt and sample 0: the later base.
  assert encoded[2]["prompt_token_prefix"] == [0, 0, 2]
  assert encoded[2]["messages_prefix"] == [0, 1]


def test_generate_prompts_extend_earlier_text(tmp_path):
  rng = np.random.default_rng(2)
  first = completion(rng, 3, " wörld")
  calls = [call([1, 2], [first], prompt="Héllo"),
           call([1, 2] + first.token_ids + [4], [completion(rng, 2, "!")],
                prompt="Héllo wörld\n")]
  trajectory = trajectory_lib.Trajectory("e#0", "e", "abcd", "ok", answer="", calls=calls)
  assert round_trip([trajectory], tmp_path) == [trajectory]
  encoded = trajectory.to_compact_json()["calls"][1]
  assert (encoded["prompt_prefix"], encoded["prompt"]) == ([0, 0, 11], "\n")


def test_edge_cases_round_trip(tmp_path):
  rng = np.random.default_rng(3)
  empty = trajectory_lib.RecordedCompletion([], [], "", "length")
  odd_floats = [0.1, -0.0, float("inf"), 5e-324, -1e300]  # not all float32: stored as float64
  calls = [call([], [empty]),                                    # empty prompt and completion
           call([3, 4], []),                                     # no completions
           call([2**40, -2**35], [trajectory_lib.RecordedCompletion(
               [7, 2**33], odd_floats, "\u2028\ud7ff\U0001f600", "stop")]),
           call([3, 4, 5], [completion(rng, 0)], messages=[])]
  trajectories = [
      trajectory_lib.Trajectory("e#0", "e", "abcd", "harness_error", error="Trace\n\u00e9",
                                calls=calls, stdout="ünïcode ✓\n"),
      trajectory_lib.Trajectory("e#1", "e", "abcd", "infra_error"),       # no calls
      trajectory_lib.Trajectory("e#2", "e", "abcd", "ok", answer="")]
  read = round_trip(trajectories, tmp_path)
  assert read == trajectories
  assert float_bits(read[0].calls[2].completions[0].logprobs) == float_bits(odd_floats)


def test_float32_logprobs_are_bit_exact(tmp_path):
  trajectory = multi_turn(np.random.default_rng(4), num_calls=2, num_samples=1)
  read = round_trip([trajectory], tmp_path)[0]
  for written, back in zip(trajectory.calls, read.calls):
    assert float_bits(back.completions[0].logprobs) == float_bits(written.completions[0].logprobs)
  assert "float32" in trajectory.to_compact_json()["calls"][0]["completions"][0]["logprobs"]


def test_messages_read_back_are_not_shared_between_calls(tmp_path):
  read = round_trip([multi_turn(np.random.default_rng(5))], tmp_path)[0]
  read.calls[1].messages[0]["content"] = "changed"
  assert read.calls[0].messages[0]["content"] == "Answer."


def test_records_keep_their_fields_and_from_json_reads_both_forms(tmp_path):
  trajectory = multi_turn(np.random.default_rng(6))
  path = tmp_path / "step.jsonl.gz"
  trajectory_lib.write_records(path, [{"score": 0.5, "trajectory": trajectory}])
  [record] = trajectory_lib.read_records(path)
  assert record == {"score": 0.5, "trajectory": trajectory}
  [raw] = trajectory_lib.read_records(path, decode=False)
  assert raw["trajectory"]["format"] == trajectory_lib.COMPACT_FORMAT
  assert trajectory_lib.Trajectory.from_json(raw["trajectory"]) == trajectory
  assert trajectory_lib.Trajectory.from_json(trajectory.to_json()) == trajectory


def test_plain_jsonl_files_written_before_still_read(tmp_path):
  bare = tmp_path / "trajectories.jsonl"            # archive: one trajectory per line
  bare.write_text(PLAIN_LINE + "\n")
  assert trajectory_lib.read_jsonl(bare) == [make_trajectory()]
  records = tmp_path / "step_0001.jsonl"            # VACE blocks, test episodes, the cache
  records.write_text(json.dumps({"score": 1.0, "trajectory": json.loads(PLAIN_LINE)}) + "\n")
  assert trajectory_lib.read_records(records) == [
      {"score": 1.0, "trajectory": make_trajectory()}]


def test_appends_survive_a_torn_member(tmp_path):
  path = tmp_path / "cache.jsonl.gz"
  first, second = multi_turn(np.random.default_rng(7)), make_trajectory()
  trajectory_lib.write_records(path, [{"key": 1, "trajectory": first}], append=True)
  with open(path, "ab") as file:  # a crash mid-append
    file.write(gzip.compress(b'{"key": 2, "trajectory": {}}\n')[:25])
  trajectory_lib.write_records(path, [{"key": 3, "trajectory": second}], append=True)
  assert trajectory_lib.read_records(path) == [{"key": 1, "trajectory": first},
                                               {"key": 3, "trajectory": second}]


def test_compact_file_is_several_times_smaller(tmp_path):
  trajectories = [multi_turn(np.random.default_rng(seed), num_calls=4, step=256)
                  for seed in range(4)]
  path = tmp_path / "trajectories.jsonl.gz"
  trajectory_lib.write_jsonl(path, trajectories)
  plain = sum(len(json.dumps(t.to_json())) + 1 for t in trajectories)
  assert path.stat().st_size * 4 < plain


def test_unknown_outcome_is_refused():
  with pytest.raises(ValueError, match="expected one of"):
    trajectory_lib.Trajectory("e", "t", "h", "crashed")


def test_unknown_format_is_refused():
  with pytest.raises(ValueError, match="format 'compact/9'"):
    trajectory_lib.Trajectory.from_json({"format": "compact/9"})


def test_each_host_writes_its_shard_and_readers_merge_them(tmp_path):
  path = tmp_path / "evaluation_000.jsonl.gz"
  assert trajectory_lib.shard_path(path, 0, 1) == str(path)
  assert trajectory_lib.shard_path(path, 1, 2) == str(
      tmp_path / "evaluation_000.host_001.jsonl.gz")
  trajectories = [dataclasses.replace(make_trajectory(), task_id=f"t{i}") for i in range(3)]
  for host in range(2):
    trajectory_lib.write_records(trajectory_lib.shard_path(path, host, 2),
                                 [{"episode": i, "trajectory": t}
                                  for i, t in enumerate(trajectories) if i % 2 == host])
  assert not path.exists()
  records = trajectory_lib.read_shards(path)
  assert [r["episode"] for r in records] == [0, 2, 1]
  assert [r["trajectory"] for r in records] == [trajectories[i] for i in (0, 2, 1)]
  assert trajectory_lib.read_shards(tmp_path / "absent.jsonl.gz") == []
