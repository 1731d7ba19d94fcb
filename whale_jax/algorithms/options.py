"""The options of every recipe: the frozen dataclasses that config sections become.

  LoopConfig            config.loop       (every recipe: seed, batch sizes, search budget, ...)
  PolicyConfig          config.training   (and harness_learning.proposer_training)
  WhaleConfig           config.whale      (whale, whale_adaptive, fst)
  VaceConfig            config.vace       (vace, ungated, rl_only, vace_harness_only)
  BaselineConfig        config.baseline   (weight_only, harness_only, stagewise, sia)
  HarnessLearningConfig config.harness_learning
  WarmStartConfig       config.warm_start (the embedded solver's warm start)
(config.model, config.search and config.mesh are sections.py's ModelSection, SearchSection
and MeshSection.)
(config.domain is tasks/registry.DomainSection, beside the domain builders it names.)

Field names are the config keys. Each class checks its own values in __post_init__ and names
the key to change. This module imports no jax: the config boundary
(algorithms/experiment_config.py) builds these classes, with the typed sections of the layers
below (train/options.py, sampling/engine_config.py, sampling/api.py), before jax starts.
"""
import dataclasses
import os
import typing

from whale_jax import typed_config
from whale_jax.algorithms import sections
from whale_jax.sampling import api as sampling_api
from whale_jax.sampling import engine_config
from whale_jax.search import archive_view
from whale_jax.search import edit_scope
from whale_jax.search import gate
from whale_jax.search import reward as reward_lib
from whale_jax.tasks import registry
from whale_jax.tasks import seed_harnesses
from whale_jax.train import options as train_options

SEARCH_ANSWER_MODES = archive_view.SEARCH_ANSWER_MODES

RECIPES = ("whale", "whale_adaptive", "fst", "vace", "ungated", "rl_only", "vace_harness_only",
           "weight_only", "harness_only", "stagewise", "sia", "harness_learning")
ADVANTAGE_NORMALIZATIONS = train_options.ADVANTAGE_NORMALIZATIONS
GATE_RULES = gate.RULES
# strict and best_of select on the scoring tasks; oracle and single_step are the paper's
# test-read protocols (harness_learning.adapt).
SELECTION_RULES = ("strict", "best_of", "oracle", "single_step")
MINIBATCH_UNITS = ("sample", "trajectory")
STAGES = ("base", "sft", "grpo")
WEIGHT_UPDATES = ("rsft", "grpo")


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """Options shared by the recipes (= config keys named below).

  Attributes:
    seed: the run seed; every episode seed and data order derives from it.
    prompt_batch: prompts per weight step (config.rsft.prompt_batch).
    num_samples: G rollouts per prompt in a weight step.
    score_threshold: RSFT keeps trajectories scoring above this.
    sft_epochs: passes over the kept samples per RSFT step.
    advantage_normalization: the GRPO advantage estimator (train/advantages.py): "grpo"
      (mean/std, ddof 1), "drgrpo" (mean only) or "rloo"; "mean_std" and "mean" are older
      names of "grpo" and "drgrpo".
    filter_zero_advantage: drop GRPO groups whose rewards are all equal (DAPO).
    max_refill_rounds: DAPO dynamic sampling: while a GRPO step holds fewer than prompt_batch
      informative groups, collect up to this many more rounds of prompt_batch prompts
      (0 = no refill: train on the informative groups of the first round).
    overlong_filter: DAPO overlong filtering: a GRPO trajectory cut off at a generation
      limit (a completion that finished for "length") is not trained on.
    overlong_cache_tokens: DAPO's soft overlong punishment, L_cache: a trajectory that
      generated more than L_max - L_cache tokens gets the linear penalty of DAPO eq. 13 added
      to its score before the advantages (L_max = config.runtime.max_episode_tokens, or
      config.sampling.max_tokens when that is 0); 0 = off.
    search_iterations, candidates_per_iteration: Meta-Harness budget per harness phase.
    eval_num_samples: k of test mean@k.
    eval_interval_rollouts: evaluate the test split each time training rollouts pass a
      multiple of this (0 = only at the start and the end).
    eval_interval_epochs: evaluate the test split every round(this x steps per epoch) weight
      steps (WHALE: 0.1 epoch, verl's test_freq 7 at 74 steps per epoch; 0 = off); the
      two intervals may be combined.
    eval_max_instances: evaluate on at most this many test instances (0 = all).
    checkpoint_every_steps: save after this many weight steps (and after every harness phase).
    gate_rule: validation-gate rule for recipes with a gate.
  """
  seed: int = 0
  prompt_batch: int = 256
  num_samples: int = 8
  score_threshold: float = 0.5
  sft_epochs: int = 1
  advantage_normalization: str = "mean_std"
  filter_zero_advantage: bool = True
  max_refill_rounds: int = 0
  overlong_filter: bool = False
  overlong_cache_tokens: int = 0
  search_iterations: int = 6
  candidates_per_iteration: int = 3
  eval_num_samples: int = 8
  eval_interval_rollouts: int = 0
  eval_interval_epochs: float = 0.0
  eval_max_instances: int = 0
  checkpoint_every_steps: int = 1
  gate_rule: str = "strict"

  def __post_init__(self):
    for name in ("prompt_batch", "num_samples", "sft_epochs", "search_iterations",
                 "candidates_per_iteration", "eval_num_samples", "checkpoint_every_steps"):
      typed_config.at_least(f"config.loop.{name}", getattr(self, name), 1)
    for name in ("eval_interval_rollouts", "eval_interval_epochs", "eval_max_instances",
                 "max_refill_rounds", "overlong_cache_tokens"):
      typed_config.at_least(f"config.loop.{name}", getattr(self, name), 0)
    typed_config.one_of("config.loop.advantage_normalization", self.advantage_normalization,
            ADVANTAGE_NORMALIZATIONS)
    typed_config.one_of("config.loop.gate_rule", self.gate_rule, GATE_RULES)
    if self.max_refill_rounds and not self.filter_zero_advantage:
      raise ValueError(f"config.loop.max_refill_rounds={self.max_refill_rounds} refills the "
                       "batch with informative groups, which needs "
                       "config.loop.filter_zero_advantage=True; set one or the other.")


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
  """Training options of one model (= config.training keys).

  Attributes:
    optimizer: train/options.OptimizerConfig (a dict of its fields is read into one).
    grpo: train/options.GRPOConfig (used by train(..., "grpo")).
    row_length: tokens per packed row; Policy.train leaves out (and counts) longer samples.
    samples_per_step: samples per optimizer step (a minibatch), counted in minibatch_unit.
    minibatch_unit: what samples_per_step counts in RSFT minibatches: "sample" (one per
      completion of an LLM call) or "trajectory" (every sample of that many episodes, as
      verl's SFT minibatch counts sequences, one per multi-turn trajectory: WHALE's 64).
    num_microbatches: gradient accumulation steps per optimizer step.
    rsft_temperature: temperature of the RSFT log-likelihood (the rollout temperature).
    seed: seeds the minibatch shuffling.
    sampler: sampling/engine_config.EngineConfig (max_slots, steps_per_call,
      max_cache_length, ...).
  """
  optimizer: train_options.OptimizerConfig = train_options.OptimizerConfig()
  grpo: train_options.GRPOConfig = train_options.GRPOConfig()
  row_length: int = 1024
  samples_per_step: int = 64
  minibatch_unit: str = "sample"
  num_microbatches: int = 1
  rsft_temperature: float = 1.0
  seed: int = 0
  sampler: engine_config.EngineConfig = engine_config.EngineConfig()

  def __post_init__(self):
    for name, cls in (("optimizer", train_options.OptimizerConfig),
                      ("grpo", train_options.GRPOConfig), ("sampler", engine_config.EngineConfig)):
      if not isinstance(getattr(self, name), cls):  # a dict of its fields
        object.__setattr__(self, name, typed_config.read(cls, getattr(self, name),
                                                         f"config.training.{name}"))
    if not isinstance(self.row_length, int) or self.row_length < 2:
      raise ValueError(f"config.training.row_length={self.row_length!r} must be an int >= 2.")
    if not isinstance(self.samples_per_step, int) or self.samples_per_step < 1:
      raise ValueError(f"config.training.samples_per_step={self.samples_per_step!r} must be "
                       "a positive int.")
    typed_config.one_of("config.training.minibatch_unit", self.minibatch_unit, MINIBATCH_UNITS)


@dataclasses.dataclass(frozen=True)
class WhaleConfig:
  """config.whale keys."""
  weight_epochs: float = 0.6           # E, per cycle
  total_weight_epochs: float = 4.0     # the weight budget
  budget_rollouts: int = 0             # 0 = no rollout budget
  max_cycles: int = 30
  adaptive: bool = False
  window_epochs: float = 0.2           # adaptive weight phase: window = minimum = patience
  min_iterations: int = 6              # adaptive harness phase, the incoming evaluation included
  patience_iterations: int = 2
  max_iterations: int = 15             # proposer iterations (the incoming evaluation not counted)
  prompt_only: bool = False            # FST: harness search may change prompt strings only

  def __post_init__(self):
    for name in ("weight_epochs", "total_weight_epochs", "window_epochs"):
      if not getattr(self, name) > 0:
        raise ValueError(f"config.whale.{name}={getattr(self, name)!r} must be > 0.")
    for name in ("max_cycles", "min_iterations", "patience_iterations", "max_iterations"):
      typed_config.at_least(f"config.whale.{name}", getattr(self, name), 1)
    typed_config.at_least("config.whale.budget_rollouts", self.budget_rollouts, 0)


@dataclasses.dataclass(frozen=True)
class VaceConfig:
  """config.vace keys (schedule: algorithms/vace.py's alternate, harness_only, harness_first
  or rl_only; edit_scope: what a harness candidate may change, search/edit_scope.py:
  "guidance", the paper's skills and execution guidance, or "any")."""
  num_cycles: int = 4
  block_steps: int = 10
  gated: bool = True
  budget_rollouts: int = 0
  schedule: str = "alternate"
  edit_scope: str = "guidance"

  def __post_init__(self):
    typed_config.one_of("config.vace.schedule", self.schedule,
            ("alternate", "harness_only", "harness_first", "rl_only"))
    typed_config.one_of("config.vace.edit_scope", self.edit_scope, edit_scope.SCOPES)
    typed_config.at_least("config.vace.num_cycles", self.num_cycles, 1)
    typed_config.at_least("config.vace.block_steps", self.block_steps, 1)
    typed_config.at_least("config.vace.budget_rollouts", self.budget_rollouts, 0)


@dataclasses.dataclass(frozen=True)
class BaselineConfig:
  """config.baseline keys."""
  total_weight_epochs: float = 4.0
  search_iterations: int = 40
  budget_rollouts: int = 0
  weight_fraction: float = 0.5   # stagewise / sia: share of budget_rollouts for the weights
  weight_update: str = "rsft"    # or "grpo"

  def __post_init__(self):
    if not self.total_weight_epochs > 0:
      raise ValueError(f"config.baseline.total_weight_epochs={self.total_weight_epochs!r} "
                       "must be > 0.")
    typed_config.at_least("config.baseline.search_iterations", self.search_iterations, 1)
    typed_config.at_least("config.baseline.budget_rollouts", self.budget_rollouts, 0)
    if not 0 <= self.weight_fraction <= 1:
      raise ValueError(f"config.baseline.weight_fraction={self.weight_fraction!r} must be in "
                       "[0, 1].")
    typed_config.one_of("config.baseline.weight_update", self.weight_update, WEIGHT_UPDATES)


@dataclasses.dataclass(frozen=True)
class HarnessLearningConfig:
  """config.harness_learning keys (the module docstring tells how each is used).

  Attributes:
    kind: "patch" (SEARCH/REPLACE blocks; Reasoning Gym) or "program" (whole programs;
      multi-hop QA).
    proposer_model, proposer_tokenizer, proposer_training: the proposer (a sections.ModelSection, a
      tokenizer name, a PolicyConfig); empty (None): the solver's.
    proposer_sampling: the SamplingParams of proposer replies.
    teachers: SearchSections (config.search layout; not the coding agents) that write
      demonstrations.
    sft_domains, grpo_domains: training domains (names, built with config.domain's seed and
      split_sizes, or registry.DomainSections; empty: run.domain).
    demonstration_contexts, teacher_candidates, sft_epochs: the demonstrations and SFT.
    grpo_steps, contexts_per_step, num_candidates: GRPO steps, contexts per step, K.
    diagnostic_size, scoring_size: tasks of a training context (weight split).
    multi_step: carry improving candidates forward as later contexts' current harness.
    selection_rules, strict_rounds, best_of_rounds, best_of_candidates: test-time rounds.
      "oracle" (best_of_candidates candidates from the seed, the best by test mean: the
      paper's test-selected oracle best-of-8) and "single_step" (single_step_candidates
      independent candidates from the seed, their mean test score: the paper's 80
      single-step candidates) read the test split and are reported beside the others.
    single_step_candidates: candidates of the single_step protocol.
    fixed_harnesses: seed harness names (tasks/*/seed_harnesses) evaluated on the test split
      beside the seed, unchanged (the paper's fixed hand-written Python tool loop on RG:
      "reasoning_gym_tool_loop").
    adaptation_diagnostic_size: 0 = diagnose on the scoring tasks, else per-round draws
      from the validation split.
    adapt_stages: after which of "base", "sft", "grpo" to adapt.
    context_budget_tokens: the proposer context's size, in proposer tokens.
    reward: reward_lib.RewardConfig fields (the executability bonus).
    search_answers: what of the diagnostic tasks' references the execution reports show,
      one of SEARCH_ANSWER_MODES ("answers_and_documents": the paper's reports, with gold
      answers and supporting documents); never for validation or test tasks.
  """
  kind: str = "patch"
  proposer_model: sections.ModelSection | None = None
  proposer_tokenizer: str = ""
  proposer_training: PolicyConfig | None = None
  proposer_sampling: sampling_api.SamplingParams = sampling_api.SamplingParams(
      max_tokens=4096, temperature=1.0)
  teachers: tuple[sections.SearchSection, ...] = (sections.SearchSection(proposer="edit_library"),)
  sft_domains: tuple[str | registry.DomainSection, ...] = ()
  grpo_domains: tuple[str | registry.DomainSection, ...] = ()
  demonstration_contexts: int = 32
  teacher_candidates: int = 8
  sft_epochs: int = 2
  grpo_steps: int = 100
  contexts_per_step: int = 4
  num_candidates: int = 8              # K replies per GRPO context
  diagnostic_size: int = 8
  scoring_size: int = 16
  multi_step: bool = False
  selection_rules: tuple = ("strict", "best_of")
  strict_rounds: int = 5
  best_of_rounds: int = 10
  best_of_candidates: int = 8
  single_step_candidates: int = 80
  fixed_harnesses: tuple = ()
  adaptation_diagnostic_size: int = 0
  adapt_stages: tuple = ("grpo",)
  context_budget_tokens: int = 16_000
  reward: dict = dataclasses.field(default_factory=dict)
  search_answers: str = "answers_and_documents"  # = archive_view.SEARCH_ANSWERS_BY_RECIPE's

  def __post_init__(self):
    key_path = "config.harness_learning"
    if isinstance(self.proposer_training, dict):  # {}: the solver's
      object.__setattr__(self, "proposer_training", typed_config.read(
          PolicyConfig, self.proposer_training, f"{key_path}.proposer_training")
                         if self.proposer_training else None)
    if isinstance(self.proposer_model, dict):  # {}: the solver's
      object.__setattr__(self, "proposer_model", typed_config.read(
          sections.ModelSection, self.proposer_model, f"{key_path}.proposer_model")
                         if self.proposer_model else None)
    if isinstance(self.proposer_sampling, dict):
      object.__setattr__(self, "proposer_sampling", typed_config.read(
          sampling_api.SamplingParams, self.proposer_sampling, f"{key_path}.proposer_sampling"))
    typed_config.one_of("config.harness_learning.search_answers", self.search_answers,
                        SEARCH_ANSWER_MODES)
    for name in ("teachers", "sft_domains", "grpo_domains", "selection_rules", "adapt_stages",
                 "fixed_harnesses"):
      value = getattr(self, name)
      single = isinstance(value, (str, dict))
      object.__setattr__(self, name, (value,) if single else tuple(value))
    for name in ("teachers", "sft_domains", "grpo_domains"):  # dicts of direct construction
      object.__setattr__(self, name, typed_config.read(
          typing.get_type_hints(HarnessLearningConfig)[name], getattr(self, name),
          f"{key_path}.{name}"))
    for index, teacher in enumerate(self.teachers):
      if teacher.proposer in ("agentic", "cli_agent"):
        raise ValueError(f"{key_path}.teachers[{index}].proposer={teacher.proposer!r}: a "
                         "teacher answers one revision context without a search archive; use "
                         "'edit_library', 'in_process' or 'openai' (the coding agents propose "
                         "in config.search).")
    for name in ("sft_domains", "grpo_domains"):
      for index, entry in enumerate(getattr(self, name)):
        if isinstance(entry, str):
          registry.check_name(entry, f"{key_path}.{name}[{index}]")
    if self.kind not in reward_lib.KINDS:
      raise ValueError(f"config.harness_learning.kind={self.kind!r}; use 'patch' "
                       "(SEARCH/REPLACE blocks) or 'program' (whole programs).")
    for rule in self.selection_rules:
      if rule not in SELECTION_RULES:
        raise ValueError(f"config.harness_learning.selection_rules has {rule!r}; use "
                         f"{SELECTION_RULES}.")
    for stage in self.adapt_stages:
      if stage not in STAGES:
        raise ValueError(f"config.harness_learning.adapt_stages has {stage!r}; use stages "
                         f"of {STAGES}.")
    if "sft" in self.adapt_stages and not self.sft_enabled:
      raise ValueError("config.harness_learning.adapt_stages asks to adapt after SFT, but SFT "
                       "is off (no teachers or demonstration_contexts=0); drop 'sft' from "
                       "adapt_stages or configure teachers.")
    if "grpo" in self.adapt_stages and self.grpo_steps < 1:
      raise ValueError("config.harness_learning.adapt_stages asks to adapt after GRPO, but "
                       "grpo_steps=0; drop 'grpo' from adapt_stages or set grpo_steps.")
    if self.num_candidates < 2 and self.grpo_steps:
      raise ValueError(f"config.harness_learning.num_candidates={self.num_candidates}; GRPO "
                       "compares candidates within a group, so use at least 2 (the paper: 8).")
    if self.scoring_size < 1:
      raise ValueError(f"config.harness_learning.scoring_size={self.scoring_size} must be >= "
                       "1.")
    typed_config.at_least("config.harness_learning.single_step_candidates",
                          self.single_step_candidates, 1)
    for name in self.fixed_harnesses:
      if name not in seed_harnesses.NAMES:
        raise ValueError(f"config.harness_learning.fixed_harnesses has {name!r}; use seed "
                         f"harness names: {', '.join(seed_harnesses.NAMES)}.")

  @property
  def sft_enabled(self):
    return bool(self.teachers) and self.demonstration_contexts > 0

  @property
  def rewards(self):
    return reward_lib.RewardConfig(**self.reward)


@dataclasses.dataclass(frozen=True)
class WarmStartConfig:
  """config.warm_start keys."""
  world_seeds: tuple = (1000, 48)        # (first seed, number of worlds) to train on
  eval_world_seeds: tuple = (2000, 2)
  name_worlds: int = 400
  vocab_size: int = 4096
  steps: int = 3000
  eval_every: int = 250
  eval_questions: int = 100
  teacher_max_turns: int = 3
  teacher_max_doc_tokens: int = 64
  # Several teacher harnesses, ((max_turns, max_doc_tokens, share of each batch), ...); when
  # empty, the one (teacher_max_turns, teacher_max_doc_tokens) teacher fills every batch.
  teachers: tuple = ()
  # A solver directory (another warm start's workdir/solver) whose weights and tokenizer this
  # one starts from, instead of random weights and a newly trained tokenizer.
  init_solver: str = ""
  seed: int = 0

  def __post_init__(self):
    for index, teacher in enumerate(self.teachers):
      key = f"config.warm_start.teachers[{index}]"
      if len(teacher) != 3:
        raise ValueError(f"{key}={teacher!r}: give (max_turns, max_doc_tokens, share).")
      typed_config.at_least(f"{key} max_turns", teacher[0], 1)
      typed_config.at_least(f"{key} max_doc_tokens", teacher[1], 1)
      if not 0 < teacher[2] <= 1:
        raise ValueError(f"{key} share={teacher[2]!r}: give a share of each batch in (0, 1].")
    total = sum(teacher[2] for teacher in self.teachers)
    if self.teachers and abs(total - 1) > 1e-6:
      raise ValueError(f"config.warm_start.teachers: the shares sum to {total:g}; make them "
                       "sum to 1.")
    if self.init_solver and not os.path.exists(os.path.join(self.init_solver, "config.json")):
      raise ValueError(f"config.warm_start.init_solver={self.init_solver!r} has no "
                       "config.json; point it at a warm start's workdir/solver.")

  @property
  def teacher_mix(self):
    """((max_turns, max_doc_tokens, share), ...) of the teacher harnesses."""
    return tuple(tuple(t) for t in self.teachers) or (
        (self.teacher_max_turns, self.teacher_max_doc_tokens, 1.0),)
