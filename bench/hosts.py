r"""What crosses processes on a multi-host run: the same tiny runs on 1, 2 and 4 local processes.

  python bench/hosts.py                                  # whale and vace on 1, 2, 4 processes
  python bench/hosts.py --runs=whale --processes=1,2
  python bench/hosts.py --measure_only --out=/tmp/hosts_bench   # the tables of finished runs

Each run is launch/local.sh: N processes of `python -m whale_jax.main` on this machine
(JAX_PLATFORMS=cpu, one CPU device each, WHALE_JAX_COORDINATOR / _NUM_PROCESSES /
_PROCESS_ID), on a mesh of the N devices (config.mesh.data=-1). The runs (RUNS), the smallest
that still take an RSFT or GRPO step, a harness search or gate, and a test evaluation:
  whale  tests/algorithms/tiny_config.py:whale with 2 cycles of 1 RSFT step (2 prompts x 2
         samples) and one search of 2 iterations (the incoming harness, then 1 candidate, on 2
         harness-split questions) between them; test evaluations (2 questions) at the start
         and the end
  vace   tests/algorithms/tiny_config.py:vace with 1 cycle: a GRPO block of 1 step, one
         candidate from its trajectories, its validation gate; test evaluations
Every host writes workdir/host_metrics/host_<i>.jsonl (algorithms/run_log.HostMetrics:
one row per metrics row); this program reads them and prints, per run, one line per row of the
run (weight steps, searches, gates, evaluations) and host: episodes run on the host, verify
calls and verified episodes, gathers and bytes sent / received across processes (counted in
parallel/distributed.py, the one place host data crosses), and wall seconds per phase.

Checks, printed after the tables:
  per run: the hosts' episodes add up to the run's rollouts (summary.json counts), and in every
    row each host received what the other hosts sent (the all-gather arithmetic);
  across process counts: the summaries agree with the 1-process run (rollout counts, weight
    steps, incumbent harness, test means; float rounding of the sharded train step may move
    a test mean).
Projection: bytes a host sends in a weight step are fitted as f + b x (the largest share of
the step's episodes any host ran: each host pads its part of a gather to the longest) over
the weight rows of the multi-process runs (least squares; f: the step's fixed gathers, b:
bytes per episode), counting the gathers (labels) found in every weight row of a run; the
others (the incumbent's broadcast after a search, which lands in the next step's row) are
printed apart. With R rollouts a step on H hosts, each host runs R / H of them and receives
the other H - 1 hosts' (equal, padded) shares:
  received per host per step = (H - 1) x (f + b x R / H);   all hosts together: H x that.
printed for --project_rollouts on --project_hosts with the measured b, and with b =
--project_episode_bytes (default 360,200: a plain-JSON trajectory of 8,192 tokens in 4 calls,
docs/benchmarks.md "Trace files"; what b is while every host gathers every trajectory as JSON,
for a real episode rather than the tiny runs' short ones).
Writes <out>/hosts_bench.json with every row.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from whale_jax.algorithms import run_log  # noqa: E402  pylint: disable=g-import-not-at-top

CONFIG = os.path.join(REPO, "tests", "algorithms", "tiny_config.py")
MESH = ("--config.mesh.data=-1", "--config.mesh.num_devices=0")
RUNS = {
    "whale": (f"{CONFIG}:whale", ("--config.whale.weight_epochs=0.25",
                                  "--config.whale.total_weight_epochs=0.5",
                                  "--config.loop.search_iterations=2")),
    "vace": (f"{CONFIG}:vace", ("--config.vace.num_cycles=1",)),
}
SECONDS = ("rollouts", "verify", "train", "search", "gate", "evaluation", "gather")
FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_list("runs", list(RUNS), f"Which runs: {', '.join(RUNS)}.")
  flags.DEFINE_list("processes", ["1", "2", "4"], "Process counts to run each on.")
  flags.DEFINE_string("out", "/tmp/hosts_bench", "Where the run directories go.")
  flags.DEFINE_bool("measure_only", False, "Only read the runs already in --out.")
  flags.DEFINE_integer("timeout_seconds", 1800, "Per run; then its processes are killed.")
  flags.DEFINE_integer("project_rollouts", 2048, "Rollouts per weight step to project to.")
  flags.DEFINE_integer("project_hosts", 8, "Hosts to project to.")
  flags.DEFINE_integer("project_episode_bytes", 360_200, "Bytes per episode for the second "
                       "projection (module docstring).")


def workdir_of(out, name, processes):
  return os.path.join(out, f"{name}_p{processes}")


def launch(name, processes, out, timeout_seconds):
  """Runs launch/local.sh with `processes` processes; returns (exit status, seconds)."""
  config, overrides = RUNS[name]
  workdir = workdir_of(out, name, processes)
  if os.path.exists(workdir):
    shutil.rmtree(workdir)
  os.makedirs(workdir)
  env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
  env.update(NUM_PROCESSES=str(processes), DEVICES_PER_PROCESS="1", PYTHONPATH=REPO,
             PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
  command = ["bash", os.path.join(REPO, "launch", "local.sh"), f"--config={config}",
             *overrides, *MESH, f"--workdir={workdir}", "--noprogress"]
  started, load_before = time.monotonic(), os.getloadavg()[0]
  with open(os.path.join(workdir, "launch.log"), "w") as log:
    process = subprocess.Popen(command, cwd=workdir, env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
      status = process.wait(timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGKILL)  # local.sh and the processes it started
      process.wait()
      status = "timeout"
  seconds = time.monotonic() - started
  with open(os.path.join(workdir, "launch.json"), "w") as f:
    json.dump({"status": status, "seconds": seconds, "command": command,
               "load_average": [load_before, os.getloadavg()[0]]}, f)
  return status, seconds


def read_run(workdir):
  """(summary or None, {host: [rows]}) of a finished run directory."""
  path = os.path.join(workdir, "summary.json")
  summary = None
  if os.path.exists(path):
    with open(path) as f:
      summary = json.load(f)
  return summary, run_log.read_host_metrics(workdir)


def aligned_rows(hosts):
  """[[row of host 0, row of host 1, ...]] of the last session of each host, by row number."""
  last = {}
  for host, rows in hosts.items():
    session = rows[-1]["session"] if rows else None
    last[host] = [row for row in rows if row["session"] == session]
  count = min((len(rows) for rows in last.values()), default=0)
  return [[last[host][number] for host in sorted(last)] for number in range(count)]


def _kilobytes(value):
  return f"{value / 1000:.1f}"


def row_table(name, processes, table_rows):
  """Markdown lines: one per (row of the run, host)."""
  lines = [f"\n{name}, {processes} process{'es' if processes > 1 else ''}: per row and host\n",
           "| row | phase | label | host | episodes | verify calls | verified episodes | "
           "gathers | KB sent | KB received | wall s | " +
           " | ".join(f"{phase} s" for phase in SECONDS) + " |",
           "|" + "---|" * (12 + len(SECONDS) - 1)]
  for rows in table_rows:
    for row in rows:
      seconds = [f"{row['seconds'].get(phase, 0.0):.2f}" for phase in SECONDS]
      lines.append(f"| {row['row']} | {row['phase']} | {row['label']} | {row['host']} | "
                   f"{row['episodes']} | {row['verify_calls']} | {row['verified_episodes']} | "
                   f"{row['gathers']} | {_kilobytes(row['bytes_sent'])} | "
                   f"{_kilobytes(row['bytes_received'])} | {row['wall_seconds']:.1f} | " +
                   " | ".join(seconds) + " |")
  return lines


def weight_table(measured):
  """Markdown lines: one per (run, process count, weight step, host)."""
  lines = ["| run | processes | step | host | episodes | verified episodes | gathers | KB sent | "
           "KB received | wall s | rollouts s | verify s | train s | gather s |",
           "|" + "---|" * 14]
  for (name, processes), result in measured.items():
    steps = [rows for rows in result["rows"] if rows[0]["phase"] == "weight"]
    for step, rows in enumerate(steps, 1):
      for row in rows:
        seconds = [f"{row['seconds'].get(phase, 0.0):.2f}"
                   for phase in ("rollouts", "verify", "train", "gather")]
        lines.append(f"| {name} | {processes} | {step} | {row['host']} | {row['episodes']} | "
                     f"{row['verified_episodes']} | {row['gathers']} | "
                     f"{_kilobytes(row['bytes_sent'])} | {_kilobytes(row['bytes_received'])} | "
                     f"{row['wall_seconds']:.1f} | " + " | ".join(seconds) + " |")
  return lines


def host_totals(table_rows):
  """{host: {field: total over the run's rows}}; weight_steps, and bytes in weight rows."""
  totals = {}
  for rows in table_rows:
    for row in rows:
      total = totals.setdefault(row["host"], {"episodes": 0, "verify_calls": 0,
                                              "verified_episodes": 0, "gathers": 0,
                                              "bytes_sent": 0, "bytes_received": 0,
                                              "wall_seconds": 0.0, "weight_steps": 0,
                                              "weight_bytes_received": 0,
                                              "weight_bytes_sent": 0,
                                              **{phase: 0.0 for phase in SECONDS}})
      for field in ("episodes", "verify_calls", "verified_episodes", "gathers", "bytes_sent",
                    "bytes_received", "wall_seconds"):
        total[field] += row[field]
      for phase in SECONDS:
        total[phase] += row["seconds"].get(phase, 0.0)
      if row["phase"] == "weight":
        total["weight_steps"] += 1
        total["weight_bytes_received"] += row["bytes_received"]
        total["weight_bytes_sent"] += row["bytes_sent"]
  return totals


def summary_table(measured):
  """Markdown lines: one per (run, process count, host), totals over the run."""
  lines = ["| run | processes | host | episodes | verified episodes | KB sent | KB received | "
           "KB received per weight step | wall s | " +
           " | ".join(f"{phase} s" for phase in SECONDS) + " |",
           "|" + "---|" * (9 + len(SECONDS))]
  for (name, processes), result in measured.items():
    for host, total in sorted(result["totals"].items()):
      per_step = total["weight_bytes_received"] / max(total["weight_steps"], 1)
      lines.append(f"| {name} | {processes} | {host} | {total['episodes']} | "
                   f"{total['verified_episodes']} | {_kilobytes(total['bytes_sent'])} | "
                   f"{_kilobytes(total['bytes_received'])} | {_kilobytes(per_step)} | "
                   f"{total['wall_seconds']:.1f} | " +
                   " | ".join(f"{total[phase]:.1f}" for phase in SECONDS) + " |")
  return lines


def label_table(measured):
  """Markdown lines: per multi-process run, what each gather label moved (host 0's view)."""
  lines = ["| run | processes | label | gathers | KB sent | KB received | seconds |",
           "|" + "---|" * 7]
  for (name, processes), result in measured.items():
    labels = {}
    for rows in result["rows"]:
      for label, moved in rows[0]["traffic"].items():
        total = labels.setdefault(label, {"gathers": 0, "bytes_sent": 0, "bytes_received": 0,
                                          "seconds": 0.0})
        for field in total:
          total[field] += moved.get(field, 0)
    for label, total in sorted(labels.items()):
      lines.append(f"| {name} | {processes} | {label} | {total['gathers']} | "
                   f"{_kilobytes(total['bytes_sent'])} | {_kilobytes(total['bytes_received'])} | "
                   f"{total['seconds']:.2f} |")
  return lines


def run_checks(summary, table_rows):
  """Lines saying whether the hosts' episodes add up and every row's gathers balance."""
  problems = []
  if summary is None:
    return ["no summary.json (the run did not finish)"]
  counts = summary["counts"]
  rollouts = counts["weight"] + counts["harness"] + counts["evaluation"]
  episodes = sum(row["episodes"] for rows in table_rows for row in rows)
  if episodes != rollouts:
    problems.append(f"the hosts ran {episodes} episodes, summary.json counts {rollouts}")
  for rows in table_rows:
    for row in rows:
      others = sum(other["bytes_sent"] for other in rows if other["host"] != row["host"])
      if row["bytes_received"] != others:
        problems.append(f"row {row['row']} ({row['phase']} {row['label']}): host "
                        f"{row['host']} received {row['bytes_received']} bytes, the others "
                        f"sent {others}")
  if not problems:
    return [f"ok: the hosts' episodes add up to the run's {rollouts} rollouts; in every row "
            "each host received what the others sent"]
  return problems


def verify_lines(totals):
  """One line on whether each host verified only its own episodes (the target) or more."""
  parts = [f"host {host} ran {total['episodes']} and verified {total['verified_episodes']}"
           for host, total in sorted(totals.items())]
  own = all(total["verified_episodes"] <= total["episodes"] for total in totals.values())
  return [("only its own episodes verified on each host: " if own else
           "hosts verify episodes that other hosts ran: ") + ", ".join(parts)]


SUMMARY_KEYS = ("counts", "weight_steps", "cycles", "training_rollouts", "incumbent_hash",
                "final_test_mean", "best_test_mean")


def compare_summaries(reference, summary):
  """{key: (reference value, this value)} where two runs' summaries differ."""
  if reference is None or summary is None:
    return {"summary": (reference is not None, summary is not None)}
  differences = {}
  for key in SUMMARY_KEYS:
    first, second = reference.get(key), summary.get(key)
    if isinstance(first, float) and isinstance(second, float):
      if abs(first - second) > 1e-9:
        differences[key] = (first, second)
    elif first != second:
      differences[key] = (first, second)
  return differences


def step_points(measured):
  """([(x, bytes)], {label: bytes}) over the weight rows of the multi-process runs: x is the
  most episodes any host ran in the row (every host pads its part of a gather to the longest),
  bytes what a host sent under the labels found in every weight row of its run (the per-step
  gathers); the other labels' bytes in weight rows (e.g. the incumbent's broadcast after a
  search, which lands in the next step's row) are summed per label, host 0's, apart."""
  points, apart = [], {}
  for (_, processes), result in measured.items():
    steps = [rows for rows in result["rows"] if rows[0]["phase"] == "weight"]
    if processes == 1 or not steps:
      continue
    every = set.intersection(*[set(rows[0]["traffic"]) for rows in steps])
    for rows in steps:
      most = max(row["episodes"] for row in rows)
      for row in rows:
        points.append((most, sum(row["traffic"][label].get("bytes_sent", 0)
                                 for label in every)))
      for label, moved in rows[0]["traffic"].items():
        if label not in every:
          apart[label] = apart.get(label, 0) + moved.get("bytes_sent", 0)
  return points, apart


def fit_bytes(measured):
  """(f, b, points, apart): bytes a host sends in a weight step = f + b x x (step_points),
  least squares; f and b are None without two different x."""
  points, apart = step_points(measured)
  if len({episodes for episodes, _ in points}) < 2:
    return None, None, points, apart
  x = np.array([[1.0, episodes] for episodes, _ in points])
  y = np.array([sent for _, sent in points], np.float64)
  (fixed, per_episode), *_ = np.linalg.lstsq(x, y, rcond=None)
  return float(fixed), float(per_episode), points, apart


def projection_lines(measured, rollouts, hosts, episode_bytes):
  fixed, per_episode, points, apart = fit_bytes(measured)
  if fixed is None:
    return [f"projection: needs weight rows whose largest share differs (have "
            f"{sorted({e for e, _ in points})} episodes); run 2 and 4 processes"]
  counts = [result["summary"]["counts"] for result in measured.values() if result["summary"]]
  generated = sum(c["weight_tokens"] for c in counts) / max(sum(c["weight"] for c in counts), 1)

  def received(per_episode_bytes):
    return (hosts - 1) * (fixed + per_episode_bytes * rollouts / hosts)

  measured_received = received(per_episode)
  scaled_received = received(episode_bytes)
  left_out = ", ".join(f"{label} {moved:,} bytes" for label, moved in sorted(apart.items()))
  return [
      f"fit over {len(points)} (weight row, host) pairs: bytes a host sends in a weight step = "
      f"{fixed:,.0f} + {per_episode:,.0f} x the largest host share of the step's episodes "
      f"(the tiny runs generate {generated:.1f} tokens per weight episode)",
      f"  left out of the fit, as not in every weight row of its run (host 0, all runs): "
      f"{left_out or 'nothing'}",
      f"projection, {rollouts:,} rollouts a step on {hosts} hosts: received per host per step "
      f"= ({hosts} - 1) x ({fixed:,.0f} + {per_episode:,.0f} x {rollouts} / {hosts}) = "
      f"{measured_received / 1e6:,.3f} MB; all hosts together "
      f"{hosts * measured_received / 1e6:,.2f} MB",
      f"  were each episode's trajectory to cross as JSON ({episode_bytes:,} bytes an "
      f"episode): {scaled_received / 1e6:,.1f} MB per host per step; all hosts together "
      f"{hosts * scaled_received / 1e9:,.2f} GB"]


def measure(out, names, process_counts):
  """{(name, processes): {"summary", "rows", "totals", "launch"}} of the runs in out (launch:
  the exit status, seconds, command and 1-minute load average before and after, or {})."""
  measured = {}
  for name in names:
    for processes in process_counts:
      workdir = workdir_of(out, name, processes)
      if not os.path.isdir(workdir):
        continue
      summary, hosts = read_run(workdir)
      rows = aligned_rows(hosts)
      launched = {}
      if os.path.exists(os.path.join(workdir, "launch.json")):
        with open(os.path.join(workdir, "launch.json")) as f:
          launched = json.load(f)
      measured[(name, processes)] = {"summary": summary, "rows": rows,
                                     "totals": host_totals(rows), "launch": launched}
  return measured


def report(measured, names, rollouts, hosts, episode_bytes):
  """The tables, checks and projection as printable lines."""
  lines = []
  for (name, processes), result in measured.items():
    lines += row_table(name, processes, result["rows"])
  lines += ["\nWeight steps (RSFT or GRPO), per host\n"] + weight_table(measured)
  lines += ["\nTotals per run and host\n"] + summary_table(measured)
  lines += ["\nWhat crossed, per gather label (host 0)\n"] + label_table(measured)
  lines += ["", "Checks:"]
  for (name, processes), result in measured.items():
    launched = result["launch"]
    took = "" if not launched else (
        f" (exit {launched['status']}, {launched['seconds']:.0f} s, load average "
        f"{launched['load_average'][0]:.1f} -> {launched['load_average'][1]:.1f})")
    for line in run_checks(result["summary"], result["rows"]) + verify_lines(result["totals"]):
      lines.append(f"  {name}, {processes} processes{took}: {line}")
  for name in names:
    counts = sorted(processes for run, processes in measured if run == name)
    for processes in counts[1:]:
      differences = compare_summaries(measured[(name, counts[0])]["summary"],
                                      measured[(name, processes)]["summary"])
      text = "the same summary" if not differences else "differs: " + "; ".join(
          f"{key} {first} vs {second}" for key, (first, second) in differences.items())
      lines.append(f"  {name}, {processes} processes against {counts[0]}: {text}")
  lines += ["", "Projection:"] + [f"  {line}" for line in projection_lines(
      measured, rollouts, hosts, episode_bytes)]
  return lines


def main(argv):
  del argv
  process_counts = [int(count) for count in FLAGS.processes]
  unknown = [name for name in FLAGS.runs if name not in RUNS]
  if unknown:
    raise app.UsageError(f"--runs: {unknown} unknown; use some of {', '.join(RUNS)}.")
  if not FLAGS.measure_only:
    for name in FLAGS.runs:
      for processes in process_counts:
        status, seconds = launch(name, processes, FLAGS.out, FLAGS.timeout_seconds)
        print(f"{name} on {processes} processes: exit {status}, {seconds:.0f} s", flush=True)
  measured = measure(FLAGS.out, FLAGS.runs, process_counts)
  print("\n".join(report(measured, FLAGS.runs, FLAGS.project_rollouts, FLAGS.project_hosts,
                         FLAGS.project_episode_bytes)))
  with open(os.path.join(FLAGS.out, "hosts_bench.json"), "w") as f:
    json.dump({f"{name}_p{processes}": result for (name, processes), result in measured.items()},
              f, indent=1, default=str)


if __name__ == "__main__":
  define_flags()
  app.run(main)
