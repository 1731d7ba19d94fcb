"""The typed reader: types checked to the leaves, unknown keys refused with did-you-mean, and
every error naming the full key path."""
import dataclasses

import pytest

from whale_jax import typed_config


@dataclasses.dataclass(frozen=True)
class Inner:
  learning_rate: float = 1e-6
  total_steps: int | None = None

  def __post_init__(self):
    if self.learning_rate < 0:
      raise ValueError(f"config.training.inner.learning_rate={self.learning_rate} must be "
                       ">= 0.")


@dataclasses.dataclass(frozen=True)
class Outer:
  inner: Inner = Inner()
  stages: tuple[str, ...] = ("grpo",)
  pair: tuple[str, int] | None = None
  flag: bool = False
  extra: dict = dataclasses.field(default_factory=dict)


def test_builds_nested_dataclasses_tuples_and_optionals():
  outer = typed_config.read(Outer, {"inner": {"learning_rate": 1, "total_steps": None},
                                    "stages": ["base", "sft"], "pair": ["a", 2]}, "config.x")
  assert outer == Outer(Inner(1, None), ("base", "sft"), ("a", 2))
  assert isinstance(outer.stages, tuple) and isinstance(outer.pair, tuple)


@pytest.mark.parametrize("value,words", [
    ({"inner": {"learnin_rate": 1.0}},
     ["config.x.inner.learnin_rate is not a known key", "did you mean 'learning_rate'"]),
    ({"inner": {"learning_rate": "1e-5"}},
     ["config.x.inner.learning_rate='1e-5' is str", "a number"]),
    ({"inner": {"total_steps": 2.5}}, ["config.x.inner.total_steps=2.5", "an int or None"]),
    ({"flag": 1}, ["config.x.flag=1 is int", "True or False"]),
    ({"stages": ["base", 3]}, ["config.x.stages[1]=3", "a string"]),
    ({"pair": ["a"]}, ["config.x.pair", "1 items"]),
    ({"inner": {"learning_rate": -1.0}}, ["config.x.inner.learning_rate=-1.0 must be >= 0"]),
    ({"inner": 3}, ["config.x.inner=3", "a dict of Inner fields"]),
])
def test_errors_name_the_full_key_path(value, words):
  with pytest.raises(typed_config.ConfigError) as caught:
    typed_config.read(Outer, value, "config.x")
  message = str(caught.value)
  assert "\n" not in message
  for word in words:
    assert word in message, (word, message)


def test_checkpoint_values_keep_their_structure_checks_and_wording():
  with pytest.raises(ValueError, match=r"The checkpoint's loop has keys \['nope'\] that Outer "
                     "lacks"):
    typed_config.read(Outer, {"nope": 1}, "loop", source="checkpoint")


@dataclasses.dataclass(frozen=True)
class Flat:
  """A section whose config layout is not its fields: keys other than name go to options."""
  name: str
  options: dict = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if not self.name:
      raise ValueError("config.flat.name='' must name something.")

  @classmethod
  def from_config(cls, value, key_path):
    typed_config.check_keys(value, ("name", "size", "color"), key_path)
    return typed_config.read_fields(
        cls, {"name": value.get("name", ""),
              "options": {k: v for k, v in value.items() if k != "name"}}, key_path)


@dataclasses.dataclass(frozen=True)
class Holder:
  entries: tuple[str | Flat, ...] = ()
  one: Flat | None = None


def test_a_class_with_from_config_reads_its_own_layout_at_every_path():
  holder = typed_config.read(Holder, {"entries": ["plain", {"name": "a", "size": 2}],
                                      "one": {"name": "b", "color": "red"}}, "config.h")
  assert holder == Holder(("plain", Flat("a", {"size": 2})), Flat("b", {"color": "red"}))
  assert typed_config.read(Flat, Flat("c"), "config.f") == Flat("c")   # already typed
  for value, words in (
      ({"entries": [{"name": "a", "sise": 2}]},
       ["config.h.entries[0].sise is not a known key", "did you mean 'size'"]),
      ({"one": {"name": ""}}, ["config.h.one.name='' must name something"]),
      ({"one": 3}, ["config.h.one=3", "a dict of Flat fields"])):
    with pytest.raises(typed_config.ConfigError) as caught:
      typed_config.read(Holder, value, "config.h")
    for word in words:
      assert word in str(caught.value), (word, str(caught.value))
