r"""Math reasoning as a domain: boxed answers checked by value, with a Python tool.

  domain = math_domain(problems="dapo-math-17k.parquet",
                       split_problems={"test": ["aime_2024.jsonl", "aime_2025.jsonl"]})
  domain = math_domain()          # offline: problems from reasoning-gym generators

Instances: public {"question"}; reference {"answer"}.
Tool: python(code) -> str, the program's stdout followed by its stderr (a note with the status
when both are empty), run by a code runner: the harness's sandboxed interpreter by default
(whale_jax.harness.tools.python_interpreter), or a SandboxFusion server (sandbox_fusion_url).
Verifier: strict \boxed{} (whale_jax.tasks.math.answers): the last \boxed{…} of the returned
text, equal in value to the reference answer. No box scores 0.
Offline problems come from reasoning-gym datasets whose answers are plain numbers
(DEFAULT_OFFLINE_DATASETS). fraction_simplification is not among them: value equivalence
would accept an unreduced fraction that its question forbids.
Extra metrics: python_calls_per_episode.
"""
import os

from whale_jax.harness import static_checks
from whale_jax.harness.tools import python_interpreter
from whale_jax.tasks import behaviour
from whale_jax.tasks import seed_harnesses
from whale_jax.tasks import splits as splits_lib
from whale_jax.tasks.domain import Domain
from whale_jax.tasks.domain import Instance
from whale_jax.tasks.math import answers as math_answers
from whale_jax.tasks.math import edits
from whale_jax.tasks.math import files as math_files
from whale_jax.tasks.record_files import as_paths

EDIT_CATALOGUE = edits.CATALOGUE  # the Domain's edit_catalogue (registry.edit_catalogue)
INSTRUCTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "instructions",
                            "math.md")  # steering text of agentic proposers
DEFAULT_OFFLINE_DATASETS = ("basic_arithmetic", "chain_sum", "products", "gcd", "lcm")
DEFAULT_SPLIT_SIZES = {"weight": 512, "harness": 64, "validation": 64, "test": 128}
MAX_OUTPUT_CHARS = 4000
DESCRIPTION = """\
Task: solve a math problem; the final answer is a number or a simple expression.
task = {"question": str}.
tools.python(code) -> str: runs Python code in a fresh sandbox and returns what it printed
(stdout, then stderr; "(no output; status ...)" when nothing was printed). Only the standard
library's math-related modules can be imported. Print the values you need.
run must return text whose last \\boxed{...} holds the final answer. Score: 1 if that answer
equals the reference in value (e.g. 0.5 = \\frac{1}{2}), else 0.
"""


def problem_instance(record):
  """An Instance from a math record {"id", "question", "answer"}."""
  return Instance(id=record["id"], public={"question": record["question"]},
                  reference={"answer": record["answer"]})


def python_tool(run_code):
  """The host-side python tool over a runner code -> {"status", "stdout", "stderr"}."""
  def python(code):
    if not isinstance(code, str):
      raise TypeError(f"python(code) takes the program text as a str; got "
                      f"{type(code).__name__}.")
    output = python_interpreter.format_result(run_code(code))
    if len(output) > MAX_OUTPUT_CHARS:
      output = (output[:MAX_OUTPUT_CHARS] +
                f"\n... ({len(output) - MAX_OUTPUT_CHARS} more characters cut)")
    return output
  return python


def sandboxed_code_runner(timeout_seconds=10.0):
  """The harness's sandboxed interpreter as a code runner."""
  return lambda code: python_interpreter.run_python(code, timeout_seconds=timeout_seconds)


def offline_problems(datasets, count, seed):
  """About `count` problems drawn evenly from reasoning-gym datasets (twice as many, for
  the duplicates that splitting removes)."""
  import reasoning_gym
  per_dataset = -(-2 * count // len(datasets))
  records = []
  for name in datasets:
    dataset = reasoning_gym.create_dataset(name, seed=seed, size=per_dataset)
    records += [{"id": f"{name}:{seed}:{i}", "question": entry["question"],
                 "answer": str(entry["answer"])} for i, entry in enumerate(dataset)]
  return records


def math_metrics(instances, trajectories, scores):
  metrics = behaviour.episode_metrics(
      trajectories, scores, lambda answer: math_answers.extract_boxed(answer) is not None)
  metrics["python_calls_per_episode"] = sum(
      len(behaviour.tool_events(t, "python")) for t in trajectories) / max(len(trajectories), 1)
  return metrics


def math_verify(instance, answer, trajectory=None):
  return math_answers.score_boxed(answer, instance.reference["answer"])


def math_domain(problems=None, split_problems=None, offline_datasets=DEFAULT_OFFLINE_DATASETS,
                split_sizes=None, seed=0, sandbox_fusion_url=None, code_timeout_seconds=10.0,
                code_runner=None):
  """Math problems from files (math_files layouts) or, without files, from reasoning-gym.

  Args:
    problems: file(s) of the shared pool.
    split_problems: {split: file(s)} for splits with their own source (e.g. AIME as test).
    offline_datasets: reasoning-gym dataset names used when no files are given.
    split_sizes: {split: size}; -1 takes the rest of a file pool.
    seed: split seed (and generator seed offline).
    sandbox_fusion_url: run code on this SandboxFusion server instead of the local sandbox.
    code_runner: any code -> {"stdout", "stderr"} callable (overrides the two above).
  """
  split_sizes = dict(DEFAULT_SPLIT_SIZES if split_sizes is None else split_sizes)
  offline = not as_paths(problems) and not split_problems
  if offline and any(size < 0 for size in split_sizes.values()):
    raise ValueError(f"split_sizes={split_sizes} asks for 'the rest' (-1), but offline problems "
                     "are generated to size; give every split a size.")
  if code_runner is None:
    if sandbox_fusion_url:
      from whale_jax.tasks.math.sandbox_fusion import SandboxFusionClient
      code_runner = SandboxFusionClient(sandbox_fusion_url,
                                        run_timeout_seconds=code_timeout_seconds)
    else:
      code_runner = sandboxed_code_runner(code_timeout_seconds)
  python = python_tool(code_runner)

  def make_splits():
    if offline:
      records = offline_problems(offline_datasets, sum(split_sizes.values()), seed)
      return splits_lib.split_instances([problem_instance(r) for r in records], split_sizes,
                                        seed)
    pool = [problem_instance(r) for path in as_paths(problems)
            for r in math_files.load_problems(path)]
    fixed = {split: [problem_instance(r) for path in as_paths(paths)
                     for r in math_files.load_problems(path)]
             for split, paths in (split_problems or {}).items()}
    return splits_lib.split_instances(pool, split_sizes, seed, fixed=fixed)

  config = {"problems": [os.fspath(p) for p in as_paths(problems)],
            "split_problems": {k: [os.fspath(p) for p in as_paths(v)]
                               for k, v in (split_problems or {}).items()},
            "offline_datasets": list(offline_datasets) if offline else [],
            "split_sizes": split_sizes, "seed": seed, "sandbox_fusion_url": sandbox_fusion_url,
            "code_timeout_seconds": code_timeout_seconds}
  return Domain(name="math", description=DESCRIPTION,
                seed_harness=seed_harnesses.source("math"), splits=make_splits,
                verify=math_verify, tools=lambda instance: {"python": python},
                metrics=math_metrics, allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
                config=config,
                edit_catalogue=EDIT_CATALOGUE, instructions=INSTRUCTIONS)
