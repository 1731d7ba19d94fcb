"""Candidates evaluated together equal candidates evaluated one after another.

A 3-candidate Meta-Harness iteration runs twice on the real sandboxed runtime (a scripted
model with a reply latency, so episodes in flight overlap): once with the candidates'
episodes in one batch (parallel_candidates=True, the default), once one candidate after
another. Same archive (ids, statuses, scores, turns, rollouts) and the same traces, episode
by episode; the parallel run has more episodes in flight than one candidate has. The two wall
times are printed (not asserted: 2 shared CPU cores). The validation gate's two evaluations
go to evaluate_many as one batch.
"""
import time

import pytest

from tests.search import fakes
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import SamplingParams
from whale_jax.search import evaluation
from whale_jax.search import meta_harness
from whale_jax.search import validation_gate
from whale_jax.search.proposal import Proposal
from whale_jax.tokenization import load_tokenizer

SPLIT_SIZES = {"weight": -1, "harness": 4, "validation": 4, "test": 4}
LATENCY_SECONDS = 0.3
TIMING_FIELDS = ("episode_id", "wall_seconds", "sandbox_seconds", "started_seconds",
                 "duration_seconds")


@pytest.fixture(scope="module")
def domain():
  return tasks.get_domain("synthetic_qa", seed=0, split_sizes=SPLIT_SIZES)


def _block(search, replace):
  return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


class ThreeCandidates:
  """Proposes the same three patches of the seed harness at every call."""
  name = "scripted"

  def propose(self, context, n):
    assert n == 3
    return [Proposal("patch", _block("TOPK = 1\n", "TOPK = 3\n")),
            Proposal("patch", _block("MAX_TURNS = 2\n", "MAX_TURNS = 3\n")),
            Proposal("patch", _block("TOPK = 1\n", "TOPK = 2\n"))]


def _without_timing(value):
  """A trajectory's JSON without its episode id and clock readings (they differ per run)."""
  if isinstance(value, dict):
    return {k: _without_timing(v) for k, v in value.items() if k not in TIMING_FIELDS}
  if isinstance(value, list):
    return [_without_timing(v) for v in value]
  return value


def _search(domain, archive_dir, parallel):
  """(SearchResult, wall seconds, most llm calls in flight) of one 3-candidate iteration."""
  splits = domain.splits()
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, fakes.qa_model(sum(splits.values(), [])),
                            latency_seconds=LATENCY_SECONDS)
  with HarnessRuntime(backend, tokenizer, num_workers=12, timeout_seconds=60) as runtime:
    evaluate = evaluation.make_evaluate(runtime, domain, SamplingParams(max_tokens=512),
                                        weights_id="w0")
    start = time.perf_counter()
    result = meta_harness.search(
        Harness(domain.seed_harness, origin="seed"), evaluate, ThreeCandidates(), archive_dir,
        domain=domain, instances=splits["harness"], weights_id="w0", iterations=2,
        candidates_per_iteration=3, parallel_candidates=parallel)
    seconds = time.perf_counter() - start
  return result, seconds, backend.max_in_flight


def test_a_parallel_iteration_equals_a_serial_one(domain, tmp_path):
  serial, serial_seconds, serial_in_flight = _search(domain, tmp_path / "serial", False)
  parallel, parallel_seconds, parallel_in_flight = _search(domain, tmp_path / "parallel", True)
  print(f"\n3-candidate iteration (+ the incoming harness), {len(domain.splits()['harness'])} "
        f"tasks each, {LATENCY_SECONDS} s per llm call: serial {serial_seconds:.2f} s "
        f"(at most {serial_in_flight} calls in flight), parallel {parallel_seconds:.2f} s "
        f"(at most {parallel_in_flight} in flight)")

  def summary(result):
    return [(c.id, c.iteration, c.index, c.hash, c.status, c.success, c.mean_turns,
             c.rollouts, c.generated_tokens, c.outcomes) for c in result.archive.candidates]

  assert summary(parallel) == summary(serial)
  assert [c.status for c in parallel.archive.candidates] == ["evaluated"] * 4
  assert len({c.success for c in parallel.archive.candidates}) > 1   # the scores differ
  for candidate in serial.archive.candidates:
    assert (parallel.archive.examples(candidate.id) ==
            serial.archive.examples(candidate.id))
    expected = [_without_timing(t.to_json()) for t in serial.archive.trajectories(candidate.id)]
    got = [_without_timing(t.to_json()) for t in parallel.archive.trajectories(candidate.id)]
    assert got == expected and len(got) == len(domain.splits()["harness"])
  assert (parallel.accepted_id, parallel.rollouts) == (serial.accepted_id, serial.rollouts)
  # Serially, at most one candidate's tasks are in flight; together, more.
  tasks_per_candidate = len(domain.splits()["harness"])
  assert serial_in_flight <= tasks_per_candidate < parallel_in_flight


class Batching:
  """An evaluate with evaluate_many, recording each batch's harness hashes."""

  def __init__(self):
    self.batches, self.inner = [], fakes.FakeEvaluate()

  def __call__(self, harness, instances, keys):
    return self.evaluate_many([(harness, instances, keys)])[0]

  def evaluate_many(self, jobs):
    self.batches.append([harness.hash for harness, _, _ in jobs])
    return [self.inner(harness, instances, keys) for harness, instances, keys in jobs]


def test_the_gate_evaluates_incumbent_and_candidate_in_one_batch(domain):
  incumbent = Harness(domain.seed_harness)
  candidate = Harness(domain.seed_harness.replace("TOPK = 1", "TOPK = 3"))
  evaluate = Batching()
  result = validation_gate.gate_candidate(incumbent, candidate, evaluate,
                                          domain.splits()["validation"], weights_id="w0")
  assert evaluate.batches == [[incumbent.hash, candidate.hash]]
  serial = fakes.FakeEvaluate()
  expected = validation_gate.gate_candidate(incumbent, candidate, serial,
                                            domain.splits()["validation"], weights_id="w0")
  assert result.decision == expected.decision and result.rollouts == expected.rollouts
