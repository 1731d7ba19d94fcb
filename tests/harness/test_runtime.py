"""HarnessRuntime: host-served llm and tools calls, recording, ordering, timing, failures."""
import dataclasses
import json
import os
import random
import threading
import time

import pytest

from whale_jax.harness import Episode
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import SamplingParams
from whale_jax.tokenization import load_tokenizer
from tests.test_seeds import reference_seed

TOKENIZER = load_tokenizer("byte")
END_OF_TURN = 260  # <|im_end|>
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]


def reply_for(prompt_text):
  if "FAIL" in prompt_text:
    raise RuntimeError("backend exploded")
  return f"reply#{len(prompt_text)}"


@pytest.fixture(scope="module")
def runtime():
  backend = ScriptedBackend(TOKENIZER, replies=reply_for)
  with HarnessRuntime(backend, TOKENIZER, num_workers=2, timeout_seconds=2.0,
                      max_calls=20) as pool:
    yield pool


def play(runtime, source, task=None, tools=None, sampling=SamplingParams(max_tokens=64, seed=5)):
  episode = Episode(task_id="t", task=task or {}, tools=tools or {}, sampling=sampling)
  return runtime.run_episodes(Harness(source), [episode])[0]


def test_chat_is_rendered_once_on_the_host_and_recorded(runtime):
  trajectory = play(runtime, f"def run(task, llm, tools):\n  return llm.chat({MESSAGES!r})\n")
  assert trajectory.outcome == "ok", trajectory.error
  [call] = trajectory.calls
  prompt_ids = TOKENIZER.apply_chat_template(MESSAGES, add_generation_prompt=True)
  reply = f"reply#{len(TOKENIZER.decode(prompt_ids))}"
  assert call.prompt_token_ids == prompt_ids
  assert call.completions[0].token_ids == TOKENIZER.encode(reply) + [END_OF_TURN]
  assert trajectory.answer == reply  # the end-of-turn token is not part of the text
  assert (call.method, call.messages, call.sampling["max_tokens"]) == ("chat", MESSAGES, 64)


class OwnTextBackend(ScriptedBackend):
  """Completions whose own text is not the host's decoding: none (a sampler built without a
  tokenizer) for the first sample of a call, a server's own view for the others."""

  def _complete(self, prompt_ids, params):
    return [dataclasses.replace(completion, text="" if index == 0 else "a server's own view")
            for index, completion in enumerate(super()._complete(prompt_ids, params))]


def test_text_is_decoded_once_on_the_host_and_recorded_as_the_harness_saw_it():
  source = ("def run(task, llm, tools):\n"
            "  return '|'.join(llm.chat([{'role': 'user', 'content': 'x'}], n=2))\n")
  with HarnessRuntime(OwnTextBackend(TOKENIZER, replies="Paris"), TOKENIZER,
                      num_workers=1) as pool:
    trajectory = play(pool, source)
  assert trajectory.outcome == "ok", trajectory.error
  completions = trajectory.calls[0].completions
  assert [c.token_ids for c in completions] == [TOKENIZER.encode("Paris") + [END_OF_TURN]] * 2
  assert trajectory.answer == "Paris|Paris"  # decoded on the host, less the end-of-turn token
  assert [c.text for c in completions] == ["Paris", "Paris"]  # the text the harness got


def test_generate_encodes_the_raw_prompt(runtime):
  trajectory = play(runtime, "def run(task, llm, tools):\n  return llm.generate('Q: x\\nA:')\n")
  assert trajectory.calls[0].prompt_token_ids == TOKENIZER.encode("Q: x\nA:")
  assert trajectory.answer == f"reply#{len('Q: x' + chr(10) + 'A:')}"


def test_n_samples_come_back_as_a_list(runtime):
  trajectory = play(runtime, "def run(task, llm, tools):\n"
                    "  return repr(llm.generate('abc', n=3, max_tokens=4))\n")
  assert trajectory.answer == repr(["repl"] * 3)
  assert [c.finish_reason for c in trajectory.calls[0].completions] == ["length"] * 3


def test_unknown_sampling_argument_names_the_allowed_ones(runtime):
  source = ("def run(task, llm, tools):\n  try:\n    llm.generate('x', temp=0.5)\n"
            "  except TypeError as error:\n    return str(error)\n")
  answer = play(runtime, source).answer
  assert "unknown argument(s) temp" in answer
  assert "max_tokens, temperature, top_p, top_k, n, stop, seed" in answer


def test_max_tokens_above_the_episode_limit_is_refused(runtime):
  source = ("def run(task, llm, tools):\n  try:\n    llm.generate('x', max_tokens=65)\n"
            "  except ValueError as error:\n    return str(error)\n")
  assert "exceeds this episode's limit of 64 tokens" in play(runtime, source).answer


def test_call_seeds_follow_the_documented_stream(runtime):
  source = ("def run(task, llm, tools):\n  for _ in range(3):\n    llm.generate('x')\n"
            "  llm.generate('x', seed=11)\n  return ''\n")
  seeds = [call.sampling["seed"] for call in play(runtime, source).calls]
  assert seeds == [reference_seed(5, "llm_call", k) for k in range(3)] + [11]


def test_tools_run_on_the_host_and_are_recorded(runtime):
  calls = []

  def add(a, b=0):
    calls.append(threading.current_thread().name)
    return {"sum": a + b}

  trajectory = play(runtime, "def run(task, llm, tools):\n  return str(tools.add(2, b=3))\n",
                    tools={"add": add})
  assert trajectory.answer == "{'sum': 5}"
  assert calls[0].startswith("harness-worker-")  # ran in the host process
  [event] = trajectory.tool_events
  assert (event.name, event.arguments, event.result, event.error) == (
      "add", {"a": 2, "b": 3}, {"sum": 5}, "")


def test_failing_tool_raises_in_the_harness_and_is_recorded(runtime):
  def broken(query):
    raise KeyError(query)

  source = ("def run(task, llm, tools):\n  try:\n    tools.search('q')\n"
            "  except Exception as error:\n    return type(error).__name__ + ': ' + str(error)\n")
  trajectory = play(runtime, source, tools={"search": broken})
  assert trajectory.answer == "ToolError: tools.search() failed: KeyError: 'q'"
  assert trajectory.tool_events[0].error == "tools.search() failed: KeyError: 'q'"


def test_unknown_tool_and_bad_arguments_are_explained(runtime):
  source = ("def run(task, llm, tools):\n  out = []\n"
            "  for call in (lambda: tools.browse('x'), lambda: tools.search(1, 2, 3)):\n"
            "    try:\n      call()\n    except Exception as error:\n      out.append(str(error))\n"
            "  return '|'.join(out)\n")
  unknown, bad = play(runtime, source, tools={"search": lambda query, topk=3: ""}).answer.split("|")
  assert unknown == "tools has no tool named 'browse'; this domain offers: search."
  assert bad.startswith("tools.search(query, topk=3): too many positional arguments")


def test_only_public_task_fields_and_tool_names_enter_the_sandbox(runtime):
  source = "import json\ndef run(task, llm, tools):\n  return json.dumps([task, dir(tools)])\n"
  task = {"question": "q", "choices": [1, 2]}
  trajectory = play(runtime, source, task=task, tools={"b": len, "a": len})
  assert json.loads(trajectory.answer) == [task, ["a", "b"]]


def test_trajectories_come_back_in_the_order_of_the_episodes(runtime):
  source = ("import time\ndef run(task, llm, tools):\n  time.sleep(task['sleep'])\n"
            "  return str(task['index'])\n")
  sleeps = [0.3, 0.0, 0.2, 0.0, 0.1, 0.0]
  episodes = [Episode(f"t{i}", {"index": i, "sleep": s}) for i, s in enumerate(sleeps)]
  trajectories = runtime.run_episodes(Harness(source), episodes)
  assert [t.answer for t in trajectories] == [str(i) for i in range(len(sleeps))]
  assert [t.task_id for t in trajectories] == [f"t{i}" for i in range(len(sleeps))]


def test_time_serving_host_calls_does_not_count_toward_the_timeout(runtime):
  def slow(seconds):
    time.sleep(seconds)
    return "done"

  source = "def run(task, llm, tools):\n  return tools.slow(1.2) + tools.slow(1.2)\n"
  trajectory = play(runtime, source, tools={"slow": slow})
  assert trajectory.outcome == "ok"  # 2.4 s of wall time against a 2 s timeout
  assert trajectory.wall_seconds > 2.4 > 1.0 > trajectory.sandbox_seconds


def test_printed_output_is_captured(runtime):
  trajectory = play(runtime, "def run(task, llm, tools):\n  print('thinking', 42)\n  return 'a'\n")
  assert trajectory.stdout == "thinking 42\n"


def test_no_state_survives_from_one_episode_to_the_next(runtime):
  source = ("SEEN = []\ndef run(task, llm, tools):\n"
            "  try:\n    seen = open('note.txt').read() == 'x' or bool(SEEN)\n"
            "  except OSError:\n    seen = bool(SEEN)\n"
            "  open('note.txt', 'w').write('x')\n  SEEN.append(1)\n  return str(seen)\n")
  episodes = [Episode(f"t{i}", {}) for i in range(6)]
  runtime_answers = [t.answer for t in runtime.run_episodes(Harness(source), episodes)]
  assert runtime_answers == ["False"] * 6


def test_too_many_calls_is_a_harness_error(runtime):
  source = "def run(task, llm, tools):\n  while True:\n    llm.generate('x', max_tokens=1)\n"
  trajectory = play(runtime, source)
  assert trajectory.outcome == "harness_error"
  assert "max_calls=20" in trajectory.error
  assert len(trajectory.calls) == 20


def test_backend_failure_is_an_infra_error(runtime):
  trajectory = play(runtime, "def run(task, llm, tools):\n  return llm.generate('FAIL')\n")
  assert trajectory.outcome == "infra_error"
  assert "backend exploded" in trajectory.error


def test_worker_killed_from_outside_is_an_infra_error_and_is_replaced(runtime):
  def kill_workers():
    for pid in runtime.worker_pids:
      os.kill(pid, 9)
    time.sleep(0.2)
    return "killed"

  trajectory = play(runtime, "def run(task, llm, tools):\n  tools.kill()\n  return 'x'\n",
                    tools={"kill": kill_workers})
  assert trajectory.outcome == "infra_error"
  assert "worker process died" in trajectory.error
  after = runtime.run_episodes(Harness("def run(task, llm, tools):\n  return 'fine'\n"),
                               [Episode(f"t{i}", {}) for i in range(4)])
  assert [t.answer for t in after] == ["fine"] * 4


def test_task_that_is_not_json_is_refused_at_submit(runtime):
  with pytest.raises(TypeError, match="JSON-serializable dict of public fields"):
    runtime.submit(Harness("def run(task, llm, tools):\n  return ''\n"),
                   Episode("t", {"when": object()}))


def test_calls_of_concurrent_episodes_reach_the_backend_together():
  backend = ScriptedBackend(TOKENIZER, replies="x", latency_seconds=0.5)
  with HarnessRuntime(backend, TOKENIZER, num_workers=2, timeout_seconds=5.0) as pool:
    start = time.monotonic()
    trajectories = pool.run_episodes(
        Harness("def run(task, llm, tools):\n  return llm.generate('q')\n"),
        [Episode("a", {}), Episode("b", {})])
    elapsed = time.monotonic() - start
  backend.close()
  assert [t.answer for t in trajectories] == ["x", "x"]
  assert backend.max_in_flight == 2
  assert elapsed < 1.0  # in sequence the two 0.5 s calls would take longer


def test_allowed_imports_the_sandbox_lacks_are_refused():
  with pytest.raises(ValueError, match="cannot import: numpy"):
    HarnessRuntime(ScriptedBackend(TOKENIZER, "x"), TOKENIZER, num_workers=1,
                   allowed_imports=("json", "numpy"))


def test_close_leaves_no_process_behind():
  pool = HarnessRuntime(ScriptedBackend(TOKENIZER, "x"), TOKENIZER, num_workers=2)
  pids = pool.worker_pids
  assert len(pids) == 2
  pool.close()
  for pid in pids:
    assert not os.path.exists(f"/proc/{pid}"), pid


def test_close_ends_in_flight_episodes_as_infra_errors_and_cancels_queued_ones():
  pool = HarnessRuntime(ScriptedBackend(TOKENIZER, "x"), TOKENIZER, num_workers=1,
                        timeout_seconds=30.0)
  sleeper = Harness("import time\ndef run(task, llm, tools):\n  time.sleep(30)\n  return ''\n")
  running = pool.submit(sleeper, Episode("running", {}))
  queued = pool.submit(sleeper, Episode("queued", {}))
  time.sleep(0.3)
  start = time.monotonic()
  pool.close()
  assert time.monotonic() - start < 5
  assert running.result().outcome == "infra_error"
  assert "closed" in running.result().error
  assert queued.cancelled()


def test_dataclasses_and_enums_work_in_a_harness(runtime):
  source = ("import dataclasses, enum\n\n@dataclasses.dataclass\nclass Step:\n  name: str\n\n"
            "class Kind(enum.Enum):\n  SEARCH = 1\n\n"
            "def run(task, llm, tools):\n  return repr((Step('a'), Kind.SEARCH))\n")
  trajectory = play(runtime, source)
  assert trajectory.answer == "(Step(name='a'), <Kind.SEARCH: 1>)", trajectory.error


def test_random_stream_depends_only_on_task_and_seed(runtime):
  source = "import random\ndef run(task, llm, tools):\n  return repr(random.random())\n"
  episodes = [Episode("q7", {}, sampling=SamplingParams(seed=3)) for _ in range(4)]
  answers = {t.answer for t in runtime.run_episodes(Harness(source), episodes)}
  assert answers == {repr(random.Random(reference_seed(3, "harness_random", "q7")).random())}


def test_backend_that_does_not_answer_in_time_is_an_infra_error():
  backend = ScriptedBackend(TOKENIZER, replies="x", latency_seconds=1.0)
  with HarnessRuntime(backend, TOKENIZER, num_workers=1,
                      backend_timeout_seconds=0.2) as pool:
    trajectory = pool.run_episodes(Harness("def run(task, llm, tools):\n"
                                           "  return llm.generate('q')\n"), [Episode("t", {})])[0]
  backend.close()
  assert trajectory.outcome == "infra_error"
  assert "backend_timeout_seconds" in trajectory.error


def test_a_confinement_failure_is_reported_by_the_worker_as_infra_error():
  # an open-files limit above the hard limit cannot be set: the child fails before the harness
  with HarnessRuntime(ScriptedBackend(TOKENIZER, "x"), TOKENIZER, num_workers=1,
                      max_open_files=1 << 40) as pool:
    trajectory = pool.run_episodes(Harness("def run(task, llm, tools):\n  return 'ran'\n"),
                                   [Episode("t", {})])[0]
  assert trajectory.outcome == "infra_error"
  assert "sandbox confinement failed" in trajectory.error
  assert trajectory.answer is None
