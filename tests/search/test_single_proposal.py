"""propose_one: one checked candidate from one proposal, recorded and replayed on resume."""
from whale_jax.harness import Harness
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.search import proposal as proposal_lib
from whale_jax.search import single_proposal
from whale_jax import tasks

GOOD_PATCH = "<<<<<<< SEARCH\nTOPK = 1\n=======\nTOPK = 3\n>>>>>>> REPLACE\n"


class CountingProposer:
  name = "counting"

  def __init__(self, text):
    self.text, self.calls, self.contexts = text, 0, []

  def propose(self, context, n):
    self.calls += 1
    self.contexts.append(context)
    return [proposal_lib.Proposal(kind="patch", text=self.text, hypothesis="more passages")]


def _domain():
  return tasks.get_domain("synthetic_qa", seed=0,
                          split_sizes={"weight": 4, "harness": 4, "validation": 4, "test": 4})


def _episode(task_id, answer):
  return (trajectory_lib.Trajectory(episode_id=task_id, task_id=task_id, harness_hash="h",
                                    outcome="ok", answer=answer), 0.0)


def test_runnable_candidate_is_returned_and_replayed(tmp_path):
  domain = _domain()
  incumbent = Harness(domain.seed_harness)
  proposer = CountingProposer(GOOD_PATCH)
  episodes = [_episode("synthetic:1", "<answer>Zed</answer>")]
  candidate, record = single_proposal.propose_one(incumbent, proposer, domain, str(tmp_path),
                                                  episodes=episodes)
  assert "TOPK = 3" in candidate.source and candidate.parent == incumbent.hash
  assert record.status == "evaluated" and record.hypothesis == "more passages"
  # The block's episode reached the proposer's context.
  assert "<answer>Zed</answer>" in proposer.contexts[0].messages[1]["content"]
  again, _ = single_proposal.propose_one(incumbent, proposer, domain, str(tmp_path))
  assert again.source == candidate.source and proposer.calls == 1


def test_refused_proposal_records_its_reason(tmp_path):
  domain = _domain()
  incumbent = Harness(domain.seed_harness)
  proposer = CountingProposer("<<<<<<< SEARCH\nNOT IN THE FILE\n=======\nx\n>>>>>>> REPLACE\n")
  candidate, record = single_proposal.propose_one(incumbent, proposer, domain, str(tmp_path))
  assert candidate is None and record.status == "rejected"
  assert [r["code"] for r in record.reasons] == ["not_found"]


def test_a_failed_call_is_not_saved_and_calling_again_asks_again(tmp_path):
  domain = _domain()
  incumbent = Harness(domain.seed_harness)

  class Failing:
    name = "failing"

    def propose(self, context, n):
      raise ConnectionError("connection refused")

  candidate, record = single_proposal.propose_one(incumbent, Failing(), domain, str(tmp_path))
  assert candidate is None and record.reasons[0]["code"] == "proposer_error"
  assert "connection refused" in record.reasons[0]["message"]
  assert not (tmp_path / single_proposal.PROPOSAL_FILE).exists()
  proposer = CountingProposer(GOOD_PATCH)
  candidate, record = single_proposal.propose_one(incumbent, proposer, domain, str(tmp_path))
  assert proposer.calls == 1 and "TOPK = 3" in candidate.source
  assert record.status == "evaluated"
