r"""Accelerator check: what whale_jax reaches on this machine's first device, in one JSON file.

  bash bench/accelerator_check.sh --out=/tmp/accelerator_check.json          # GPU, < 8 min
  bash bench/accelerator_check.sh --smoke --out=/tmp/accelerator_check.json  # CPU, seconds

Sections, in order (docs/benchmarks.md "Accelerator check" lists every field and its unit):
  environment  device kind, jax version, load average
  limits       a device-to-device copy (bytes/s) and a bfloat16 matmul (FLOP/s) measured here,
               beside the device's nominal HBM bandwidth and dense bfloat16 peak where known
  decode       Sampler(config, params).generate, engine defaults, on a random Qwen3-0.6B-shaped
               model in bfloat16: batch 1 and 64, prompt_length-token prompts, new_tokens new
               tokens (temperature 1, ignore_eos). Seconds per decode step =
               (generate(new_tokens) - generate(1)) / (new_tokens - 1), medians of repeats
               after a warm-up; the bound is batch x bandwidth / bytes read per step (weights
               + KV cache at the mean context prompt_length + new_tokens / 2)
  prefill      generate(max_tokens=1) of the same calls: prompt tokens / second (the first
               sampled token included) and its MFU
  train        the RSFT train step (train/step.py, rsft.loss, AdamW) on one device: MFU =
               model FLOPs per step / step seconds / peak FLOP/s (the FLOP counts:
               bench/accelerator_measure.py's docstring)
  demo         python -m whale_jax.main --config=configs/demo.py, end to end, with the time
               left (skipped under --smoke unless --demo)

This process never touches the device. It writes the JSON with the run's settings, starts
bench/accelerator_measure.py for the first five sections, and after that process has exited
(and released the device) runs the demo in a process of its own. Every section records its
status ("ok", "error", "skipped", "timeout", "not_reached"), wall seconds and load average;
the JSON is rewritten atomically after every section (and decode's after each batch size:
status "partial"), so a run cut short still leaves a file that says what finished.
--total_seconds bounds the whole run and --measure_seconds the measurements; a section that
cannot start within its budget is skipped, saying so.
"""
import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from whale_jax import atomic_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA_VERSION = 1
MEASURE_SECTIONS = ("environment", "limits", "decode", "prefill", "train")
SECTIONS = MEASURE_SECTIONS + ("demo",)

# Qwen3-0.6B's shape (config.json of Qwen/Qwen3-0.6B): 596M parameters, 440M without the
# tied embedding. Random weights: the check measures speed, not what the model says.
MODELS = {
    "qwen3_0_6b": dict(vocab_size=151_936, num_layers=28, embed_dim=1024, mlp_dim=3072,
                       num_heads=16, num_kv_heads=8, head_dim=128),
    # CPU smoke runs: big enough that a decode step outlasts the timer's noise.
    "tiny": dict(vocab_size=2048, num_layers=2, embed_dim=128, mlp_dim=256, num_heads=4,
                 num_kv_heads=2, head_dim=32),
}


@dataclasses.dataclass(frozen=True)
class Settings:
  """What the check measures; the defaults are the GPU run, smoke_settings() the CPU one."""
  model: str = "qwen3_0_6b"
  decode_batch_sizes: tuple[int, ...] = (1, 64)
  prompt_length: int = 128
  new_tokens: int = 128
  repeats: int = 3
  train_batch_size: int = 8
  train_seq_len: int = 2048
  train_steps: int = 5
  copy_bytes: int = 1 << 30
  matmul_size: int = 8192
  demo: bool = True
  demo_config: str = "configs/demo.py"
  total_seconds: float = 460.0
  measure_seconds: float = 270.0
  # Seconds a section needs left on the clock to start (compiles included).
  section_seconds: tuple[tuple[str, float], ...] = (
      ("environment", 5.0), ("limits", 15.0), ("decode", 60.0), ("train", 90.0),
      ("demo", 30.0))

  @classmethod
  def from_json(cls, value):
    """The Settings that dataclasses.asdict wrote to the JSON (lists back to tuples)."""
    value = dict(value, decode_batch_sizes=tuple(value["decode_batch_sizes"]),
                 section_seconds=tuple(tuple(pair) for pair in value["section_seconds"]))
    return cls(**value)


def smoke_settings():
  """Tiny shapes for CPU: the whole check in seconds, the demo left out."""
  return Settings(model="tiny", decode_batch_sizes=(4,), prompt_length=32, new_tokens=64,
                  repeats=5, train_batch_size=2, train_seq_len=64, train_steps=3,
                  copy_bytes=16 << 20, matmul_size=256, demo=False,
                  demo_config="configs/demo.py:smoke", total_seconds=300.0,
                  measure_seconds=280.0,  # seconds unloaded; the budget is for a busy CPU
                  section_seconds=tuple((name, 1.0) for name in SECTIONS))


class Report:
  """The JSON file: rewritten whole (atomic_files.write_json) after every section."""

  def __init__(self, path, value):
    self.path = path
    self.value = value

  @classmethod
  def read(cls, path):
    with open(path, encoding="utf-8") as file:
      return cls(path, json.load(file))

  def write(self):
    self.value["wall_seconds"] = round(time.time() - self.value["started_unix"], 2)
    atomic_files.write_json(self.path, self.value)

  def section(self, name, function, budget_seconds, deadline, soft_deadline):
    """Runs function(soft_deadline) -> dict as section name, recording its status, error and
    timing. It starts only with budget_seconds left before deadline; soft_deadline is when
    its repeats stop (at least one run each), leaving later sections their budgets."""
    start = time.time()
    entry = {"status": "ok", "load_average_before": round(os.getloadavg()[0], 2)}
    print(f"[accelerator_check] {name}: starting, {deadline - start:.0f} s left", flush=True)
    if deadline - start < budget_seconds:
      entry.update(status="skipped", reason=f"{deadline - start:.0f} s left, the section needs "
                   f"{budget_seconds:.0f} s; raise --total_seconds or --measure_seconds")
    else:
      try:
        entry.update(function(soft_deadline))
      except Exception as error:  # pylint: disable=broad-except  # recorded, the next one runs
        entry.update(status="error", error=f"{type(error).__name__}: {error}"[:2000],
                     traceback=traceback.format_exc()[-4000:])
    entry.update(seconds=round(time.time() - start, 2),
                 load_average_after=round(os.getloadavg()[0], 2))
    self.value["sections"][name] = entry
    self.write()
    shown = {key: value for key, value in entry.items() if key not in ("traceback", "log_tail")}
    print(f"[accelerator_check] {name}: {entry['status']} in {entry['seconds']} s "
          f"{json.dumps(shown, default=str)[:2000]}", flush=True)
    return entry


def _run_process(command, timeout_seconds, environment, log_path, echo=False):
  """(return code, or None when stopped at the timeout; seconds). Output goes to log_path
  (and, with echo, to this process's stdout as well). The command runs in a session of its
  own; at the timeout, or when this process is stopped, its whole process group is stopped
  too (SIGTERM, then SIGKILL)."""
  start = time.time()
  with open(log_path, "w", encoding="utf-8") as log:
    process = subprocess.Popen(command, cwd=REPO, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)

    def copy():
      for line in iter(process.stdout.readline, b""):
        text = line.decode(errors="replace")
        log.write(text)
        log.flush()
        if echo:
          sys.stdout.write(text)
          sys.stdout.flush()

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    try:
      returncode = process.wait(timeout=max(timeout_seconds, 1.0))
    except subprocess.TimeoutExpired:
      returncode = None
    finally:
      for signal_number in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
          break
        try:
          os.killpg(process.pid, signal_number)
          process.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
          pass
      copier.join(timeout=5)  # a grandchild still holding the pipe must not hold us
  return returncode, time.time() - start


def _tail(path, num_lines=40):
  """The last lines of a log, each progress bar's redraws (carriage returns) as lines."""
  try:
    with open(path, encoding="utf-8", errors="replace") as file:
      lines = file.read().replace("\r", "\n").split("\n")
  except OSError:
    return []
  return [line[-300:] for line in lines if line.strip()][-num_lines:]


def demo(settings, out, environment, deadline):
  """The demo config end to end with the time left; what it reached when it had to stop."""
  workdir = tempfile.mkdtemp(prefix="accelerator_check_demo_")
  stem = os.path.splitext(out)[0]
  log_path = stem + "_demo.log"
  command = [sys.executable, "-m", "whale_jax.main", f"--config={settings.demo_config}",
             f"--workdir={workdir}"]  # its progress bars show in log_tail how far it got
  timeout_seconds = deadline - time.time()
  returncode, seconds = _run_process(command, timeout_seconds, environment, log_path)
  status = "ok" if returncode == 0 else ("timeout" if returncode is None else "error")
  methods = {}
  for method in sorted(os.listdir(workdir)):
    metrics_path = os.path.join(workdir, method, "metrics.jsonl")
    if os.path.isfile(metrics_path):
      with open(metrics_path, encoding="utf-8") as file:
        rows = [json.loads(line) for line in file if line.strip()]
      last = rows[-1] if rows else {}
      methods[method] = dict(metrics_rows=len(rows), last_phase=last.get("phase"),
                             last_rollouts=last.get("rollouts"))
  table = None
  if os.path.isfile(os.path.join(workdir, "table.md")):
    with open(os.path.join(workdir, "table.md"), encoding="utf-8") as file:
      table = file.read()
  kept = stem + "_demo"
  for name in ("summary.json", "table.md", "changes.md", "best_so_far.png"):
    if os.path.isfile(os.path.join(workdir, name)):
      os.makedirs(kept, exist_ok=True)
      shutil.copy(os.path.join(workdir, name), kept)
  shutil.rmtree(workdir, ignore_errors=True)
  result = dict(status=status, command=" ".join(command[1:]),
                timeout_seconds=round(timeout_seconds, 1), returncode=returncode,
                demo_seconds=round(seconds, 2), methods=methods, table=table,
                log_path=log_path, log_tail=_tail(log_path),
                kept_files=kept if os.path.isdir(kept) else None)
  if status != "ok":
    result["error"] = ("killed at its time budget; raise --total_seconds" if returncode is None
                       else f"exit status {returncode}; see log_tail")
  return result


def _git_commit():
  try:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, timeout=10, check=True).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None


def orchestrate(settings, out, argv, smoke):
  """Runs the measurements, then the demo, within settings.total_seconds."""
  started = time.time()
  deadline = started + settings.total_seconds
  report = Report(out, {
      "schema_version": SCHEMA_VERSION, "command": " ".join(["bench/accelerator_check.sh"]
                                                            + argv),
      "started_unix": started, "total_seconds": settings.total_seconds,
      "smoke": smoke, "whale_jax_commit": _git_commit(),
      "settings": dataclasses.asdict(settings), "complete": False,
      "sections": {name: {"status": "not_reached"} for name in SECTIONS}})
  report.write()
  environment = dict(os.environ)
  environment["PYTHONPATH"] = os.pathsep.join(
      [REPO] + [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p])
  environment["PYTHONUNBUFFERED"] = "1"  # a process stopped at its timeout leaves its output
  # Sections start only with their budget left before measure_deadline; the process is
  # stopped only if the last one overruns it by more than 30 s (less when the whole budget
  # is short).
  measure_deadline = min(started + settings.measure_seconds, deadline - 5)
  stop_at = min(measure_deadline + 30, max(measure_deadline, deadline - 35))
  log_path = os.path.splitext(out)[0] + "_measure.log"
  returncode, seconds = _run_process(
      [sys.executable, os.path.join(REPO, "bench", "accelerator_measure.py"), f"--out={out}",
       f"--deadline_unix={measure_deadline}"], stop_at - time.time(), environment, log_path,
      echo=True)
  report = Report.read(out)
  report.value["measure_process"] = dict(returncode=returncode, seconds=round(seconds, 2),
                                         timed_out=returncode is None, log_path=log_path)
  if returncode != 0:
    report.value["measure_process"]["log_tail"] = _tail(log_path)
  for name in MEASURE_SECTIONS:
    entry = report.value["sections"][name]
    if entry["status"] in ("not_reached", "partial"):
      entry["reason"] = ("the measurement process was stopped at --measure_seconds"
                         if returncode is None else
                         f"the measurement process exited with status {returncode}")
  report.write()
  if settings.demo:
    report.section("demo", lambda soft_deadline: demo(settings, out, environment, soft_deadline),
                   dict(settings.section_seconds).get("demo", 0.0), deadline - 5, deadline - 5)
  else:
    report.value["sections"]["demo"] = dict(
        status="skipped", reason="--no-demo, or --smoke without --demo (the demo takes minutes)")
  report.value["complete"] = all(entry["status"] in ("ok", "skipped")
                                 for entry in report.value["sections"].values())
  report.write()
  return report


def _parse(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
  parser.add_argument("--out", required=True, help="path of the JSON file to write")
  parser.add_argument("--smoke", action="store_true", help="tiny shapes on CPU, seconds")
  parser.add_argument("--demo", action=argparse.BooleanOptionalAction, default=None,
                      help="run the demo last (default: yes, except under --smoke)")
  parser.add_argument("--demo_config", help="config of the demo section (default "
                      "configs/demo.py; configs/demo.py:smoke under --smoke)")
  parser.add_argument("--model", choices=sorted(MODELS), help="model shape")
  parser.add_argument("--decode_batch_sizes", help="comma-separated, e.g. 1,64")
  for name in ("prompt_length", "new_tokens", "repeats", "train_batch_size", "train_seq_len",
               "train_steps", "copy_bytes", "matmul_size"):
    parser.add_argument(f"--{name}", type=int)
  parser.add_argument("--total_seconds", type=float, help="wall budget of the whole run")
  parser.add_argument("--measure_seconds", type=float, help="budget of the measurements")
  args = parser.parse_args(argv)
  settings = smoke_settings() if args.smoke else Settings()
  changes = {name: getattr(args, name) for name in (
      "demo", "demo_config", "model", "prompt_length", "new_tokens", "repeats",
      "train_batch_size", "train_seq_len", "train_steps", "copy_bytes", "matmul_size",
      "total_seconds", "measure_seconds") if getattr(args, name) is not None}
  if args.decode_batch_sizes:
    changes["decode_batch_sizes"] = tuple(int(b) for b in args.decode_batch_sizes.split(","))
  settings = dataclasses.replace(settings, **changes)
  if settings.new_tokens < 2:
    parser.error(f"--new_tokens={settings.new_tokens}: decode needs at least 2 (one step "
                 "after the first token).")
  return args, settings


def main(argv=None):
  argv = sys.argv[1:] if argv is None else list(argv)
  args, settings = _parse(argv)
  out = os.path.abspath(args.out)
  # Stopped from outside (SIGTERM): exit through the finally blocks, which stop the child.
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
  report = orchestrate(settings, out, argv, args.smoke)
  statuses = {name: entry["status"] for name, entry in report.value["sections"].items()}
  print(f"[accelerator_check] wrote {out} in {report.value['wall_seconds']} s: {statuses}",
        flush=True)


if __name__ == "__main__":
  main()
