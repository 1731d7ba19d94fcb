"""Domains by name: get_domain("synthetic_qa", seed=0, split_sizes={...}).

  "searchqa"                 question files + a corpus or a retrieval server (searchqa_domain)
  "synthetic_qa"             generated multi-hop world, offline (synthetic_qa_domain)
  "math"                     math files, or reasoning-gym arithmetic offline (math_domain)
  "chess"                    Lichess puzzle CSV, or generated mates offline (chess_domain)
  "docqa"                    OfficeQA CSV + parsed corpus, or generated bulletins (docqa_domain)
  "toolflow"                 AutomationBench tasks, or generated app workflows (toolflow_domain)
  "reasoning_gym:<dataset>"  any reasoning-gym dataset (reasoning_gym_domain)
Keyword arguments are the chosen builder's.
"""
from whale_jax.tasks.chess_domain import chess_domain
from whale_jax.tasks.docqa_domain import docqa_domain
from whale_jax.tasks.math_domain import math_domain
from whale_jax.tasks.reasoning_gym_domain import reasoning_gym_domain
from whale_jax.tasks.searchqa_domain import searchqa_domain
from whale_jax.tasks.searchqa_domain import synthetic_qa_domain
from whale_jax.tasks.toolflow_domain import toolflow_domain

BUILDERS = {"searchqa": searchqa_domain, "synthetic_qa": synthetic_qa_domain,
            "math": math_domain, "chess": chess_domain, "docqa": docqa_domain,
            "toolflow": toolflow_domain}
REASONING_GYM_PREFIX = "reasoning_gym:"


def domain_names():
  return sorted(BUILDERS) + [REASONING_GYM_PREFIX + "<dataset>"]


def get_domain(name, **config):
  """The Domain called `name`, built from config (the builder's keyword arguments)."""
  if isinstance(name, str) and name.startswith(REASONING_GYM_PREFIX):
    return reasoning_gym_domain(name[len(REASONING_GYM_PREFIX):], **config)
  if name not in BUILDERS:
    raise ValueError(f"Unknown domain {name!r}; choose one of {', '.join(domain_names())}.")
  try:
    return BUILDERS[name](**config)
  except TypeError as error:
    if "unexpected keyword argument" in str(error):
      raise TypeError(f"get_domain({name!r}): {error}. See the docstring of "
                      f"whale_jax.tasks.{BUILDERS[name].__module__.split('.')[-1]}."
                      f"{BUILDERS[name].__name__} for its options.") from None
    raise
