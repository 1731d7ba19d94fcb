"""The reward of one proposed harness revision (SPEC 3.3): its score plus an executability bonus.

  reward("patch", parsed=True, applied=True, completed_fraction=0.5, score=0.4)   # 0.625
  reward("program", parsed=True, applied=False, completed_fraction=1.0, score=0.4,
         defines_run=True, num_lines=40)                                      # 0.5

  patch    score + min(cap, 0.05 if the reply has SEARCH/REPLACE blocks, all closed
                         + 0.10 if, besides, every block applied and the program changed
                         + 0.15 x completed_fraction, the share of scoring episodes that
                                ended "ok" (0 unless it applied and passed the static checks))
           A failed later check keeps the earlier bonuses; score is 0 unless it ran.
  program  score + 0.10 when the reply holds a program that parses, defines run, has at most
           200 lines and completes the evaluation run; otherwise 0.
A run "completes" when completed_fraction >= min_completed_fraction (1.0: every scoring
episode ended "ok"). The reward is never negative. The bonus values are RewardConfig's
(config.harness_learning.reward). This module imports nothing heavy, so the config boundary
(algorithms/experiment_config.py) reads RewardConfig before jax is loaded.
"""
import dataclasses

KINDS = ("patch", "program")


@dataclasses.dataclass(frozen=True)
class RewardConfig:
  """The executability bonus (= config.harness_learning.reward keys; SPEC 3.3 values).

  Attributes:
    parsed, applied, completed: patch-mode bonuses (completed is scaled by the fraction).
    cap: the most the patch-mode bonus adds.
    program: program-mode bonus for an executable program.
    max_lines: most lines of a program (program mode) and of any checked candidate.
    min_completed_fraction: share of scoring episodes that must end "ok" for a run to
      count as completed.
  """
  parsed: float = 0.05
  applied: float = 0.10
  completed: float = 0.15
  cap: float = 0.30
  program: float = 0.10
  max_lines: int = 200
  min_completed_fraction: float = 1.0

  def __post_init__(self):
    for name in ("parsed", "applied", "completed", "cap", "program"):
      if getattr(self, name) < 0:
        raise ValueError(f"config.harness_learning.reward.{name}={getattr(self, name)} is "
                         "negative; bonuses are >= 0, so that rewards are never negative.")
    if not 0 < self.min_completed_fraction <= 1:
      raise ValueError(f"config.harness_learning.reward.min_completed_fraction="
                       f"{self.min_completed_fraction} must be in (0, 1].")


def reward(kind, parsed, applied, completed_fraction, score, defines_run=False, num_lines=0,
           config=RewardConfig()):
  """The reward of one proposed revision (see the module docstring).

  Args:
    kind: "patch" or "program".
    parsed: patch: the reply has SEARCH/REPLACE blocks, all closed; program: the reply holds
      a program that parses.
    applied: patch: every block applied and changed the program (ignored for programs).
    completed_fraction: share of the scoring episodes that ended "ok" (0 when it never ran).
    score: the candidate's mean score on the scoring tasks (0 when it never ran).
    defines_run, num_lines: program mode: the program defines run; its number of lines.
  """
  if kind not in KINDS:
    raise ValueError(f"kind={kind!r}; use one of {KINDS}.")
  if not 0 <= completed_fraction <= 1 or not 0 <= score <= 1:
    raise ValueError(f"completed_fraction={completed_fraction} and score={score} must both "
                     "be in [0, 1].")
  if kind == "patch":
    bonus = 0.0
    if parsed:
      bonus += config.parsed
      if applied:
        bonus += config.applied + config.completed * completed_fraction
    return score + min(bonus, config.cap)
  executable = (parsed and defines_run and num_lines <= config.max_lines and
                completed_fraction >= config.min_completed_fraction)
  return score + config.program if executable else 0.0
