"""What a run writes to its work directory, and how rollouts are counted.

  workdir/config.json          the resolved experiment config
  workdir/metrics.jsonl        one JSON row per logged event: {"phase", "rollouts", ...}
  workdir/tensorboard/         the same scalars as TensorBoard events (x axis: total rollouts)
  workdir/summary.json         final numbers, rewritten atomically whenever they change
  workdir/best_so_far.png      best-so-far test accuracy against rollouts

Rollouts are counted per phase: "weight" (RSFT/GRPO sampling), "harness" (harness search and
validation-gate evaluations) and "evaluation" (test mean@k, never used for any decision).
"""
import dataclasses
import json
import math
import os

from whale_jax import atomic_files

PHASES = ("weight", "harness", "evaluation")


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
  """Appends metrics rows (JSONL + TensorBoard) and keeps the summary file current."""

  def __init__(self, workdir, tensorboard=True, enabled=True):
    self.workdir = workdir
    self.enabled = enabled  # False on non-zero hosts of a multi-host run
    self._writer = None
    if enabled:
      os.makedirs(workdir, exist_ok=True)
      if tensorboard:
        import tensorboardX  # pylint: disable=g-import-not-at-top
        self._writer = tensorboardX.SummaryWriter(os.path.join(workdir, "tensorboard"))

  def write_config(self, config_json):
    if self.enabled:
      atomic_files.write_json(os.path.join(self.workdir, "config.json"), config_json)

  def log(self, phase, rollouts, **metrics):
    """One row: phase, total training rollouts so far, and scalar metrics."""
    if not self.enabled:
      return
    row = {"phase": phase, "rollouts": int(rollouts), **metrics}
    with open(os.path.join(self.workdir, "metrics.jsonl"), "a") as f:
      f.write(json.dumps(row, sort_keys=True, default=float) + "\n")
    if self._writer is not None:
      for name, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
          self._writer.add_scalar(f"{phase}/{name}", value, int(rollouts))
      self._writer.flush()

  def write_summary(self, summary):
    if self.enabled:
      atomic_files.write_json(os.path.join(self.workdir, "summary.json"), summary)

  def close(self):
    if self._writer is not None:
      self._writer.close()
      self._writer = None


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
