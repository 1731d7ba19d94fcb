"""Domains by name: get_domain("synthetic_qa", seed=0, split_sizes={...}).

  "searchqa"                 question files + a corpus or a retrieval server (qa/)
  "synthetic_qa"             generated multi-hop world, offline (qa/)
  "math"                     math files, or reasoning-gym arithmetic offline (math/)
  "chess"                    Lichess puzzle CSV, or generated mates offline (chess/)
  "docqa"                    OfficeQA CSV + parsed corpus, or generated bulletins (docqa/)
  "toolflow"                 AutomationBench tasks, or generated app workflows (toolflow/)
  "reasoning_gym:<dataset>"  any reasoning-gym dataset (reasoning_gym/)
Keyword arguments are the chosen builder's. A config's domain section (config.domain, Harness
Learning's training domains) is a DomainSection: the name, the splits' seed and sizes, and the
builder's other keyword arguments, checked against the builder's signature before jax starts.

A domain is a folder: tasks/<family>/builder.py holds a builder (keyword arguments ->
Domain), and one line of BUILDERS names it. A builder's module may define EDIT_CATALOGUE (its
Domain's edit_catalogue), which edit_catalogue(name) reads without building the domain. A
domain from outside the package joins with register(name, "package.module:builder").
"""
import dataclasses
import importlib
import inspect
import sys

from whale_jax import typed_config
from whale_jax.tasks import judge as judge_lib
from whale_jax.tasks import splits as splits_lib
from whale_jax.tasks.chess.builder import chess_domain
from whale_jax.tasks.docqa.builder import docqa_domain
from whale_jax.tasks.math.builder import math_domain
from whale_jax.tasks.qa.builder import searchqa_domain
from whale_jax.tasks.qa.builder import synthetic_qa_domain
from whale_jax.tasks.reasoning_gym.builder import reasoning_gym_domain
from whale_jax.tasks.toolflow.builder import toolflow_domain

ConfigError = typed_config.ConfigError

BUILDERS = {"searchqa": searchqa_domain, "synthetic_qa": synthetic_qa_domain,
            "math": math_domain, "chess": chess_domain, "docqa": docqa_domain,
            "toolflow": toolflow_domain}
REASONING_GYM_PREFIX = "reasoning_gym:"


def domain_names():
  return sorted(BUILDERS) + [REASONING_GYM_PREFIX + "<dataset>"]


def register(name, builder):
  """Adds domain `name`, built by builder: a callable, or "package.module:function" (imported
  now, so a missing module fails here)."""
  if not isinstance(name, str) or not name or name.startswith(REASONING_GYM_PREFIX):
    raise ValueError(f"register({name!r}, ...): a domain name is a non-empty string not starting "
                     f"with {REASONING_GYM_PREFIX!r}.")
  if isinstance(builder, str):
    module_name, _, function_name = builder.partition(":")
    if not function_name:
      raise ValueError(f"register({name!r}, {builder!r}): name the builder as "
                       "'package.module:function'.")
    builder = getattr(importlib.import_module(module_name), function_name)
  if not callable(builder):
    raise TypeError(f"register({name!r}, ...): the builder must be callable (keyword arguments "
                    f"-> Domain); got {type(builder).__name__}.")
  BUILDERS[name] = builder


def _builder(name):
  if isinstance(name, str) and name.startswith(REASONING_GYM_PREFIX):
    return reasoning_gym_domain
  if name not in BUILDERS:
    raise ValueError(f"Unknown domain {name!r}; choose one of {', '.join(domain_names())}.")
  return BUILDERS[name]


def edit_catalogue(name):
  """The EDIT_CATALOGUE of domain `name`'s builder module; () when it has none."""
  return getattr(sys.modules[_builder(name).__module__], "EDIT_CATALOGUE", ())


def edit_catalogues():
  """The edit catalogues of all registered builders (reasoning-gym's last), each once."""
  modules = []
  for builder in list(BUILDERS.values()) + [reasoning_gym_domain]:
    module = sys.modules[builder.__module__]
    if module not in modules:
      modules.append(module)
  return [module.EDIT_CATALOGUE for module in modules if getattr(module, "EDIT_CATALOGUE", ())]


def get_domain(name, **config):
  """The Domain called `name`, built from config (the builder's keyword arguments)."""
  builder = _builder(name)
  if isinstance(name, str) and name.startswith(REASONING_GYM_PREFIX):
    return builder(name[len(REASONING_GYM_PREFIX):], **config)
  try:
    return builder(**config)
  except TypeError as error:
    if "unexpected keyword argument" in str(error):
      raise TypeError(f"get_domain({name!r}): {error}. See the docstring of "
                      f"{builder.__module__}.{builder.__name__} for its options.") from None
    raise


def _parameters(function, skip=()):
  """(names of function's keyword parameters, whether it also takes **kwargs)."""
  parameters = inspect.signature(function).parameters.values()
  names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
  return names - set(skip), any(p.kind == p.VAR_KEYWORD for p in parameters)


def _check_keywords(function, section, key_path, skip=()):
  """ConfigError for a key of section that function does not take."""
  names, takes_any = _parameters(function, skip)
  if not takes_any:
    typed_config.check_keys(section, names, key_path)


def check_name(name, key_path="config.domain.name"):
  """ConfigError unless name is a registered domain or reasoning_gym:<dataset>."""
  if isinstance(name, str) and name.startswith(REASONING_GYM_PREFIX) and len(name) > len(
      REASONING_GYM_PREFIX):
    return
  typed_config.check_choice(name, tuple(BUILDERS) + (REASONING_GYM_PREFIX + "<dataset>",),
                            key_path, "domain")


SHARED_KEYS = ("name", "seed", "split_sizes")


@dataclasses.dataclass(frozen=True)
class DomainSection:
  """A domain section (config.domain; Harness Learning's sft_domains and grpo_domains entries).

    config.domain = dict(name="chess", seed=0, split_sizes={...}, puzzles=[...])
    DomainSection(name="chess", seed=0, split_sizes={...}, options={"puzzles": [...]})

  Attributes:
    name: a BUILDERS name or "reasoning_gym:<dataset>".
    seed: the seed of the splits (and of a generated pool).
    split_sizes: {split: size} (splits.check_sizes; -1 = the rest); None: the builder's.
    options: the builder's other keyword arguments as given (the keys the builder takes; the
      builder checks their values when it builds). With verifier="judge", judge holds
      tasks.judge.openai_judge's keyword arguments.
  """
  name: str
  seed: int = 0
  split_sizes: dict | None = None
  options: dict = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.split_sizes is not None:
      try:
        splits_lib.check_sizes(self.split_sizes)
      except ValueError as error:
        raise ValueError(f"config.domain.{' '.join(str(error).split())}") from None

  @classmethod
  def from_config(cls, value, key_path):
    """The DomainSection of a config section: name, seed and split_sizes beside the builder's
    keyword arguments, each key checked against the builder's signature (typed_config)."""
    if "name" not in value:
      raise ConfigError(f"{key_path}.name is missing; name the domain (e.g. 'searchqa').")
    name = value["name"]
    check_name(name, f"{key_path}.name")
    options = {key: item for key, item in value.items() if key not in SHARED_KEYS}
    _check_keywords(_builder(name), {key: None for key in value if key != "name"}, key_path,
                    skip=("dataset",))
    judge = options.get("judge")
    if isinstance(judge, dict):
      _check_keywords(judge_lib.openai_judge, judge, f"{key_path}.judge")
      if judge.get("constrained", "auto") not in judge_lib.CONSTRAINED:
        raise ConfigError(
            f"{key_path}.judge.constrained={judge['constrained']!r}; use 'auto' (constrained "
            "choice where the endpoint takes it, free text elsewhere), 'always' or 'never'.")
    elif options.get("verifier") == "judge":
      raise ConfigError(
          f"{key_path}.verifier='judge' needs {key_path}.judge = dict(base_url=..., model=...) "
          "(tasks.judge.openai_judge options), or use verifier='exact_match'.")
    return typed_config.read_fields(
        cls, {**{key: value[key] for key in SHARED_KEYS if key in value}, "options": options},
        key_path)

  def keywords(self):
    """get_domain's keyword arguments: options, seed and split_sizes (where the builder takes
    them; split_sizes only when set)."""
    names, takes_any = _parameters(_builder(self.name))
    shared = {"seed": self.seed}
    if self.split_sizes is not None:
      shared["split_sizes"] = self.split_sizes
    return {**{key: item for key, item in shared.items() if takes_any or key in names},
            **self.options}
