"""The loop state is dataclasses all the way down and survives its checkpoint's JSON."""
import json

import pytest

from whale_jax.algorithms import loop


def _state():
  adaptation = loop.AdaptationState(
      current="def run(task): ...", current_score=0.5, round=1,
      history=[loop.AdaptationRound(round=0, kept="c0001", scores=[0.25, 0.5],
                                    current_score=0.5)],
      report=("harness_learning/adapt_grpo_strict/round_000", "c0001"))
  notes = loop.HarnessLearningNotes(demonstrations=3, carried={"math": "source"},
                                    adaptation={"grpo_strict": adaptation},
                                    proposer_prompt_tokens=11, proposer_completion_tokens=7)
  return loop.LoopState(
      incumbent="src", cycle=2, phase="harness", phase_rewards=[0.25],
      evaluations=[{"rollouts": 8, "test_mean": 0.5, "per_task": {"a": 1.0}}],
      gate_decisions=[loop.GateRecord("cycle_000", True, 0.125, "abc", True)],
      vace=loop.VaceNotes(
          pairs=[loop.VacePair(1, "vace_cycle_000", "solver@2", 2, "abc", 0.5)],
          selected=loop.VaceSelection(0, "src", "solver@2"), rl_blocks=1),
      harness_learning=notes)


def test_state_survives_its_checkpoint_json_as_dataclasses():
  state = _state()
  written = json.loads(json.dumps(state.to_json()))  # what the checkpoint holds
  # Hand-written: the JSON form of the state above.
  assert written["harness_learning"]["adaptation"]["grpo_strict"]["history"] == [
      {"round": 0, "kept": "c0001", "scores": [0.25, 0.5], "current_score": 0.5}]
  assert written["gate_decisions"] == [
      {"label": "cycle_000", "accepted": True, "mean_difference": 0.125,
       "candidate_hash": "abc", "adopted": True}]
  restored = loop.LoopState.from_json(written)
  assert restored == state
  adaptation = restored.harness_learning.adaptation["grpo_strict"]
  assert isinstance(adaptation, loop.AdaptationState)
  assert isinstance(adaptation.history[0], loop.AdaptationRound)
  assert adaptation.report == ("harness_learning/adapt_grpo_strict/round_000", "c0001")
  assert isinstance(restored.gate_decisions[0], loop.GateRecord)
  assert isinstance(restored.vace.pairs[0], loop.VacePair)
  assert isinstance(restored.vace.selected, loop.VaceSelection)


def test_a_state_without_recipe_notes_round_trips():
  state = loop.LoopState(incumbent="src")
  assert loop.LoopState.from_json(json.loads(json.dumps(state.to_json()))) == state


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.update(notes={"pairs": []}), r"loop has keys \['notes'\] that LoopState lacks"),
    (lambda s: s["harness_learning"].update(carried={"grpo": {}}, adaptations={}),
     r"loop\.harness_learning has keys \['adaptations'\] that HarnessLearningNotes lacks"),
    (lambda s: s["harness_learning"]["adaptation"]["grpo_strict"].update(rounds=1),
     r"loop\.harness_learning\.adaptation\['grpo_strict'\] has keys \['rounds'\] that "
     "AdaptationState lacks"),
    (lambda s: s["gate_decisions"][0].pop("accepted"),
     r"loop\.gate_decisions\[0\] has no \['accepted'\] \(a GateRecord has "
     r"\['accepted', 'adopted', 'candidate_hash', 'label', 'mean_difference'\]\)"),
    (lambda s: s["harness_learning"]["adaptation"]["grpo_strict"]["history"].append(3),
     r"loop\.harness_learning\.adaptation\['grpo_strict'\]\.history\[1\] is 3 where a "
     "AdaptationRound object belongs"),
])
def test_an_old_or_unknown_field_is_refused_with_its_path(edit, message):
  written = json.loads(json.dumps(_state().to_json()))
  edit(written)
  with pytest.raises(ValueError, match=message):
    loop.LoopState.from_json(written)
