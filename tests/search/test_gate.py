"""Gate decisions on crafted score vectors, against hand-computed expectations."""
import math

import numpy as np
import pytest

from whale_jax.search import gate


def test_strict_rule_accepts_only_strict_improvement():
  incumbent = {"a": 1, "b": 0, "c": 1, "d": 0}
  assert gate.decide(incumbent, {"a": 1, "b": 1, "c": 1, "d": 0}).accepted
  tie = gate.decide(incumbent, {"a": 0, "b": 1, "c": 1, "d": 0})
  assert not tie.accepted and tie.reason == "tie keeps the incumbent"
  worse = gate.decide(incumbent, {"a": 0, "b": 0, "c": 1, "d": 0})
  assert not worse.accepted and worse.mean_difference == -0.25


def test_scores_are_paired_by_task_id_not_order():
  decision = gate.decide({"x": 0.0, "y": 1.0}, {"y": 1.0, "x": 0.5})
  assert decision.num_better == 1 and decision.num_worse == 0
  assert decision.mean_difference == pytest.approx(0.25)


def test_sign_test_p_value_matches_binomial_tail():
  # 8 better, 1 worse: P(X >= 8 | n=9) = (C(9,8) + C(9,9)) / 2^9 = 10 / 512.
  assert gate.sign_test_p_value(8, 1) == pytest.approx(10 / 512)
  assert gate.sign_test_p_value(0, 0) == 1.0
  assert gate.sign_test_p_value(3, 3) == pytest.approx(sum(math.comb(6, k) for k in range(3, 7))
                                                       / 64)


def test_sign_test_rule_uses_discordant_tasks_only():
  incumbent = [1] * 20 + [0] * 8 + [1]
  candidate = [1] * 20 + [1] * 8 + [0]  # 8 better, 1 worse, 20 concordant
  decision = gate.decide(incumbent, candidate, rule="sign_test", alpha=0.05)
  assert decision.accepted and decision.p_value == pytest.approx(10 / 512)
  assert decision.n == 29
  # Same data, but demanding a 0.3 effect: rejected on effect size.
  assert not gate.decide(incumbent, candidate, rule="sign_test", min_effect=0.3).accepted
  # 5 better, 2 worse: p = (C(7,5)+C(7,6)+C(7,7)) / 128 = 29/128 > 0.05.
  weak = gate.decide([0] * 5 + [1] * 2, [1] * 5 + [0] * 2, rule="sign_test")
  assert not weak.accepted and weak.p_value == pytest.approx(29 / 128)


def test_bootstrap_rule_bounds_the_mean_difference():
  rng = np.random.default_rng(0)
  incumbent = rng.integers(0, 2, 200).astype(float)
  candidate = incumbent.copy()
  candidate[rng.choice(np.flatnonzero(incumbent == 0), 40, replace=False)] = 1.0  # +0.2
  decision = gate.decide(incumbent, candidate, rule="bootstrap", alpha=0.05, seed=1)
  low, high = decision.interval
  assert decision.accepted and 0.1 < low < 0.2 < high < 0.3
  assert not gate.decide(incumbent, candidate, rule="bootstrap", min_effect=0.25).accepted


def test_mismatched_task_ids_are_an_error():
  with pytest.raises(ValueError, match="identical task ids"):
    gate.decide({"a": 1}, {"b": 1})
  with pytest.raises(ValueError, match="rule='vote'"):
    gate.decide([1], [1], rule="vote")
