"""The validation gate wired to evaluations: both harnesses on the same tasks, same seeds.

  result = gate_candidate(incumbent, candidate, evaluate, splits["validation"],
                          weights_id="step_1200", seed=0, rule="strict",
                          log_path=workdir / "gate.jsonl", cache_dir=workdir / "evaluations")
  result.decision.accepted, result.rollouts

The incumbent and the candidate are evaluated on the identical instances, at the weights the
evaluate function serves, with the identical sample key per task (sample_keys(instances,
seed): common random numbers, so an unchanged harness reproduces its scores exactly), and
whale_jax.search.gate.decide compares the paired per-task scores. With cache_dir, evaluations
come from the evaluation cache when (harness hash, weights id, task id, sample key) was seen
(e.g. the incumbent scored at these weights in an earlier round). The two evaluations run
together (evaluation.evaluate_many: one batch of both harnesses' episodes). Every decision is appended to
log_path as one JSON row: the two hashes, weights id, seed, the number of tasks and a hash of
their ids, rollouts, and the GateDecision (n, means, mean difference, interval, p-value,
discordant counts, reason).
"""
import dataclasses
import hashlib
import json
import os

from whale_jax.rollouts import collector
from whale_jax.search import evaluation as evaluation_lib
from whale_jax.search import evaluation_cache
from whale_jax.search import gate


@dataclasses.dataclass(frozen=True)
class GateResult:
  decision: gate.GateDecision
  incumbent_evaluation: collector.Evaluation
  candidate_evaluation: collector.Evaluation
  rollouts: int
  log_row: dict

  @property
  def generated_tokens(self):
    return (self.incumbent_evaluation.generated_tokens +
            self.candidate_evaluation.generated_tokens)


def task_ids_hash(task_ids):
  return hashlib.sha256("\n".join(task_ids).encode("utf-8")).hexdigest()[:16]


def gate_candidate(incumbent, candidate, evaluate, instances, weights_id=None, seed=0,
                   rule="strict", log_path=None, cache_dir=None, **rule_options):
  """Evaluates both harnesses with common random numbers and decides (see the docstring).

  Args:
    incumbent, candidate: Harness values.
    evaluate: (harness, instances, sample_keys) -> Evaluation at the current weights.
    instances: the validation instances (identical for both).
    weights_id: names the weights (default evaluate.weights_id); needed with cache_dir.
    seed: the run seed: seeds the per-task sample keys shared by both harnesses and the
      bootstrap rule's resamples.
    rule, rule_options: gate.decide's rule and its alpha, min_effect, num_bootstrap.
    log_path: JSONL file the decision row is appended to.
    cache_dir: an evaluation cache directory (e.g. shared with the harness search).
  """
  instances = list(instances)
  if not instances:
    raise ValueError("The validation gate needs validation instances; got none.")
  weights_id = weights_id if weights_id is not None else getattr(evaluate, "weights_id", None)
  if cache_dir is not None:
    evaluate = evaluation_cache.cached(
        evaluate, evaluation_cache.EvaluationCache(cache_dir), weights_id)
  keys = evaluation_lib.sample_keys(instances, seed)
  # Both together (one batch of episodes where evaluate can), each with the same keys.
  incumbent_evaluation, candidate_evaluation = evaluation_lib.evaluate_many(
      evaluate, [(incumbent, instances, keys), (candidate, instances, keys)])
  decision = gate.decide(incumbent_evaluation.score_by_task(),
                         candidate_evaluation.score_by_task(), rule=rule, seed=seed,
                         **rule_options)
  rollouts = incumbent_evaluation.rollouts + candidate_evaluation.rollouts
  task_ids = [instance.id for instance in instances]
  row = {"incumbent": incumbent.hash, "candidate": candidate.hash, "weights_id": weights_id,
         "seed": seed, "num_tasks": len(task_ids), "task_ids_hash": task_ids_hash(task_ids),
         "rollouts": rollouts, **decision.to_json()}
  if log_path is not None:
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as file:
      file.write(json.dumps(row) + "\n")
  return GateResult(decision, incumbent_evaluation, candidate_evaluation, rollouts, row)
