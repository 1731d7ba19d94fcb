r"""Per-episode overhead of the harness runtime: a harness making one fake LLM call.

  python bench/harness_overhead.py                        # 1,000 episodes on 4 workers
  python bench/harness_overhead.py --num_episodes=200 --num_workers=2

The backend is whale_jax.harness.ScriptedBackend (no model: it answers at once), so every
millisecond measured is the runtime's own: dispatch, fork of a confined child, JSON messages,
chat rendering and tokenization on the host, recording. Prints the median and 90th percentile
of per-episode wall time (dispatch to trajectory, queueing excluded), the throughput of the
whole batch, and the CPU time spent per episode by the host and by the sandbox processes
(workers and their per-episode children; the warm-up's share is subtracted) — the figure
that does not depend on how busy the machine is.
"""
import argparse
import resource
import statistics
import time

from whale_jax.harness import Episode
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.tokenization import load_tokenizer

HARNESS = '''
def run(task, llm, tools):
    return llm.chat([{"role": "user", "content": task["question"]}], max_tokens=32)
'''


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--num_episodes", type=int, default=1000)
  parser.add_argument("--num_workers", type=int, default=4)
  parser.add_argument("--num_warmup_episodes", type=int, default=40)
  args = parser.parse_args()
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, replies="The answer is 42.")
  harness = Harness(HARNESS)
  episodes = [Episode(task_id=f"q{i}", task={"question": f"What is {i} + {i}?"})
              for i in range(args.num_episodes)]
  runtime = HarnessRuntime(backend, tokenizer, num_workers=args.num_workers,
                           timeout_seconds=30.0)
  runtime.run_episodes(harness, episodes[:args.num_warmup_episodes])
  host_before, sandbox_before = _cpu_seconds()
  start = time.perf_counter()
  trajectories = runtime.run_episodes(harness, episodes)
  elapsed = time.perf_counter() - start
  host_after, _ = _cpu_seconds()
  runtime.close()  # reaps the workers, whose CPU time (with their children's) then counts
  _, sandbox_after = _cpu_seconds()
  warmup_share = args.num_warmup_episodes / (args.num_episodes + args.num_warmup_episodes)
  outcomes = {t.outcome for t in trajectories}
  assert outcomes == {"ok"}, f"expected every episode ok; got {outcomes}"
  wall_ms = sorted(1e3 * t.wall_seconds for t in trajectories)
  print(f"episodes={args.num_episodes} workers={args.num_workers}")
  print(f"median_episode_ms={statistics.median(wall_ms):.2f} "
        f"p90_episode_ms={wall_ms[int(0.9 * len(wall_ms))]:.2f}")
  print(f"episodes_per_second={args.num_episodes / elapsed:.0f} "
        f"batch_seconds={elapsed:.2f}")
  host_ms = 1e3 * (host_after - host_before) / args.num_episodes
  sandbox_ms = 1e3 * (sandbox_after - sandbox_before) * (1 - warmup_share) / args.num_episodes
  print(f"cpu_ms_per_episode={host_ms + sandbox_ms:.2f} (host={host_ms:.2f} "
        f"sandbox={sandbox_ms:.2f})")


def _cpu_seconds():
  """(this process's CPU seconds, reaped children's CPU seconds)."""
  own = resource.getrusage(resource.RUSAGE_SELF)
  children = resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


if __name__ == "__main__":
  main()
