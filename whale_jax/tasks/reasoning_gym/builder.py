"""Any Reasoning Gym dataset as a domain, scored by the dataset's own (partial-credit) scorer.

  domain = reasoning_gym_domain("chain_sum", seed=0, split_sizes={...})
  domain = tasks.get_domain("reasoning_gym:chain_sum")

Instances: public {"question"}; reference = the dataset entry (question, answer, metadata),
which the scorer `dataset.score_answer(answer, entry)` reads. Extra keyword arguments go to
reasoning_gym.create_dataset (each dataset's config, e.g. min_terms=2 for chain_sum).
Tool: python(code) -> str, the harness's sandboxed interpreter
(whale_jax.harness.tools.python_interpreter: a fresh confined process per call, the
confinement of a harness episode): what the code printed, stdout then stderr, so a program
that raised returns its traceback. It is there for the interpreter loops Harness Learning's
proposer writes (emit code, run it, read the output or traceback, retry); the seed harness
is a single direct model call, as in Harness Learning, and does not use it.
Extra metrics: full_credit_rate, python_calls_per_episode.
"""
import textwrap

from whale_jax.harness import static_checks
from whale_jax.harness.tools import python_interpreter
from whale_jax.tasks import behaviour
from whale_jax.tasks import seed_harnesses
from whale_jax.tasks import splits as splits_lib
from whale_jax.tasks.domain import Domain
from whale_jax.tasks.domain import Instance
from whale_jax.tasks.reasoning_gym import edits

EDIT_CATALOGUE = edits.CATALOGUE  # the Domain's edit_catalogue (registry.edit_catalogue)
DEFAULT_SPLIT_SIZES = {"weight": 256, "harness": 25, "validation": 25, "test": 75}
CODE_IMPORTS = textwrap.fill(
    "The code may import " + ", ".join(python_interpreter.DEFAULT_ALLOWED_IMPORTS) + ".", 92)
DESCRIPTION = """\
Task: a Reasoning Gym puzzle from the dataset "{dataset}". The question states the task and,
often, the exact answer format required.
task = {"question": str}.
tools.python(code) -> str: runs Python code in a fresh sandbox and returns what it printed
(stdout, then stderr: the traceback if it raised).
{code_imports}
run must return only the final answer, in the format the question asks for (no explanation
around it): the dataset's own scorer compares it to the reference and may give partial credit
(a score between 0 and 1).
"""


def dataset_names():
  """Every dataset name reasoning-gym registers."""
  from reasoning_gym import factory
  return sorted(factory.DATASETS)


def reasoning_gym_domain(dataset, seed=0, split_sizes=None, code_timeout_seconds=10.0,
                         **dataset_config):
  """The reasoning-gym dataset `dataset` with seeded disjoint splits.

  Args:
    code_timeout_seconds: the wall-clock limit of one tools.python call.
  """
  import reasoning_gym
  if dataset not in dataset_names():
    raise ValueError(f"reasoning-gym has no dataset {dataset!r}; choose one of "
                     f"{', '.join(dataset_names())}.")
  split_sizes = dict(DEFAULT_SPLIT_SIZES if split_sizes is None else split_sizes)
  if any(size < 0 for size in split_sizes.values()):
    raise ValueError(f"split_sizes={split_sizes} asks for 'the rest' (-1), but reasoning-gym "
                     "problems are generated to size; give every split a size.")
  # Twice the needed size: small datasets repeat questions, and repeats are removed.
  size = 2 * sum(split_sizes.values()) + 8
  generator = reasoning_gym.create_dataset(dataset, seed=seed, size=size, **dataset_config)

  def make_splits():
    pool = [Instance(id=f"{dataset}:{seed}:{i}", public={"question": entry["question"]},
                     reference=entry) for i, entry in enumerate(generator)]
    return splits_lib.split_instances(pool, split_sizes, seed)

  def verify(instance, answer, trajectory=None):
    if not isinstance(answer, str):
      return 0.0
    try:
      score = float(generator.score_answer(answer, instance.reference))
    except Exception:  # a scorer crash on a strange answer is a wrong answer
      return 0.0
    return min(max(score, 0.0), 1.0)

  def metrics(instances, trajectories, scores):
    result = behaviour.episode_metrics(
        trajectories, scores, lambda answer: isinstance(answer, str) and bool(answer.strip()))
    result["full_credit_rate"] = sum(score >= 1.0 for score in scores) / max(len(scores), 1)
    result["python_calls_per_episode"] = sum(
        len(behaviour.tool_events(t, "python")) for t in trajectories) / max(len(trajectories), 1)
    return result

  python = python_interpreter.python_tool(timeout_seconds=code_timeout_seconds)
  config = {"dataset": dataset, "seed": seed, "split_sizes": split_sizes,
            "code_timeout_seconds": code_timeout_seconds, **dataset_config}
  return Domain(name=f"reasoning_gym:{dataset}",
                description=DESCRIPTION.replace("{dataset}", dataset).replace(
                    "{code_imports}", CODE_IMPORTS),
                seed_harness=seed_harnesses.source("reasoning_gym"), splits=make_splits,
                verify=verify, tools=lambda instance: {"python": python}, metrics=metrics,
                allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS, config=config,
                edit_catalogue=EDIT_CATALOGUE)
