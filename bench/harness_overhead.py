r"""Per-episode overhead of the harness runtime: a harness making one fake LLM call.

  python bench/harness_overhead.py                        # 1,000 episodes on 4 workers
  python bench/harness_overhead.py --num_episodes=200 --num_workers=2
  PATH=/nowhere python bench/harness_overhead.py --allow_weak_sandbox  # without namespaces

The backend is whale_jax.harness.ScriptedBackend (no model: it answers at once), so every
millisecond measured is the runtime's own: dispatch, fork of a confined child (its seccomp
program, limits and checks), JSON messages, chat rendering and tokenization on the host,
recording. The workers run with the confinement this machine gives (bubblewrap namespaces and
seccomp; it says which). Prints the median and 90th percentile of per-episode wall time
(dispatch to trajectory, queueing excluded), the throughput of the whole batch, and the cost of
starting one worker.

Overhead CPU per episode (overhead_cpu_ms_per_episode, the figure to hold against a target) is
the CPU time, user plus system, spent during the batch by
  host      this process, all threads (dispatch, protocol, chat rendering, tokenization,
            recording), from getrusage;
  workers   the sandbox processes themselves (bwrap and the zygotes), and
  children  the per-episode children they reaped (fork, confinement, running the harness,
            exit), both from /proc before and after the batch,
divided by the number of episodes, less the backend's own work (the scripted model: a few tens
of microseconds, timed on the host around backend.submit). The harness itself does one dict
lookup and one llm.chat, so what remains is the runtime's own cost. CPU time is inflated on a
busy machine (shared caches, more context switches): report it with the load average.
"""
import argparse
import os
import pathlib
import resource
import statistics
import threading
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
  parser.add_argument("--allow_weak_sandbox", action="store_true",
                      help="run without namespaces where bwrap is missing (to see their cost)")
  args = parser.parse_args()
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, replies="The answer is 42.")
  backend_seconds = _time_submit(backend)
  harness = Harness(HARNESS)
  episodes = [Episode(task_id=f"q{i}", task={"question": f"What is {i} + {i}?"})
              for i in range(args.num_episodes)]
  started = time.perf_counter()
  weak = {"allow_weak_sandbox": True} if args.allow_weak_sandbox else {}
  runtime = HarnessRuntime(backend, tokenizer, num_workers=args.num_workers,
                           timeout_seconds=30.0, **weak)
  start_seconds = time.perf_counter() - started
  start_cpu = _sandbox_cpu_seconds(runtime.worker_pids)
  runtime.run_episodes(harness, episodes[:args.num_warmup_episodes])
  host_before, sandbox_before = _host_cpu_seconds(), _sandbox_cpu_seconds(runtime.worker_pids)
  backend_before = backend_seconds[0]
  start = time.perf_counter()
  trajectories = runtime.run_episodes(harness, episodes)
  elapsed = time.perf_counter() - start
  host_after, sandbox_after = _host_cpu_seconds(), _sandbox_cpu_seconds(runtime.worker_pids)
  backend_ms = 1e3 * (backend_seconds[0] - backend_before) / args.num_episodes
  confinement = getattr(runtime, "confinement", None)
  runtime.close()
  outcomes = {t.outcome for t in trajectories}
  assert outcomes == {"ok"}, f"expected every episode ok; got {outcomes}"
  wall_ms = sorted(1e3 * t.wall_seconds for t in trajectories)
  namespaced = bool(confinement and confinement.namespaced)
  print(f"episodes={args.num_episodes} workers={args.num_workers} namespaces={namespaced} "
        f"seccomp={bool(confinement and confinement.seccomp)} load={os.getloadavg()[0]:.2f}")
  print(f"pool_start_seconds={start_seconds:.3f} (includes the machine check once per "
        f"process) worker_start_cpu_ms={1e3 * sum(start_cpu) / args.num_workers:.1f}")
  print(f"median_episode_ms={statistics.median(wall_ms):.2f} "
        f"p90_episode_ms={wall_ms[int(0.9 * len(wall_ms))]:.2f}")
  print(f"episodes_per_second={args.num_episodes / elapsed:.0f} "
        f"batch_seconds={elapsed:.2f}")
  host_ms = 1e3 * (host_after - host_before) / args.num_episodes
  workers_ms, children_ms = (1e3 * (after - before) / args.num_episodes
                             for after, before in zip(sandbox_after, sandbox_before))
  total_ms = host_ms + workers_ms + children_ms
  print(f"overhead_cpu_ms_per_episode={total_ms - backend_ms:.2f} (cpu_ms_per_episode="
        f"{total_ms:.2f}: host={host_ms:.2f} workers={workers_ms:.2f} "
        f"children={children_ms:.2f}, less backend={backend_ms:.3f})")


def _time_submit(backend):
  """Wraps backend.submit to add its thread CPU seconds to the returned one-item list."""
  seconds, lock, submit = [0.0], threading.Lock(), backend.submit

  def timed_submit(*args, **kwargs):
    start = time.thread_time()
    try:
      return submit(*args, **kwargs)
    finally:
      spent = time.thread_time() - start
      with lock:
        seconds[0] += spent

  backend.submit = timed_submit
  return seconds


def _host_cpu_seconds():
  own = resource.getrusage(resource.RUSAGE_SELF)
  return own.ru_utime + own.ru_stime


def _sandbox_cpu_seconds(worker_pids):
  """(own, reaped children's) CPU seconds of every live process from the worker pids down: a
  live process's time is in no one else's count yet, a reaped child's is in its parent's."""
  parents, times = {}, {}
  for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
    try:
      fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
      continue
    pid = int(stat.parent.name)
    parents[pid] = int(fields[1])
    times[pid] = (int(fields[11]) + int(fields[12]),   # utime stime
                  int(fields[13]) + int(fields[14]))   # cutime cstime
  found, frontier = set(), set(worker_pids)
  while frontier:
    found |= frontier
    frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
  ticks = os.sysconf("SC_CLK_TCK")
  return tuple(sum(times[pid][k] for pid in found if pid in times) / ticks for k in (0, 1))


if __name__ == "__main__":
  main()
