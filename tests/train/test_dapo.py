"""DAPO's informative-group filter, overlong filtering and soft overlong punishment against
hand-computed values (DAPO eq. 13 with L_max = 20, L_cache = 4: the ramp runs over 17..20)."""
import numpy as np
import pytest

from whale_jax.train import dapo


def test_informative_groups_need_two_different_rewards():
  groups = [[1, 1, 1], [0.1, 0.1, 0.1], [0, 1, 0], [1 / 3] * 8, [0.5], [], [0.2, 0.2 + 1e-12]]
  np.testing.assert_array_equal(dapo.informative_groups(groups),
                                [False, False, True, False, False, False, True])


def test_select_informative_keeps_order_and_stops_at_the_target():
  groups = [[1, 1], [0, 1], [0, 0], [1, 0], [0.5, 0.25], [0.7, 0.7]]
  np.testing.assert_array_equal(dapo.select_informative(groups), [1, 3, 4])
  np.testing.assert_array_equal(dapo.select_informative(groups, 2), [1, 3])
  np.testing.assert_array_equal(dapo.select_informative(groups, 0), [])
  with pytest.raises(ValueError, match="num_groups=-1"):
    dapo.select_informative(groups, -1)


def test_soft_overlong_penalty_by_hand():
  lengths = np.array([0, 10, 16, 17, 18, 19, 20, 21, 100])
  # <= 16: 0; 17: (16 - 17) / 4 = -0.25; 18: -0.5; 19: -0.75; 20: -1; > 20: -1.
  expected = [0, 0, 0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0]
  np.testing.assert_array_equal(dapo.soft_overlong_penalty(lengths, 20, 4), expected)
  # DAPO's own setting: L_max 20480, L_cache 4096 -> 18432 tokens cost (16384 - 18432) / 4096.
  assert dapo.soft_overlong_penalty([18_432], 20_480, 4_096)[0] == -0.5


def test_overlong_filter_masks_truncated_samples():
  np.testing.assert_array_equal(dapo.overlong_filter_mask([5, 19, 20, 25], 20), [1, 1, 0, 0])
  # The sampler's own finish reasons win over the length rule.
  np.testing.assert_array_equal(
      dapo.overlong_filter_mask([5, 20], 20, truncated=[True, False]), [0, 1])


@pytest.mark.parametrize("call, words", [
    (lambda: dapo.soft_overlong_penalty([3], 20, 0), "0 < cache_length <= max_length"),
    (lambda: dapo.soft_overlong_penalty([3], 20, 30), "0 < cache_length <= max_length"),
    (lambda: dapo.soft_overlong_penalty([3.5], 20, 4), "non-negative integers"),
    (lambda: dapo.overlong_filter_mask([3], 0), "max_length=0"),
    (lambda: dapo.overlong_filter_mask([3, 4], 5, truncated=[True]), "truncated has shape"),
])
def test_bad_input_is_refused(call, words):
  with pytest.raises(ValueError, match=words):
    call()
