"""Harness programs, their sandboxed runtime and the trajectories it records.

  from whale_jax.harness import Harness, HarnessRuntime, Episode, ScriptedBackend
  harness = Harness(source, parent=None, origin="seed")
  failures = harness.check(allowed_imports=..., max_lines=200)     # static checks
  with HarnessRuntime(backend, tokenizer, num_workers=4, timeout_seconds=60.0) as runtime:
    trajectories = runtime.run_episodes(harness, [Episode(task_id, task, tools, sampling)])

Modules: program (Harness), static_checks, runtime (HarnessRuntime, Episode), host_calls
(serving llm/tools requests), sandbox (the sandboxed side; standard library only),
sandbox_process (its host side), trajectory (Trajectory, JSONL), patches (SEARCH/REPLACE and
whole-program proposals), scripted_backend (a fake LLMBackend), tools/ (search, python, chess).
"""
from whale_jax.harness.program import Harness
from whale_jax.harness.runtime import Episode
from whale_jax.harness.runtime import HarnessRuntime
from whale_jax.harness.scripted_backend import ScriptedBackend
from whale_jax.harness.static_checks import CheckFailure
from whale_jax.harness.static_checks import check_harness
from whale_jax.harness.static_checks import describe_failures
from whale_jax.harness.trajectory import OUTCOMES
from whale_jax.harness.trajectory import Trajectory
from whale_jax.harness.trajectory import read_jsonl
from whale_jax.harness.trajectory import write_jsonl
