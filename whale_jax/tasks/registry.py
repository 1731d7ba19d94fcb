"""Domains by name: get_domain("synthetic_qa", seed=0, split_sizes={...}).

  "searchqa"                 question files + a corpus or a retrieval server (qa/)
  "synthetic_qa"             generated multi-hop world, offline (qa/)
  "math"                     math files, or reasoning-gym arithmetic offline (math/)
  "chess"                    Lichess puzzle CSV, or generated mates offline (chess/)
  "docqa"                    OfficeQA CSV + parsed corpus, or generated bulletins (docqa/)
  "toolflow"                 AutomationBench tasks, or generated app workflows (toolflow/)
  "reasoning_gym:<dataset>"  any reasoning-gym dataset (reasoning_gym/)
Keyword arguments are the chosen builder's.

A domain is a folder: tasks/<family>/builder.py holds a builder (keyword arguments ->
Domain), and one line of BUILDERS names it. A builder's module may define EDIT_CATALOGUE (its
Domain's edit_catalogue), which edit_catalogue(name) reads without building the domain. A
domain from outside the package joins with register(name, "package.module:builder").
"""
import importlib
import sys

from whale_jax.tasks.chess.builder import chess_domain
from whale_jax.tasks.docqa.builder import docqa_domain
from whale_jax.tasks.math.builder import math_domain
from whale_jax.tasks.qa.builder import searchqa_domain
from whale_jax.tasks.qa.builder import synthetic_qa_domain
from whale_jax.tasks.reasoning_gym.builder import reasoning_gym_domain
from whale_jax.tasks.toolflow.builder import toolflow_domain

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
