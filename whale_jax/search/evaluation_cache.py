"""Evaluations cached by content: (harness hash, weights id, task id, sample key).

  cache = EvaluationCache(directory)
  evaluate = cached(evaluate, cache, weights_id)   # same signature; runs only what is missing
  evaluation = evaluate(harness, instances, keys)
  evaluation.rollouts                              # episodes run now (0 when all were cached)

On disk: directory/<weights>/<harness hash>.jsonl.gz, a trace file (harness.trajectory.
write_records) with one record per episode: {"task_id", "sample_key", "score", "trajectory"},
where <weights> is the weights id made safe for a file name plus a short hash of it. Records
are appended as evaluations finish; a torn last one (a crash mid-write) is skipped when read.
The <harness hash>.jsonl files of caches written before are read too. Episodes that ended
"infra_error" are never stored, so they are run again. Several caches may share a directory
(e.g. harness search and the validation gate), within one process.
"""
import dataclasses
import hashlib
import os
import re
import threading

from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.search import evaluation as evaluation_lib


def _weights_folder(weights_id):
  safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(weights_id))[:60]
  return f"{safe}-{hashlib.sha256(str(weights_id).encode()).hexdigest()[:8]}"


class EvaluationCache:
  """Per-episode results on disk, keyed by (harness hash, weights id, task id, sample key)."""

  def __init__(self, directory):
    self.directory = os.fspath(directory)
    os.makedirs(self.directory, exist_ok=True)
    self._loaded = {}   # (weights_id, harness_hash) -> {(task_id, sample_key): (score, traj)}
    self._lock = threading.Lock()

  def _path(self, harness_hash, weights_id):
    return os.path.join(self.directory, _weights_folder(weights_id),
                        f"{harness_hash}.jsonl.gz")

  def _entries(self, harness_hash, weights_id):
    key = (str(weights_id), harness_hash)
    if key not in self._loaded:
      entries = {}
      current = self._path(harness_hash, weights_id)
      for path in (current.removesuffix(".gz"), current):  # the first: written before
        if os.path.exists(path):
          for row in trajectory_lib.read_records(path, decode=False):
            entries[(row["task_id"], int(row["sample_key"]))] = (
                float(row["score"]), row["trajectory"])
      self._loaded[key] = entries
    return self._loaded[key]

  def lookup(self, harness_hash, weights_id, task_id, sample_key):
    """(score, Trajectory) or None."""
    with self._lock:
      entry = self._entries(harness_hash, weights_id).get((task_id, int(sample_key)))
    if entry is None:
      return None
    return entry[0], trajectory_lib.Trajectory.from_json(entry[1])

  def store(self, harness_hash, weights_id, task_ids, keys, scores, trajectories):
    """Adds finished episodes (infra errors are skipped)."""
    rows = [{"task_id": task_id, "sample_key": int(key), "score": float(score),
             "trajectory": trajectory.to_compact_json()}
            for task_id, key, score, trajectory in zip(task_ids, keys, scores, trajectories)
            if trajectory.outcome != "infra_error"]
    if not rows:
      return
    with self._lock:
      entries = self._entries(harness_hash, weights_id)
      path = self._path(harness_hash, weights_id)
      trajectory_lib.write_records(path, rows, append=True)
      for row in rows:
        entries[(row["task_id"], row["sample_key"])] = (row["score"], row["trajectory"])


@dataclasses.dataclass(frozen=True)
class CachedEvaluator:
  """evaluate with cache lookups first; only the missing episodes reach evaluate.

  Attributes:
    evaluate: (harness, instances, sample_keys) -> Evaluation.
    cache: the EvaluationCache.
    weights_id: the weights evaluate serves (part of every cache key).
  """
  evaluate: object
  cache: EvaluationCache
  weights_id: str

  def __call__(self, harness, instances, keys):
    instances, keys = list(instances), [int(key) for key in keys]
    found = [self.cache.lookup(harness.hash, self.weights_id, instance.id, key)
             for instance, key in zip(instances, keys)]
    missing = [i for i, entry in enumerate(found) if entry is None]
    rollouts = generated_tokens = 0
    if missing:
      subset = [instances[i] for i in missing]
      subset_keys = [keys[i] for i in missing]
      result = evaluation_lib.as_evaluation(self.evaluate(harness, subset, subset_keys),
                                            subset, subset_keys)
      self.cache.store(harness.hash, self.weights_id, result.task_ids, result.sample_keys,
                       result.scores, result.trajectories)
      rollouts, generated_tokens = result.rollouts, result.generated_tokens
      for index, score, trajectory in zip(missing, result.scores, result.trajectories):
        found[index] = (score, trajectory)
    return evaluation_lib.Evaluation(
        tuple(i.id for i in instances), tuple(keys), tuple(entry[0] for entry in found),
        tuple(entry[1] for entry in found), rollouts=rollouts,
        generated_tokens=generated_tokens)


def cached(evaluate, cache, weights_id):
  """The CachedEvaluator of evaluate (weights_id names the weights evaluate serves)."""
  if weights_id is None:
    raise ValueError("A cached evaluation needs weights_id, the name of the model weights the "
                     "evaluate function serves (e.g. a checkpoint step); pass weights_id=...")
  return CachedEvaluator(evaluate, cache, weights_id)
