"""VACE's per-domain AutomationBench split (Table 1) through the toolflow loader, on fixture
task files in the published record layout written here."""
import collections
import json

import pytest

from configs import vace
from whale_jax import tasks
from whale_jax import typed_config
from whale_jax.algorithms import builders
from whale_jax.tasks import registry

TABLE_1 = {"hr": {"weight": 26, "validation": 15, "test": 24},        # SPEC 2.5
           "marketing": {"weight": 27, "validation": 22, "test": 23},
           "finance": {"weight": 27, "validation": 21, "test": 24}}


def _record(domain, index):
  return {"name": f"{domain}.task_{index:03d}", "example_id": index,
          "prompt": f"{domain} workflow number {index}: mark the request done.",
          "initial_state": {"slack.channels": [{"id": "C1", "name": "ops"}]},
          "assertions": [{"type": "slack_message_exists", "channel_name": "ops",
                          "text_contains": f"done {index}"}]}


def _write(path, counts):
  records = [_record(domain, i) for domain, count in counts.items() for i in range(count)]
  path.write_text("".join(json.dumps(record) + "\n" for record in records))
  return str(path)


def _domain_counts(splits):
  return {name: dict(collections.Counter(i.public["domain"] for i in instances))
          for name, instances in splits.items() if instances}


def test_the_paper_config_draws_table_1_per_domain_from_the_task_file(tmp_path):
  # 65 / 72 / 72 tasks as in the paper, plus a domain the config leaves out.
  path = _write(tmp_path / "tasks.jsonl", {"hr": 65, "marketing": 72, "finance": 72,
                                           "sales": 9})
  section = dict(vace.get_config("toolflow").domain)
  section["tasks"] = [path]
  splits = builders.build_domain(typed_config.read(registry.DomainSection, section)).splits()
  expected = {split: {domain: TABLE_1[domain][split] for domain in TABLE_1}
              for split in ("weight", "validation", "test")}
  assert _domain_counts(splits) == expected
  ids = [i.id for instances in splits.values() for i in instances]
  assert len(ids) == len(set(ids)) == 209   # disjoint, every task of the three domains


def _domain(path, sizes, seed=0):
  return tasks.get_domain("toolflow", tasks=path, domains=tuple(sizes),
                          split_sizes_by_domain=sizes, seed=seed)


SIZES = {"hr": {"weight": 3, "validation": 2, "test": -1},
         "marketing": {"weight": 3, "validation": 3, "test": 2},
         "finance": {"weight": 4, "validation": 2, "test": 3}}


def test_each_domain_is_drawn_on_its_own_seeded(tmp_path):
  path = _write(tmp_path / "tasks.jsonl", {"hr": 9, "marketing": 8, "finance": 10})
  splits = _domain(path, SIZES).splits()
  assert _domain_counts(splits) == {
      "weight": {"hr": 3, "marketing": 3, "finance": 4},
      "validation": {"hr": 2, "marketing": 3, "finance": 2},
      "test": {"hr": 4, "marketing": 2, "finance": 3}}   # hr's -1: the 4 left over
  by_split = {name: [i.id for i in instances] for name, instances in splits.items()}
  assert by_split == {name: [i.id for i in instances]
                      for name, instances in _domain(path, SIZES).splits().items()}
  other_seed = {name: [i.id for i in instances]
                for name, instances in _domain(path, SIZES, seed=1).splits().items()}
  assert other_seed != by_split
  # Stratified: another domain's sizes do not change hr's draw.
  changed = dict(SIZES, marketing={"weight": 1, "validation": 1, "test": 1})
  hr_only = lambda splits: {name: [i.id for i in instances if i.public["domain"] == "hr"]
                            for name, instances in splits.items()}
  assert hr_only(_domain(path, changed).splits()) == hr_only(splits)


@pytest.mark.parametrize("sizes,options,words", [
    ({"hr": {"weight": 10}}, {}, ["split_sizes_by_domain['hr']", "needs 10"]),
    ({"hr": {"weight": 1}}, {"domains": ("hr", "finance")}, ["name the same domains"]),
    ({"hr": {"weight": 1}}, {"split_sizes": {"weight": 1}}, ["not both"]),
])
def test_bad_per_domain_sizes_are_refused(tmp_path, sizes, options, words):
  path = _write(tmp_path / "tasks.jsonl", {"hr": 9, "finance": 3})
  arguments = {"tasks": path, "domains": tuple(sizes), "split_sizes_by_domain": sizes,
               **options}
  with pytest.raises(ValueError) as raised:
    tasks.get_domain("toolflow", **arguments).splits()
  for word in words:
    assert word in str(raised.value), str(raised.value)


def test_the_smoke_variant_splits_its_generated_tasks_per_domain():
  splits = builders.build_domain(typed_config.read(
      registry.DomainSection, vace.get_config("toolflow,smoke").domain)).splits()
  sizes = vace.SMOKE_SPLIT_PER_DOMAIN
  assert _domain_counts(splits) == {
      split: {domain: sizes[split] for domain in ("hr", "marketing", "finance")}
      for split in ("weight", "validation", "test")}
