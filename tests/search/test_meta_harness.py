"""Meta-Harness search: finds a better harness, survives malformed proposals, resumes exactly."""
import json

import pytest

from tests import http_stub
from tests.search import fakes
from whale_jax import seeds as seeds_lib
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import SamplingParams
from whale_jax.search import archive as archive_lib
from whale_jax.search import edit_library
from whale_jax.search import evaluation
from whale_jax.search import meta_harness
from whale_jax.search import model_proposer
from whale_jax.search import prompt_only
from whale_jax.search.proposal import Proposal
from whale_jax.tokenization import load_tokenizer


@pytest.fixture(scope="module")
def domain():
  return tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)


def _block(search, replace):
  return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


class ScriptedProposer:
  """Returns the given batches of proposals, one batch per call; records the contexts."""
  name = "scripted"

  def __init__(self, batches):
    self.batches, self.contexts = list(batches), []

  def propose(self, context, n):
    self.contexts.append(context)
    return self.batches.pop(0) if self.batches else []


def _search(domain, archive_dir, evaluate, proposer, **options):
  options = {"iterations": 3, "candidates_per_iteration": 3, **options}
  return meta_harness.search(Harness(domain.seed_harness, origin="seed"), evaluate, proposer,
                             archive_dir, domain=domain, instances=domain.splits()["harness"],
                             weights_id="w0", **options)


def test_search_with_the_edit_library_beats_the_seed_harness(domain, tmp_path):
  splits = domain.splits()
  instances = splits["harness"]
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, fakes.qa_model(sum(splits.values(), [])))
  seed_harness = Harness(domain.seed_harness, origin="seed")
  with HarnessRuntime(backend, tokenizer, num_workers=2, timeout_seconds=30) as runtime:
    evaluate = evaluation.make_evaluate(runtime, domain, SamplingParams(max_tokens=512),
                                        weights_id="w0")
    result = meta_harness.search(seed_harness, evaluate, edit_library.EditLibraryProposer(0),
                                 tmp_path / "archive", domain=domain, instances=instances,
                                 iterations=8, candidates_per_iteration=3)
    other_keys = evaluation.sample_keys(instances, seed=1)   # fresh, uncached evaluation
    before = evaluate(seed_harness, instances, other_keys)
    after = evaluate(result.accepted, instances, other_keys)
  assert before.success_rate == 0.0
  assert after.success_rate >= 0.5
  assert result.improved and result.accepted.hash != seed_harness.hash
  evaluated = [c for c in result.archive.candidates if c.evaluated]
  assert result.rollouts == len(evaluated) * len(instances)
  assert result.archive.get(result.accepted_id).success == max(c.success for c in evaluated)


def test_malformed_proposals_are_rejected_with_reasons(domain, tmp_path):
  topk = _block("TOPK = 1\n", "TOPK = 3\n")
  bad = [
      Proposal("patch", "I would raise TOPK."),
      Proposal("patch", _block("TOPK = 7\n", "TOPK = 3\n")),
      Proposal("program", "def run(task, llm, tools):\n  return (\n"),
      Proposal("program", "def run(task, llm, tools):\n  return ''\n" + "x = 1\n" * 300),
      Proposal("patch", _block("import json\n", "import os\nimport json\n")),
      Proposal("patch", _block("TOPK = 1\n", "TOPK = 1\n")),
      Proposal("patch", "", error="ChatError: the endpoint answered HTTP 500"),
      Proposal("patch", "<<<<<<< SEARCH\nTOPK = 1\n"),
      Proposal("patch", topk),
      Proposal("patch", topk),
  ]
  expected = ["no_blocks", "not_found", "static_check", "static_check", "static_check",
              "no_change", "proposer_error", "malformed", None, "duplicate"]
  evaluate = fakes.FakeEvaluate()
  result = _search(domain, tmp_path / "archive", evaluate, ScriptedProposer([bad]),
                   iterations=2, candidates_per_iteration=len(bad))
  candidates = result.archive.candidates[1:]
  assert [c.reasons[0]["code"] if c.reasons else None for c in candidates] == expected
  assert [c.status for c in candidates] == ["rejected"] * 8 + ["evaluated", "duplicate"]
  assert [f["code"] for f in candidates[2].static_check] == ["syntax_error"]
  assert [f["code"] for f in candidates[3].static_check] == ["too_long"]
  assert [f["code"] for f in candidates[4].static_check] == ["import_not_allowed"]
  assert candidates[9].duplicate_of == candidates[8].id
  assert len(evaluate.calls) == 2                     # the incoming harness and one candidate
  assert result.accepted_id == candidates[8].id
  rows = [json.loads(line) for line in open(tmp_path / "archive" / "summary.jsonl")]
  assert [row["id"] for row in rows] == [c.id for c in result.archive.candidates]


def test_a_proposer_that_raises_is_counted_not_archived_and_a_resume_asks_again(domain,
                                                                                 tmp_path):

  class Failing:
    name = "failing"

    def propose(self, context, n):
      raise ConnectionError("proposer endpoint down")

  result = _search(domain, tmp_path / "archive", fakes.FakeEvaluate(), Failing(), iterations=3)
  assert [c.id for c in result.archive.candidates] == ["c0000"]   # no failure is a result
  assert (result.failed_proposer_calls, result.missing_proposals) == (6, 6)
  assert result.iterations == 3 and result.accepted_id == "c0000"
  saved = json.loads((tmp_path / "archive" / "iterations" / "iteration_002" /
                      "proposals.json").read_text())
  assert saved["proposals"] == [None] * 3
  assert ["proposer endpoint down" in f["error"] for f in saved["failed_calls"]] == [True] * 3
  topk = Proposal("patch", _block("TOPK = 1\n", "TOPK = 3\n"))
  proposer = ScriptedProposer([[topk] * 3, [topk] * 3])
  resumed = _search(domain, tmp_path / "archive", fakes.FakeEvaluate(), proposer, iterations=3)
  assert [c.iteration for c in proposer.contexts] == [2, 3]
  assert [c.status for c in resumed.archive.candidates[1:]] == ["evaluated"] + ["duplicate"] * 5
  assert (resumed.failed_proposer_calls, resumed.missing_proposals) == (6, 0)


def _summary(result):
  return [(c.id, c.iteration, c.index, c.hash, c.status, c.success, c.mean_turns, c.mechanism,
           c.rollouts) for c in result.archive.candidates]


@pytest.mark.parametrize("fail_on_call", [4, 5])
def test_an_interrupted_search_resumes_to_the_same_candidates_and_decisions(
    domain, tmp_path, fail_on_call):
  options = {"iterations": 4, "candidates_per_iteration": 2}
  reference_evaluate = fakes.FakeEvaluate()
  reference = _search(domain, tmp_path / "reference", reference_evaluate,
                      edit_library.EditLibraryProposer(seed=3), **options)
  interrupted = fakes.FakeEvaluate(fail_on_call=fail_on_call)
  with pytest.raises(RuntimeError, match="interrupted"):
    _search(domain, tmp_path / "resumed", interrupted, edit_library.EditLibraryProposer(seed=3),
            **options)
  resumed_evaluate = fakes.FakeEvaluate()
  resumed = _search(domain, tmp_path / "resumed", resumed_evaluate,
                    edit_library.EditLibraryProposer(seed=3), **options)
  assert _summary(resumed) == _summary(reference)
  assert (resumed.accepted_id, resumed.accepted.hash) == (reference.accepted_id,
                                                          reference.accepted.hash)
  assert resumed.rollouts == reference.rollouts
  # Nothing evaluated before the interruption is evaluated again.
  assert interrupted.calls[:-1] + resumed_evaluate.calls == reference_evaluate.calls
  for iteration in range(1, 5):
    name = f"iterations/iteration_{iteration:03d}/comparison.json"
    assert (json.loads((tmp_path / "resumed" / name).read_text()) ==
            json.loads((tmp_path / "reference" / name).read_text()))


def test_saved_proposals_are_reused_on_resume(domain, tmp_path):
  topk = Proposal("patch", _block("TOPK = 1\n", "TOPK = 3\n"))
  turns = Proposal("patch", _block("MAX_TURNS = 2\n", "MAX_TURNS = 3\n"))
  with pytest.raises(RuntimeError):
    _search(domain, tmp_path / "archive", fakes.FakeEvaluate(fail_on_call=3),
            ScriptedProposer([[topk, turns]]), iterations=2, candidates_per_iteration=2)
  proposer = ScriptedProposer([])
  result = _search(domain, tmp_path / "archive", fakes.FakeEvaluate(), proposer, iterations=2,
                   candidates_per_iteration=2)
  assert proposer.contexts == []
  assert [c.status for c in result.archive.candidates] == ["evaluated"] * 3


def test_patience_stops_after_iterations_without_a_new_best(domain, tmp_path):
  topk = Proposal("patch", _block("TOPK = 1\n", "TOPK = 3\n"))
  prompts = [Proposal("patch", _block(
      'SYSTEM_PROMPT = "Answer factual questions using search when needed."\n',
      f'SYSTEM_PROMPT = "Answer factual questions, variant {i}."\n')) for i in range(8)]
  proposer = ScriptedProposer([[topk]] + [[p] for p in prompts])
  result = _search(domain, tmp_path / "archive", fakes.FakeEvaluate(), proposer,
                   iterations=None, min_iterations=3, patience=2, max_iterations=10,
                   candidates_per_iteration=1)
  # Iteration 2 finds the new best; iterations 3 and 4 do not: stop after iteration 4.
  assert result.iterations == 4
  assert "no new best" in result.stop_reason
  assert len(proposer.contexts) == 3
  capped = _search(domain, tmp_path / "capped", fakes.FakeEvaluate(),
                   ScriptedProposer([[p] for p in prompts]), iterations=None,
                   min_iterations=1, patience=100, max_iterations=3, candidates_per_iteration=1)
  assert capped.iterations == 3 and "max_iterations=3" in capped.stop_reason


def test_a_tie_with_fewer_turns_is_accepted_but_is_no_new_best(domain, tmp_path):
  # WHALE's patience counts iterations since the best success rate rose (SPEC 1.3).
  topk = Proposal("patch", _block("TOPK = 1\n", "TOPK = 3\n"))           # success 3/4
  fewer_turns = Proposal("patch", _block("MAX_TURNS = 2\n", "MAX_TURNS = 1\n"))  # same, 1 turn
  prompts = [Proposal("patch", _block(
      'SYSTEM_PROMPT = "Answer factual questions using search when needed."\n',
      f'SYSTEM_PROMPT = "Answer factual questions, variant {i}."\n')) for i in range(8)]
  proposer = ScriptedProposer([[topk], [fewer_turns]] + [[p] for p in prompts])
  result = _search(domain, tmp_path / "archive", fakes.FakeEvaluate(), proposer,
                   iterations=None, min_iterations=3, patience=2, max_iterations=10,
                   candidates_per_iteration=1)
  ids = {c.iteration: c for c in result.archive.candidates}
  assert ids[3].success == ids[2].success and ids[3].mean_turns == 1 < ids[2].mean_turns
  assert result.accepted.hash == ids[3].hash                     # adopted ...
  assert result.iterations == 4                                  # ... but the last new best
  assert "last new best in iteration 2" in result.stop_reason    # stays iteration 2


def test_one_iteration_only_evaluates_the_incoming_harness(domain, tmp_path):
  evaluate = fakes.FakeEvaluate()
  proposer = ScriptedProposer([])
  result = _search(domain, tmp_path / "archive", evaluate, proposer, iterations=1)
  assert result.accepted.hash == Harness(domain.seed_harness).hash
  assert result.rollouts == len(domain.splits()["harness"]) and proposer.contexts == []


def test_identical_candidates_are_never_evaluated_twice_across_iterations(domain, tmp_path):
  # The same program reached twice: directly, and as the revert of a later change.
  topk = Proposal("patch", _block("TOPK = 1\n", "TOPK = 3\n"))
  back = Proposal("patch", _block("TOPK = 3\n", "TOPK = 1\n"))
  evaluate = fakes.FakeEvaluate()
  result = _search(domain, tmp_path / "archive", evaluate,
                   ScriptedProposer([[topk], [back]]), candidates_per_iteration=1)
  assert [c.status for c in result.archive.candidates] == ["evaluated", "evaluated",
                                                           "duplicate"]
  assert result.archive.candidates[2].duplicate_of == "c0000"
  assert len({harness_hash for harness_hash, _, _ in evaluate.calls}) == len(evaluate.calls)


def test_pareto_front_and_acceptance_prefer_success_then_fewer_turns():
  points = {"c0000": (0.5, 2.0), "c0001": (0.5, 1.5), "c0002": (0.7, 3.0),
            "c0003": (0.7, 3.0), "c0004": (0.4, 1.0), "c0005": (0.3, 1.2)}
  candidates = [archive_lib.Candidate(id=i, iteration=1, index=0, hash=i, parent=None,
                                      origin="patch", status="evaluated", success=s,
                                      mean_turns=t) for i, (s, t) in points.items()]
  candidates.append(archive_lib.Candidate(id="c0006", iteration=1, index=0, hash=None,
                                          parent=None, origin="patch", status="rejected"))
  front = [c.id for c in meta_harness.pareto_front(candidates)]
  assert front == ["c0001", "c0002", "c0003", "c0004"]
  assert meta_harness.pick_accepted(candidates).id == "c0002"
  assert meta_harness.pick_accepted(candidates[:2]).id == "c0001"   # same success, fewer turns


def test_prompt_only_mode_changes_nothing_but_prompt_strings(domain, tmp_path):
  topk = Proposal("patch", _block("TOPK = 1\n", "TOPK = 3\n"))
  scripted = _search(domain, tmp_path / "scripted", fakes.FakeEvaluate(),
                     ScriptedProposer([[topk]]), iterations=2, candidates_per_iteration=1,
                     prompt_only=True)
  assert scripted.archive.candidates[1].reasons[0]["code"] == "prompt_only"
  result = _search(domain, tmp_path / "library", fakes.FakeEvaluate(),
                   edit_library.EditLibraryProposer(seed=0), iterations=3,
                   candidates_per_iteration=3, prompt_only=True)
  evaluated = [c for c in result.archive.candidates[1:] if c.evaluated]
  assert evaluated
  for candidate in evaluated:
    assert prompt_only.check_prompt_only(domain.seed_harness,
                                         result.archive.source(candidate.id)) is None
  assert fakes.REMINDER in result.accepted.source          # the reminder is what scores here


def test_resuming_with_different_arguments_is_refused(domain, tmp_path):
  _search(domain, tmp_path / "archive", fakes.FakeEvaluate(), ScriptedProposer([]),
          iterations=1)
  with pytest.raises(ValueError, match="seed"):
    _search(domain, tmp_path / "archive", fakes.FakeEvaluate(), ScriptedProposer([]),
            iterations=1, seed=5)


def test_candidate_folders_hold_what_a_person_needs(domain, tmp_path):
  topk = Proposal("patch", _block("TOPK = 1\n", "TOPK = 3\n"), hypothesis="More passages.",
                  raw_output="HYPOTHESIS: More passages.\n" + _block("TOPK = 1\n", "TOPK = 3\n"))
  result = _search(domain, tmp_path / "archive", fakes.FakeEvaluate(),
                   ScriptedProposer([[topk]]), iterations=2, candidates_per_iteration=1)
  folder = tmp_path / "archive" / "candidates" / "c0001"
  record = json.loads((folder / "candidate.json").read_text())
  assert record["parent"] == "c0000" and record["hypothesis"] == "More passages."
  assert record["instruction_hash"] and record["instruction_version"]
  assert "TOPK = 3" in (folder / "harness.py").read_text()
  assert (folder / "proposal.txt").read_text() == topk.raw_output
  examples = [json.loads(line) for line in (folder / "examples.jsonl").read_text().splitlines()]
  assert [e["task_id"] for e in examples] == [i.id for i in domain.splits()["harness"]]
  assert len(result.archive.trajectories("c0001")) == len(examples)
  assert (tmp_path / "archive" / "iterations" / "iteration_002" / "context.txt").exists()


class ChatServer(http_stub.StubServer):
  """A chat-completions endpoint on 127.0.0.1 whose reply is chosen by the request's seed;
  while `failing` holds a seed, requests with that seed get HTTP 500 (every retry too)."""

  def __init__(self, reply_of_seed):
    self.failing, self.seeds = None, []

    def respond(path, body):
      self.seeds.append(body["seed"])
      if body["seed"] == self.failing:
        return 500, {"error": "overloaded"}
      return 200, http_stub.chat_reply(reply_of_seed(body["seed"]),
                                       {"prompt_tokens": 5, "completion_tokens": 7})
    super().__init__(respond)
    self.url = self.base + "/v1"


def test_a_failed_http_proposer_call_is_retried_on_resume_and_its_reply_used(domain, tmp_path):
  seed_of = {(it, i): seeds_lib.derive_seed(0, "proposer_call", it, i)
             for it in (2, 3) for i in (0, 1)}
  reply_of = {seed_of[2, 0]: "I cannot change this harness.",       # a reply: refused, kept
              seed_of[2, 1]: "HYPOTHESIS: more passages.\n" + _block("TOPK = 1\n",
                                                                     "TOPK = 4\n"),
              seed_of[3, 0]: _block("TOPK = 1\n", "TOPK = 5\n"),
              seed_of[3, 1]: _block("MAX_TURNS = 2\n", "MAX_TURNS = 3\n")}
  server = ChatServer(reply_of.__getitem__)
  try:
    def proposer():
      return model_proposer.openai_proposer(
          server.url, "proposer", api_key_env=None, max_retries=1,
          initial_backoff_seconds=0.0, max_consecutive_failures=3)
    server.failing = seed_of[2, 1]
    first = _search(domain, tmp_path / "archive", fakes.FakeEvaluate(), proposer(),
                    candidates_per_iteration=2)
    assert server.seeds.count(seed_of[2, 1]) == 2                 # the call and its retry
    assert (first.failed_proposer_calls, first.missing_proposals) == (1, 1)
    slots = {(c.iteration, c.index): c for c in first.archive.candidates[1:]}
    assert sorted(slots) == [(2, 0), (3, 0), (3, 1)]              # nothing for the failure
    assert slots[2, 0].status == "rejected" and slots[2, 0].reasons[0]["code"] == "no_blocks"
    server.failing, server.seeds = None, []
    resumed = _search(domain, tmp_path / "archive", fakes.FakeEvaluate(), proposer(),
                      candidates_per_iteration=2)
  finally:
    server.close()
  assert server.seeds == [seed_of[2, 1]]                          # exactly the failed call
  assert (resumed.failed_proposer_calls, resumed.missing_proposals) == (1, 0)
  retried = [c for c in resumed.archive.candidates if (c.iteration, c.index) == (2, 1)]
  assert len(retried) == 1 and retried[0].status == "evaluated"
  assert "TOPK = 4" in resumed.archive.source(retried[0].id)
  assert retried[0].hypothesis == "more passages."
  saved = json.loads((tmp_path / "archive" / "iterations" / "iteration_002" /
                      "proposals.json").read_text())
  assert saved["proposals"][1]["raw_output"] == reply_of[seed_of[2, 1]]
  assert [f["index"] for f in saved["failed_calls"]] == [1]
  assert "HTTP 500" in saved["failed_calls"][0]["error"]
