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
(e.g. harness search and the validation gate), within one process. On a multi-host run each
host keeps its own cache: full trajectories of the episodes it ran, and for the others'
their numbers (a rollouts.sharding.EpisodeRecord, stored as {"remote_episode": ...}).
CachedEvaluator.evaluate_many looks up several jobs and evaluates what all of them miss
together.
"""
import dataclasses
import hashlib
import os
import re
import threading

from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import collector
from whale_jax.rollouts import sharding
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
    return entry[0], sharding.trajectory_from_json(entry[1])

  def store(self, harness_hash, weights_id, task_ids, keys, scores, trajectories):
    """Adds finished episodes (infra errors are skipped)."""
    rows = [{"task_id": task_id, "sample_key": int(key), "score": float(score),
             "trajectory": sharding.trajectory_json(trajectory)}
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
    return self.evaluate_many([(harness, instances, keys)])[0]

  def evaluate_many(self, jobs):
    """[Evaluation] of jobs [(harness, instances, sample_keys)]: the missing episodes of all
    jobs go to evaluation.evaluate_many together (in flight at once where evaluate can)."""
    jobs = [(harness, list(instances), [int(key) for key in keys])
            for harness, instances, keys in jobs]
    found = [[self.cache.lookup(harness.hash, self.weights_id, instance.id, key)
              for instance, key in zip(instances, keys)] for harness, instances, keys in jobs]
    missing = [[i for i, entry in enumerate(entries) if entry is None] for entries in found]
    asked = [number for number, indices in enumerate(missing) if indices]
    subsets = [(jobs[n][0], [jobs[n][1][i] for i in missing[n]],
                [jobs[n][2][i] for i in missing[n]]) for n in asked]
    costs = [(0, 0)] * len(jobs)
    if getattr(self.evaluate, "evaluate_many", None) is not None:
      results = evaluation_lib.evaluate_many(self.evaluate, subsets)
    else:  # one after another, each stored as it finishes (the next one may raise)
      results = (evaluation_lib.evaluate_many(self.evaluate, [subset])[0] for subset in subsets)
    for number, subset, result in zip(asked, subsets, results):
      harness = subset[0]
      self.cache.store(harness.hash, self.weights_id, result.task_ids, result.sample_keys,
                       result.scores, result.trajectories)
      costs[number] = (result.rollouts, result.generated_tokens)
      for index, score, trajectory in zip(missing[number], result.scores, result.trajectories):
        found[number][index] = (score, trajectory)
    return [collector.Evaluation(
        tuple(i.id for i in instances), tuple(keys), tuple(entry[0] for entry in entries),
        tuple(entry[1] for entry in entries), rollouts=cost[0], generated_tokens=cost[1])
            for (_, instances, keys), entries, cost in zip(jobs, found, costs)]


def cached(evaluate, cache, weights_id):
  """The CachedEvaluator of evaluate (weights_id names the weights evaluate serves)."""
  if weights_id is None:
    raise ValueError("A cached evaluation needs weights_id, the name of the model weights the "
                     "evaluate function serves (e.g. a checkpoint step); pass weights_id=...")
  return CachedEvaluator(evaluate, cache, weights_id)
