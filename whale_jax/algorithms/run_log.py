"""What a run writes to its work directory, and how rollouts are counted.

  workdir/config.json          the resolved experiment config
  workdir/metrics.jsonl        one JSON row per logged event: {"phase", "rollouts", ...}
  workdir/tensorboard/         the same scalars as TensorBoard events (x axis: total rollouts)
  workdir/summary.json         final numbers, rewritten atomically whenever they change
  workdir/best_so_far.png      best-so-far test accuracy against rollouts
  workdir/changes.md           what a run changed and when (describe_changes; compare runs)
  workdir/report.html          the run as one HTML page (whale_jax.report), rewritten after
                               each phase: after every row that is not a weight step, after a
                               weight step when REPORT_EVERY_SECONDS passed since the last
                               rewrite, and with the summary
  workdir/host_metrics/host_<i>.jsonl   written by every host i (host 0 too), one row
                               per metrics row (the same order as metrics.jsonl, which only
                               host 0 writes) and an "end" row whenever the summary is
                               written: what this host did since its previous row
                               (HostMetrics)

Rollouts are counted per phase: "weight" (RSFT/GRPO sampling), "harness" (harness search and
validation-gate evaluations) and "evaluation" (test mean@k, never used for any decision).
"""
import dataclasses
import datetime
import json
import math
import os
import time

import jax

from whale_jax import atomic_files
from whale_jax import report as report_lib
from whale_jax.parallel import accounting
from whale_jax.parallel import distributed

PHASES = ("weight", "harness", "evaluation")
REPORT_EVERY_SECONDS = 60.0


@dataclasses.dataclass
class RolloutCounts:
  """Rollouts (agent episodes) and generated tokens, per phase."""
  weight: int = 0
  harness: int = 0
  evaluation: int = 0
  weight_tokens: int = 0
  harness_tokens: int = 0
  evaluation_tokens: int = 0

  def add(self, phase, rollouts, tokens=0):
    if phase not in PHASES:
      raise ValueError(f"phase={phase!r} is not one of {PHASES}.")
    setattr(self, phase, getattr(self, phase) + int(rollouts))
    setattr(self, f"{phase}_tokens", getattr(self, f"{phase}_tokens") + int(tokens))

  @property
  def training(self):
    """Rollouts that count against the optimization budget (weight + harness)."""
    return self.weight + self.harness

  def to_json(self):
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, value):
    return cls(**value)


class RunLog:
  """Appends metrics rows (JSONL + TensorBoard), keeps the summary file and the report page
  current."""

  def __init__(self, workdir, tensorboard=True, enabled=True, process_index=None):
    self.workdir = workdir
    self.enabled = enabled  # False on non-zero hosts of a multi-host run
    self._writer = None
    self._report_time = -math.inf
    self.hosts = HostMetrics(workdir, process_index)  # every host, enabled or not
    if enabled:
      os.makedirs(workdir, exist_ok=True)
      if tensorboard:
        import tensorboardX  # pylint: disable=g-import-not-at-top
        self._writer = tensorboardX.SummaryWriter(os.path.join(workdir, "tensorboard"))

  def write_config(self, config_json):
    if self.enabled:
      atomic_files.write_json(os.path.join(self.workdir, "config.json"), config_json)

  def log(self, phase, rollouts, **metrics):
    """One row: phase, total training rollouts so far, and scalar metrics (and, on every
    host, this host's row of host_metrics/host_<i>.jsonl)."""
    self.hosts.write(phase, rollouts, metrics.get("label") or metrics.get("kind") or "")
    if not self.enabled:
      return
    row = {"phase": phase, "rollouts": int(rollouts), **metrics}
    with open(os.path.join(self.workdir, "metrics.jsonl"), "a") as f:
      f.write(json.dumps(row, sort_keys=True, default=float) + "\n")
    if self._writer is not None:
      for name, value in _scalars(metrics):
        self._writer.add_scalar(f"{phase}/{name}", value, int(rollouts))
      self._writer.flush()
    if phase != "weight" or time.monotonic() - self._report_time >= REPORT_EVERY_SECONDS:
      self.write_report()

  def write_report(self):
    """Rewrites workdir/report.html (a failure is logged, never raised)."""
    if self.enabled:
      report_lib.try_write_report(self.workdir)
      self._report_time = time.monotonic()

  def write_summary(self, summary):
    self.hosts.write("end", summary.get("training_rollouts", 0), "summary", totals=True)
    if self.enabled:
      atomic_files.write_json(os.path.join(self.workdir, "summary.json"), summary)
      self.write_report()

  def close(self):
    if self._writer is not None:
      self._writer.close()
      self._writer = None


class HostMetrics:
  """Appends this host's work since its previous row to
  workdir/host_metrics/host_<i>.jsonl: the differences of parallel.accounting.COUNTERS
  and distributed.TRAFFIC between two rows. A row:

    {"host": i, "hosts": P, "session": when this log started, "row": n (from 0 per session),
     "phase", "label", "rollouts": training rollouts so far (as in metrics.jsonl),
     "wall_seconds": since the previous row (the first: since the log started),
     "episodes": run on this host, "verify_calls", "verified_episodes": verified here,
     "gathers", "bytes_sent", "bytes_received": across processes (distributed.py),
     "seconds": {"rollouts", "verify", "train", "search", "gate", "evaluation", "gather"},
     "traffic": {label: {"gathers", "bytes_sent", "bytes_received", "seconds"}}}

  plus, on the "end" row, "process_totals": the counters since the process started (the
  preflight's gather and earlier runs of a compare included). A phase's seconds include the
  phases inside it (search: its rollouts, verification and gathers). A resumed run starts a
  new session and appends (its replayed steps get rows again).
  """

  def __init__(self, workdir, process_index=None):
    index = jax.process_index() if process_index is None else process_index
    self.path = os.path.join(workdir, "host_metrics", f"host_{index}.jsonl")
    self.host, self.hosts = index, jax.process_count()
    self.session = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    self.rows = 0
    self._last, self._time = self._snapshot(), time.monotonic()

  @staticmethod
  def _snapshot():
    return {**accounting.COUNTERS.snapshot(), "traffic": distributed.TRAFFIC.snapshot()}

  def write(self, phase, rollouts, label="", totals=False):
    now, current = time.monotonic(), self._snapshot()
    change = accounting.difference(current, self._last)
    counts, traffic = change.get("counts", {}), change.get("traffic", {})
    seconds = {name: round(value, 4) for name, value in change.get("seconds", {}).items()}
    if traffic.get("seconds"):
      seconds["gather"] = round(traffic["seconds"], 4)
    row = {"host": self.host, "hosts": self.hosts, "session": self.session, "row": self.rows,
           "phase": phase, "label": str(label), "rollouts": int(rollouts),
           "wall_seconds": round(now - self._time, 4),
           **{name: counts.get(name, 0) for name in ("episodes", "verify_calls",
                                                     "verified_episodes")},
           **{name: traffic.get(name, 0) for name in ("gathers", "bytes_sent",
                                                      "bytes_received")},
           "seconds": seconds, "traffic": traffic.get("by_label", {})}
    if totals:
      row["process_totals"] = current
    os.makedirs(os.path.dirname(self.path), exist_ok=True)
    with open(self.path, "a") as f:
      f.write(json.dumps(row, sort_keys=True) + "\n")
    self._last, self._time = current, now
    self.rows += 1
    return row


def read_host_metrics(workdir):
  """{host index: [rows of workdir/host_metrics/host_<i>.jsonl]} of a run directory ({}
  without any)."""
  directory = os.path.join(workdir, "host_metrics")
  result = {}
  if os.path.isdir(directory):
    for name in sorted(os.listdir(directory)):
      if name.startswith("host_") and name.endswith(".jsonl"):
        with open(os.path.join(directory, name)) as f:
          result[int(name[len("host_"):-len(".jsonl")])] = [json.loads(line) for line in f
                                                            if line.strip()]
  return result


def _scalars(metrics):
  """(name, value) of a row's finite numbers; a dict of numbers (per_subset) gives one
  name/key each (TensorBoard tag evaluation/per_subset/nq/test)."""
  for name, value in metrics.items():
    items = value.items() if isinstance(value, dict) else [(None, value)]
    for key, item in items:
      if isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item):
        yield (name if key is None else f"{name}/{key}"), item


def read_metrics(workdir):
  """All rows of workdir/metrics.jsonl (a partial last line from a crash is skipped)."""
  path = os.path.join(workdir, "metrics.jsonl")
  rows = []
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        try:
          rows.append(json.loads(line))
        except json.JSONDecodeError:
          continue
  return rows


def best_so_far(points):
  """[(rollouts, accuracy)] sorted by rollouts -> the running maximum of accuracy."""
  curve, best = [], -math.inf
  for rollouts, accuracy in sorted(points):
    best = max(best, accuracy)
    curve.append((rollouts, best))
  return curve


def plot_best_so_far(curves, path, title="Best-so-far test accuracy"):
  """Writes a PNG with one best-so-far line per method; curves: {method: [(rollouts, acc)]}."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  figure, axes = pyplot.subplots(figsize=(6, 4), dpi=120)
  for method, points in sorted(curves.items()):
    curve = best_so_far(points)
    if curve:
      xs, ys = zip(*curve)
      axes.step(xs, ys, where="post", marker="o", markersize=3, label=method)
  axes.set_xlabel("training rollouts (weight + harness)")
  axes.set_ylabel("test mean@k (best so far)")
  axes.set_title(title)
  axes.grid(alpha=0.3)
  axes.legend()
  figure.tight_layout()
  atomic_files.write_with(path, figure.savefig, suffix=".png")
  pyplot.close(figure)


def _read_candidates(archive_dir):
  """{id: candidate.json} of a harness search's archive ({} when it has none)."""
  candidates = {}
  path = os.path.join(archive_dir, "summary.jsonl")
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        if line.strip():
          row = json.loads(line)
          candidates[row["id"]] = row
  return candidates


def _edit_chain(candidates, accepted_id):
  """The candidates from the incoming harness (excluded) to accepted_id, in order."""
  chain, current = [], candidates.get(accepted_id)
  while current is not None and current.get("parent") is not None:
    chain.append(current)
    current = candidates.get(current["parent"])
  return chain[::-1]


_STEP_NAMES = {"grpo": "GRPO", "rsft": "RSFT"}


def describe_changes(workdir):
  """Lines saying what a run changed and when: its test evaluations, each weight phase (steps
  and their kind, training reward, and its incumbent's harness-split score before and after it
  where a search measured both), each harness search (the edits it accepted, with their
  hypotheses) and each validation gate (both means, the verdict, what was adopted).

  Reads workdir/metrics.jsonl and the search archives (workdir/archive/<label>); the
  harness-split scores of one harness at two weights are on the same questions and sample
  keys (meta_harness scores every candidate so), so before/after is a paired comparison."""
  lines, weight_rows, last_accepted_score = [], [], None
  phase_start = [0]  # training rollouts before the current weight phase's first step
  # Test evaluations taken while a weight phase was under way (mid-phase, or at its last step)
  # are listed after that phase's line, which is written once the phase is over.
  during_phase = []

  def flush_weights(after=None):
    if not weight_rows:
      return
    first, last = weight_rows[0], weight_rows[-1]
    rewards = f"training reward {first.get('reward', 0.0):.3f} -> {last.get('reward', 0.0):.3f}"
    kinds = sorted({_STEP_NAMES.get(row.get("kind"), "RSFT") for row in weight_rows})
    line = (f"  rollouts {phase_start[0]:>5}-{last['rollouts']}: weight phase, "
            f"{len(weight_rows)} {'/'.join(kinds)} steps ({rewards})")
    if after is not None:
      before = "" if last_accepted_score is None else f"{last_accepted_score:.3f} before, "
      line += f"; the incumbent's harness-split score {before}{after:.3f} after"
    lines.append(line)
    lines.extend(during_phase)
    during_phase.clear()
    weight_rows.clear()

  previous_rollouts = 0
  for row in read_metrics(workdir):
    if row["phase"] == "weight":
      if not weight_rows:
        phase_start[0] = previous_rollouts
      weight_rows.append(row)
    elif row["phase"] == "evaluation":  # a weight phase may go on after it
      line = f"  rollouts {row['rollouts']:>5}: test mean@k {row['test_mean']:.3f}"
      (during_phase if weight_rows else lines).append(line)
    elif row["phase"] == "harness" and "candidate_validation" in row:  # a validation gate
      flush_weights()
      decision = ("adopted" if row.get("gate_adopted") else "kept the incumbent")
      verdict = "accepted" if row.get("gate_accepted") else "refused"
      lines.append(f"  rollouts {row['rollouts']:>5}: gate {row.get('label')}: candidate "
                   f"{row['candidate_validation']:.3f} against incumbent "
                   f"{row['incumbent_validation']:.3f} on {row.get('gate_n')} validation "
                   f"questions, {verdict}; {decision}")
    elif row["phase"] == "harness" and "accepted" in row:
      candidates = _read_candidates(os.path.join(workdir, "archive", row["label"]))
      incoming = candidates.get("c0000", {}).get("success")
      flush_weights(after=incoming)
      accepted = candidates.get(row["accepted"], {})
      chain = _edit_chain(candidates, row["accepted"])
      line = (f"  rollouts {row['rollouts']:>5}: harness search {row['label']} "
              f"({row.get('iterations')} iterations)")
      score = "" if incoming is None else f"split score {incoming:.3f}"
      if not chain:
        lines.append(line + f": kept the incoming harness ({score or 'not scored'})")
      else:
        lines.append(line + f": {score} -> {accepted.get('success', 0):.3f} with "
                     f"{len(chain)} accepted edit(s):")
        for candidate in chain:
          lines.append(f"      {candidate['id']} {candidate.get('mechanism', '')} "
                       f"({candidate.get('success', 0):.3f}): {candidate.get('hypothesis', '')}")
      last_accepted_score = accepted.get("success", incoming)
    previous_rollouts = row["rollouts"]
  flush_weights()
  return lines
