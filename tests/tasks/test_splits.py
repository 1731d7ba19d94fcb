"""Splits: disjoint, seeded, reproducible, duplicates removed, own-source splits honoured."""
import pytest

from whale_jax.tasks import splits
from whale_jax.tasks.domain import Instance

SIZES = {"weight": 10, "harness": 4, "validation": 3, "test": 5}


def pool(count, prefix="q"):
  return [Instance(f"{prefix}:{i}", {"question": f"question {i}"}, {"answer": str(i)})
          for i in range(count)]


def ids(split_lists):
  return {name: [i.id for i in instances] for name, instances in split_lists.items()}


def test_sizes_and_disjointness():
  result = splits.split_instances(pool(30), SIZES, seed=0)
  assert {name: len(v) for name, v in result.items()} == SIZES
  all_ids = [i for v in ids(result).values() for i in v]
  assert len(all_ids) == len(set(all_ids)) == sum(SIZES.values())


def test_same_seed_same_splits_other_seed_other_splits():
  assert ids(splits.split_instances(pool(30), SIZES, seed=1)) == ids(
      splits.split_instances(pool(30), SIZES, seed=1))
  assert ids(splits.split_instances(pool(30), SIZES, seed=1)) != ids(
      splits.split_instances(pool(30), SIZES, seed=2))


def test_rest_goes_to_the_minus_one_split():
  result = splits.split_instances(pool(30), {"weight": -1, "harness": 4, "validation": 3,
                                             "test": 5}, seed=0)
  assert len(result["weight"]) == 30 - 12


def test_missing_sizes_are_empty_splits():
  result = splits.split_instances(pool(5), {"test": 2}, seed=0)
  assert [len(result[name]) for name in splits.SPLIT_NAMES] == [0, 0, 0, 2]


def test_same_question_twice_is_one_instance():
  doubled = pool(10) + [Instance(f"copy:{i}", {"question": f"question {i}"}, None)
                        for i in range(10)]
  result = splits.split_instances(doubled, {"weight": -1}, seed=0)
  assert len(result["weight"]) == 10
  assert all(i.id.startswith("q:") for i in result["weight"])  # first occurrence kept


def test_own_source_split_is_removed_from_the_pool():
  test_file = pool(6, prefix="test")  # questions 0..5, the same texts as pool ids q:0..q:5
  result = splits.split_instances(pool(20), {"weight": -1, "test": 6}, seed=0,
                                  fixed={"test": test_file})
  assert [i.id.split(":")[0] for i in result["test"]] == ["test"] * 6
  train_questions = {i.public["question"] for i in result["weight"]}
  assert len(result["weight"]) == 14
  assert not train_questions & {i.public["question"] for i in result["test"]}


def test_own_source_split_takes_all_without_a_size():
  result = splits.split_instances(pool(5), {"weight": 2}, seed=0,
                                  fixed={"test": pool(3, prefix="t") + pool(3, prefix="u")})
  assert len(result["test"]) == 3  # same questions under other ids count once


@pytest.mark.parametrize("sizes, fixed, message", [
    ({"weight": 40}, None, "needs 40 instances but only 30"),
    ({"train": 3}, None, "is not a split"),
    ({"weight": -1, "test": -1}, None, "more than one split"),
    ({"weight": 2.5}, None, "must be an int"),
    ({"weight": 3}, {"dev": []}, "is not a split"),
])
def test_bad_sizes_say_what_to_change(sizes, fixed, message):
  with pytest.raises(ValueError, match=message):
    splits.split_instances(pool(30), sizes, seed=0, fixed=fixed)


def test_same_id_different_question_is_refused():
  clash = [Instance("q:1", {"question": "a"}), Instance("q:1", {"question": "b"})]
  with pytest.raises(ValueError, match="share the id 'q:1'"):
    splits.split_instances(clash, {"weight": 1}, seed=0)
