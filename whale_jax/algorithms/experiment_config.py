"""ExperimentConfig: one experiment config as typed sections, built and checked once, before jax.

  experiment = experiment_config.parse(config, workdir)   # raises ConfigError, one line
  experiment.training.optimizer.learning_rate              # a float, already checked

main.py calls parse() on the ConfigDict before jax starts; experiment.run, builders.build_run,
the recipes and aot.py take the ExperimentConfig and check nothing again. Sections:
  recipe, methods       one of options.RECIPES, "compare" (methods) or "warm_start"
  loop, training, whale, vace, baseline, harness_learning, warm_start   options.py classes
                        (training: PolicyConfig with OptimizerConfig, GRPOConfig, EngineConfig)
  sampling              SamplingParams; eval_sampling: sampling with config.eval_sampling's
                        overrides
  runtime               harness/runtime_config.RuntimeConfig
  model, search, mesh   sections.ModelSection, SearchSection, MeshSection (what builders.py
                        builds from)
  domain                tasks/registry.DomainSection
  tokenizer             a name or path
The sections are read by typed_config (their keys, types and values); config_check.py checks
the paths they name and the workdir. Cross-section rules: a run's model section is a whole
ModelConfig when random (a warm start's vocabulary comes from its tokenizer), and
(check_temperatures) the temperature the loss's log-probabilities use must be the temperature
the rollouts are sampled at.

This module imports no jax.
"""
import dataclasses
from typing import Any

from whale_jax import typed_config
from whale_jax.algorithms import config_check
from whale_jax.algorithms import options
from whale_jax.algorithms import sections
from whale_jax.harness import runtime_config
from whale_jax.models import config as model_config_lib
from whale_jax.sampling import api as sampling_api
from whale_jax.tasks import registry

ConfigError = typed_config.ConfigError
TOP_LEVEL_KEYS = ("recipe", "methods", "model", "tokenizer", "domain", "sampling",
                  "eval_sampling", "training", "loop", "whale", "vace", "baseline",
                  "harness_learning", "search", "runtime", "mesh", "warm_start")
# The recipes that are another's options: recipe -> (the section it runs, options set).
RECIPE_PRESETS = {"whale": ("whale", {}), "whale_adaptive": ("whale", {"adaptive": True}),
                  "fst": ("whale", {"prompt_only": True}), "vace": ("vace", {}),
                  "ungated": ("vace", {"gated": False}),
                  "rl_only": ("vace", {"schedule": "rl_only"}),
                  "vace_harness_only": ("vace", {"schedule": "harness_only"})}
BASELINE_RECIPES = ("weight_only", "harness_only", "stagewise", "sia")
_TYPED = {"loop": options.LoopConfig, "training": options.PolicyConfig,
          "whale": options.WhaleConfig, "vace": options.VaceConfig,
          "baseline": options.BaselineConfig, "harness_learning": options.HarnessLearningConfig,
          "warm_start": options.WarmStartConfig, "runtime": runtime_config.RuntimeConfig,
          "sampling": sampling_api.SamplingParams, "search": sections.SearchSection,
          "mesh": sections.MeshSection}


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """A checked experiment config (module docstring). source: the config as given (plain
  dicts), written to the run's config.json."""
  recipe: str
  methods: tuple[str, ...] = ()
  model: sections.ModelSection | None = None      # None: a warm start without config.model
  tokenizer: str = ""
  domain: registry.DomainSection | None = None   # None: a warm start without config.domain
  sampling: sampling_api.SamplingParams = sampling_api.SamplingParams()
  eval_sampling: sampling_api.SamplingParams = sampling_api.SamplingParams()
  training: options.PolicyConfig = options.PolicyConfig()
  loop: options.LoopConfig = options.LoopConfig()
  whale: options.WhaleConfig = options.WhaleConfig()
  vace: options.VaceConfig = options.VaceConfig()
  baseline: options.BaselineConfig = options.BaselineConfig()
  harness_learning: options.HarnessLearningConfig = options.HarnessLearningConfig()
  warm_start: options.WarmStartConfig = options.WarmStartConfig()
  search: sections.SearchSection = sections.SearchSection()
  runtime: runtime_config.RuntimeConfig = runtime_config.RuntimeConfig()
  mesh: sections.MeshSection = sections.MeshSection()
  source: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

  def recipe_options(self, recipe):
    """The options dataclass recipe runs with (RECIPE_PRESETS applied)."""
    section, preset = RECIPE_PRESETS.get(
        recipe, ("baseline" if recipe in BASELINE_RECIPES else recipe, {}))
    return dataclasses.replace(getattr(self, section), **preset)


def _plain(config):
  return config.to_dict() if hasattr(config, "to_dict") else dict(config)


def _section(config, name):
  value = config.get(name)
  if value is None:
    return {}
  if not isinstance(value, dict):
    raise ConfigError(f"config.{name}={value!r} must be a dict.")
  return value


def _recipes_of(recipe, methods):
  return tuple(methods) if recipe == "compare" else (recipe,)


def check_temperatures(experiment):
  """The temperature of the loss's log-probabilities must equal the sampling temperature of
  the rollouts it trains on: the importance ratio (GRPO) and the likelihood (RSFT) are of the
  sampling distribution only at that temperature (WHALE: logprobs at rollout temperature)."""
  losses = set()
  for recipe in _recipes_of(experiment.recipe, experiment.methods):
    if recipe in ("whale", "whale_adaptive", "fst"):
      losses.add("rsft")
    elif RECIPE_PRESETS.get(recipe, ("",))[0] == "vace":
      losses.add("grpo")
    elif recipe in ("weight_only", "stagewise", "sia"):
      losses.add(experiment.baseline.weight_update)
  sampling = experiment.sampling.temperature
  rule = ("the loss's log-probabilities must be taken at the temperature the rollouts are "
          "sampled at, or the likelihood and importance ratio are of another distribution")
  if "rsft" in losses and experiment.training.rsft_temperature != sampling:
    raise ConfigError(
        f"config.training.rsft_temperature={experiment.training.rsft_temperature!r} differs "
        f"from config.sampling.temperature={sampling!r}: {rule}; set both to the same value.")
  if "grpo" in losses and experiment.training.grpo.temperature != sampling:
    raise ConfigError(
        f"config.training.grpo.temperature={experiment.training.grpo.temperature!r} differs "
        f"from config.sampling.temperature={sampling!r}: {rule}; set both to the same value.")
  learning = experiment.harness_learning
  if experiment.recipe == "harness_learning" and learning.grpo_steps:
    training = learning.proposer_training or experiment.training
    where = ("config.harness_learning.proposer_training" if learning.proposer_training
             else "config.training")
    if training.grpo.temperature != learning.proposer_sampling.temperature:
      raise ConfigError(
          f"{where}.grpo.temperature={training.grpo.temperature!r} differs from "
          "config.harness_learning.proposer_sampling.temperature="
          f"{learning.proposer_sampling.temperature!r}: {rule}; set both to the same value.")


def _check_model(model, key_path, complete=True):
  """A model section a run can build: a "random" one is a whole ModelConfig (complete=False,
  a warm start's, whose vocabulary comes from the tokenizer it trains: any part of one); an
  "hf" one's checkpoint exists."""
  if model.source == "random" and complete:
    typed_config.read(model_config_lib.ModelConfig, model.model_fields, key_path)
  config_check.check_model_path(model, key_path)


def _check_harness_learning(learning, key_path="config.harness_learning"):
  typed_config.read(learning.rewards.__class__, dict(learning.reward), f"{key_path}.reward")
  if learning.proposer_model is not None:
    _check_model(learning.proposer_model, f"{key_path}.proposer_model")
  if learning.proposer_tokenizer:
    config_check.check_tokenizer(learning.proposer_tokenizer, f"{key_path}.proposer_tokenizer")
  for index, teacher in enumerate(learning.teachers):
    config_check.check_search_paths(teacher, f"{key_path}.teachers[{index}]")


def parse(config, workdir):
  """The ExperimentConfig of a ConfigDict (or dict); raises ConfigError, one line naming the
  full key and the fix, for anything a run cannot start with (module docstring)."""
  if isinstance(config, ExperimentConfig):
    return config
  plain = _plain(config)
  config_check.check_keys(plain, TOP_LEVEL_KEYS, "config")
  recipe = plain.get("recipe")
  config_check.check_choice(recipe, options.RECIPES + ("compare", "warm_start"),
                            "config.recipe", "recipe")
  methods = ()
  if recipe == "compare":
    methods = plain.get("methods")
    if not isinstance(methods, (tuple, list)) or not methods:
      raise ConfigError(f"config.methods={methods!r}; config.recipe='compare' needs a tuple "
                        f"of recipes, e.g. ('whale', 'weight_only').")
    for index, method in enumerate(methods):
      config_check.check_choice(method, options.RECIPES, f"config.methods[{index}]", "recipe")
    methods = tuple(methods)
  typed = {}
  for name, cls in _TYPED.items():
    section = dict(_section(plain, name))
    if name == "harness_learning":
      for empty in ("proposer_training", "proposer_model"):  # {}: the solver's
        if not section.get(empty, True):
          section.pop(empty)
    typed[name] = typed_config.read(cls, section, f"config.{name}")
  if plain.get("harness_learning"):
    _check_harness_learning(typed["harness_learning"])
  eval_overrides = _section(plain, "eval_sampling")
  config_check.check_keys(eval_overrides, {f.name for f in dataclasses.fields(
      sampling_api.SamplingParams)}, "config.eval_sampling")
  eval_sampling = typed_config.read(sampling_api.SamplingParams, {
      **{f.name: getattr(typed["sampling"], f.name)
         for f in dataclasses.fields(sampling_api.SamplingParams)}, **eval_overrides},
                                    "config.eval_sampling")
  if recipe != "warm_start":
    for name in ("model", "domain"):
      if name not in plain:
        raise ConfigError(f"config.{name} is missing; every recipe but warm_start needs it "
                          "(see configs/whale.py).")
  model, domain = (typed_config.read(kind, _section(plain, name), f"config.{name}")
                   if name in plain else None
                   for name, kind in (("model", sections.ModelSection),
                                      ("domain", registry.DomainSection)))
  if model is not None:
    _check_model(model, "config.model", complete=recipe != "warm_start")
  tokenizer = plain.get("tokenizer", "")
  if recipe != "warm_start":
    config_check.check_tokenizer(tokenizer)
  config_check.check_search_paths(typed["search"])
  config_check.check_workdir(workdir)
  experiment = ExperimentConfig(recipe=recipe, methods=methods, model=model, tokenizer=tokenizer,
                                domain=domain, eval_sampling=eval_sampling, source=plain,
                                **typed)
  if recipe != "warm_start":
    check_temperatures(experiment)
  return experiment
