"""The config boundary: a bad experiment config is refused in one line, before anything heavy.

  config_check.check(config, workdir)     # raises ConfigError, or returns None
  config_check.check_keys(section, allowed, "config.training.optimizer")

ConfigError's message is one line: the full key path, the bad value, what is allowed and,
for a misspelt name, a did-you-mean. main.py prints it and exits with status 2, without a
traceback. This module imports no jax (nor anything that does), so python -m whale_jax.main
refuses a bad config in about a second; builders.check_sections then checks the sections
whose fields live in jax-importing modules (sampling, model, optimizer, GRPO, sampler,
runtime, domain options, proposer options) once those are imported, still before the model
loads, a sandbox starts or the workdir is touched.

Checked here:
  - the top-level keys (TOP_LEVEL_KEYS) and config.recipe / config.methods (options.RECIPES);
  - every section that is one of the options dataclasses (loop, training, whale, vace,
    baseline, harness_learning with its reward, warm_start): unknown keys, the type of each
    value (an int where an int belongs, ...), and each class's own range checks;
  - config.model: source, and that a checkpoint path exists; config.tokenizer;
  - config.domain.name (and harness_learning's training domains) against the domain registry;
  - config.search.proposer (and each harness_learning teacher's) against options.PROPOSERS;
    the agentic and CLI-agent keys (options.AGENTIC_KEYS, CLI_AGENT_KEYS, AGENT_BUDGET_MINIMA);
  - config.runtime.max_episode_tokens and enable_thinking values;
  - config.mesh keys and types; the workdir (not a URL, not a file).
"""
import ast
import dataclasses
import difflib
import os

from whale_jax.algorithms import options
from whale_jax.search import connect_proxy
from whale_jax.search import edit_mechanisms
from whale_jax.search import reward as reward_lib

TOP_LEVEL_KEYS = ("recipe", "methods", "model", "tokenizer", "domain", "sampling",
                  "eval_sampling", "training", "loop", "whale", "vace", "baseline",
                  "harness_learning", "search", "runtime", "mesh", "warm_start")
SECTIONS = {"loop": options.LoopConfig, "training": options.PolicyConfig,
            "whale": options.WhaleConfig, "vace": options.VaceConfig,
            "baseline": options.BaselineConfig,
            "harness_learning": options.HarnessLearningConfig,
            "warm_start": options.WarmStartConfig}
MODEL_SOURCES = ("random", "hf", "embedded")
MESH_KEYS = ("data", "fsdp", "tensor", "num_devices")
NAMED_TOKENIZERS = ("byte", "embedded")
REGISTRY = os.path.join(os.path.dirname(os.path.dirname(__file__)), "tasks", "registry.py")


class ConfigError(ValueError):
  """A config value a run cannot start with; the message is one line that says what to do."""


def did_you_mean(word, allowed):
  """' (did you mean 'x'?)' for the closest allowed word, or ''."""
  close = difflib.get_close_matches(str(word), [str(a) for a in allowed], n=1, cutoff=0.6)
  return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(section, allowed, key_path):
  """Raises ConfigError for the first key of section that is not in allowed."""
  for key in section:
    if key not in allowed:
      raise ConfigError(f"{key_path}.{key} is not a known key{did_you_mean(key, allowed)}; "
                        f"{key_path} takes {', '.join(sorted(allowed))}.")


def check_choice(value, allowed, key_path, what="value"):
  if value not in allowed:
    raise ConfigError(f"{key_path}={value!r} is not a known {what}"
                      f"{did_you_mean(value, allowed)}; use one of "
                      f"{', '.join(map(str, allowed))}.")


_TYPES = {int: "an int", float: "a number", bool: "True or False", str: "a string",
          tuple: "a tuple or list", dict: "a dict"}


def _type_ok(value, expected):
  if expected is bool:
    return isinstance(value, bool)
  if expected is int:
    return isinstance(value, int) and not isinstance(value, bool)
  if expected is float:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if expected is tuple:
    return isinstance(value, (tuple, list))
  if expected is dict:
    return isinstance(value, dict)
  return isinstance(value, expected) if isinstance(expected, type) else True


def check_types(section, fields_and_types, key_path):
  """Raises ConfigError for the first value whose type is not its field's."""
  for key, expected in fields_and_types.items():
    if key in section and not _type_ok(section[key], expected):
      value = section[key]
      raise ConfigError(f"{key_path}.{key}={value!r} is {type(value).__name__}; it must be "
                        f"{_TYPES.get(expected, getattr(expected, '__name__', expected))}.")


def build_options(cls, section, key_path):
  """cls(**section) with unknown keys, wrong types and cls's own checks as ConfigError."""
  fields = {field.name: field.type for field in dataclasses.fields(cls)}
  check_keys(section, fields, key_path)
  check_types(section, fields, key_path)
  try:
    return cls(**section)
  except (TypeError, ValueError) as error:
    raise ConfigError(_one_line(error, key_path)) from None


def _one_line(error, key_path):
  message = " ".join(str(error).split())
  return message if message.startswith("config.") else f"{key_path}: {message}"


def registered_domains():
  """(names of whale_jax.tasks.registry.BUILDERS, the reasoning-gym prefix), read from its
  source so that checking a name imports no domain (and no jax)."""
  with open(REGISTRY, encoding="utf-8") as file:
    tree = ast.parse(file.read())
  names, prefix = (), "reasoning_gym:"
  for node in tree.body:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
      if node.targets[0].id == "BUILDERS" and isinstance(node.value, ast.Dict):
        names = tuple(key.value for key in node.value.keys)
      if node.targets[0].id == "REASONING_GYM_PREFIX":
        prefix = node.value.value
  return names, prefix


def check_domain_name(name, key_path):
  names, prefix = registered_domains()
  if isinstance(name, str) and name.startswith(prefix) and len(name) > len(prefix):
    return
  check_choice(name, names + (prefix + "<dataset>",), key_path, "domain")


def _check_path(path, key_path, what):
  if not isinstance(path, str) or not path:
    raise ConfigError(f"{key_path}={path!r}; it must be the path of {what}.")
  if not os.path.exists(path):
    raise ConfigError(f"{key_path}={path!r} does not exist (looked in {os.getcwd()}); "
                      f"download {what} there or point {key_path} at it.")


def check_model(model, key_path="config.model"):
  source = model.get("source", "random")
  check_choice(source, MODEL_SOURCES, f"{key_path}.source", "model source")
  if source == "hf":
    _check_path(model.get("path"), f"{key_path}.path", "the checkpoint directory")


def check_tokenizer(name, key_path="config.tokenizer"):
  if not isinstance(name, str):
    raise ConfigError(f"{key_path}={name!r}; use 'byte', 'embedded', a tokenizer path, or '' "
                      "for the model directory's own.")
  if name and name not in NAMED_TOKENIZERS:
    _check_path(name, key_path, "the tokenizer")


def check_proposer(search, key_path="config.search"):
  if not isinstance(search, dict):
    raise ConfigError(f"{key_path}={search!r} must be a dict with a 'proposer' key.")
  check_choice(search.get("proposer", "edit_library"), options.PROPOSERS,
               f"{key_path}.proposer", "proposer")
  if search.get("model_path"):
    _check_path(search["model_path"], f"{key_path}.model_path", "the proposer checkpoint")
  kind = search.get("proposer")
  if kind in ("agentic", "cli_agent"):
    _check_agent_proposer(search, kind, key_path)
  if kind in (None, "edit_library") and search.get("mechanisms") is not None:
    try:
      edit_mechanisms.check(search["mechanisms"], f"{key_path}.mechanisms")
    except ValueError as error:
      raise ConfigError(str(error)) from None


def _check_agent_proposer(search, kind, key_path):
  """The keys, types and values of an agentic or CLI-agent search section."""
  allowed = options.AGENTIC_KEYS if kind == "agentic" else options.CLI_AGENT_KEYS
  check_keys(search, allowed, key_path)
  check_types({k: v for k, v in search.items() if v is not None}, allowed, key_path)
  check_choice(search.get("search_answers") or "none", options.SEARCH_ANSWER_MODES,
               f"{key_path}.search_answers", "search_answers mode")
  if search.get("instructions"):
    _check_path(search["instructions"], f"{key_path}.instructions",
                "the steering text file (see whale_jax/search/instructions/)")
  if kind == "agentic":
    backend = search.get("agent_backend", "in_process")
    check_choice(backend, options.AGENT_BACKENDS, f"{key_path}.agent_backend", "agent backend")
    if backend == "openai":
      for required in ("base_url", "model"):
        if not search.get(required):
          raise ConfigError(f"{key_path}.{required} is missing; agent_backend='openai' needs "
                            "base_url (e.g. 'http://127.0.0.1:8000/v1') and model.")
  budgets = search.get("agent_budgets", {})
  check_keys(budgets, options.AGENT_BUDGET_MINIMA, f"{key_path}.agent_budgets")
  check_types(budgets, dict.fromkeys(options.AGENT_BUDGET_MINIMA, int),
              f"{key_path}.agent_budgets")
  for name, minimum in options.AGENT_BUDGET_MINIMA.items():
    if budgets.get(name, minimum) < minimum:
      raise ConfigError(f"{key_path}.agent_budgets.{name}={budgets[name]!r} must be >= "
                        f"{minimum}.")
  if kind == "agentic":
    return
  check_choice(search.get("session_per", "candidate"), options.SESSION_PER,
               f"{key_path}.session_per", "session_per")
  command = search.get("command")
  if not command or not (isinstance(command, str) or (
      isinstance(command, (tuple, list)) and all(isinstance(p, str) for p in command))):
    raise ConfigError(f"{key_path}.command={command!r}; proposer='cli_agent' needs the agent's "
                      "command line, a string or a list of strings (e.g. ['claude', '-p', "
                      "'{prompt}']).")
  for name in ("wall_clock_seconds", "max_cost_usd"):
    value = search.get(name)
    if value is not None and not value > 0:
      raise ConfigError(f"{key_path}.{name}={value!r} must be > 0.")
  endpoint = search.get("endpoint")
  if endpoint and not (len(endpoint) == 2 and isinstance(endpoint[0], str) and
                       _type_ok(endpoint[1], int)):
    raise ConfigError(f"{key_path}.endpoint={endpoint!r} must be (host, port), e.g. "
                      "('127.0.0.1', 8000), or () for no network.")
  try:
    connect_proxy.parse_allow_list(search.get("https_allow") or ())
  except ValueError as error:
    raise ConfigError(f"{key_path}.https_allow: {error}; () keeps the proxy off.") from None
  for index, path in enumerate(search.get("read_only_paths", ())):
    _check_path(path, f"{key_path}.read_only_paths[{index}]", "a path the agent program needs")


def check_workdir(workdir):
  if not workdir or not isinstance(workdir, str):
    raise ConfigError(f"--workdir={workdir!r}; give the directory the run writes to.")
  if "://" in workdir:
    raise ConfigError(f"--workdir={workdir!r} is a URL, but the run directory is written with "
                      "ordinary file calls; mount the bucket on every host (e.g. "
                      "launch/tpu_pod.sh mount) and pass the mounted path.")
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise ConfigError(f"--workdir={workdir!r} is a file, not a directory; pass a new or "
                      "existing directory (a restart with the same directory resumes).")
  parent = os.path.dirname(os.path.abspath(workdir))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise ConfigError(f"--workdir={workdir!r} lies under {parent!r}, which is a file; pass "
                      "a directory path.")


def _plain(config):
  return config.to_dict() if hasattr(config, "to_dict") else dict(config)


def check(config, workdir):
  """Checks what can be checked without jax (module docstring); raises ConfigError."""
  config = _plain(config)
  check_keys(config, TOP_LEVEL_KEYS, "config")
  recipe = config.get("recipe")
  check_choice(recipe, options.RECIPES + ("compare", "warm_start"), "config.recipe", "recipe")
  if recipe == "compare":
    methods = config.get("methods")
    if not isinstance(methods, (tuple, list)) or not methods:
      raise ConfigError(f"config.methods={methods!r}; config.recipe='compare' needs a tuple "
                        f"of recipes, e.g. ('whale', 'weight_only').")
    for index, method in enumerate(methods):
      check_choice(method, options.RECIPES, f"config.methods[{index}]", "recipe")
  for name, cls in SECTIONS.items():
    if name in config:
      if not isinstance(config[name], dict):
        raise ConfigError(f"config.{name}={config[name]!r} must be a dict of "
                          f"{cls.__name__} fields.")
      built = build_options(cls, config[name], f"config.{name}")
      if name == "harness_learning":
        _check_harness_learning(built)
  for name in ("model", "domain", "search", "runtime", "mesh", "sampling", "eval_sampling"):
    if name in config and not isinstance(config[name], dict):
      raise ConfigError(f"config.{name}={config[name]!r} must be a dict.")
  if "model" in config:
    check_model(config["model"])
  if recipe != "warm_start":
    for name in ("model", "domain"):
      if name not in config:
        raise ConfigError(f"config.{name} is missing; every recipe but warm_start needs it "
                          "(see configs/whale.py).")
    check_tokenizer(config.get("tokenizer", ""))
    if "name" not in config["domain"]:
      raise ConfigError("config.domain.name is missing; name the domain (e.g. 'searchqa').")
    check_domain_name(config["domain"]["name"], "config.domain.name")
    check_proposer(config.get("search", {}))
  _check_runtime(config.get("runtime", {}))
  mesh = config.get("mesh", {})
  check_keys(mesh, MESH_KEYS, "config.mesh")
  check_types(mesh, dict.fromkeys(MESH_KEYS, int), "config.mesh")
  check_workdir(workdir)


def _check_runtime(runtime):
  """The values of the runtime keys the recipes add: the per-episode token budget and the
  chat template's thinking switch (their names are checked with the other runtime keys)."""
  budget = runtime.get("max_episode_tokens", 0)
  if not _type_ok(budget, int) or budget < 0:
    raise ConfigError(f"config.runtime.max_episode_tokens={budget!r} must be an int >= 0: "
                      "completion tokens per episode over all its llm calls (0 = no budget; "
                      "the papers use 8192 or 16384).")
  thinking = runtime.get("enable_thinking")
  if thinking is not None and not isinstance(thinking, bool):
    raise ConfigError(f"config.runtime.enable_thinking={thinking!r} must be True, False or "
                      "None (the chat template's default).")


def _check_harness_learning(hl_config):
  key_path = "config.harness_learning"
  build_options(reward_lib.RewardConfig, dict(hl_config.reward), f"{key_path}.reward")
  if hl_config.proposer_model:
    check_model(hl_config.proposer_model, f"{key_path}.proposer_model")
  if hl_config.proposer_tokenizer:
    check_tokenizer(hl_config.proposer_tokenizer, f"{key_path}.proposer_tokenizer")
  if hl_config.proposer_training:
    build_options(options.PolicyConfig, dict(hl_config.proposer_training),
                  f"{key_path}.proposer_training")
  for index, teacher in enumerate(hl_config.teachers):
    check_proposer(teacher, f"{key_path}.teachers[{index}]")
    if isinstance(teacher, dict) and teacher.get("proposer") in ("agentic", "cli_agent"):
      raise ConfigError(f"{key_path}.teachers[{index}].proposer={teacher['proposer']!r}: a "
                        "teacher answers one revision context without a search archive; use "
                        "'edit_library', 'in_process' or 'openai' (the coding agents propose "
                        "in config.search).")
  for name in ("sft_domains", "grpo_domains"):
    for index, entry in enumerate(getattr(hl_config, name)):
      domain = entry.get("name") if isinstance(entry, dict) else entry
      check_domain_name(domain, f"{key_path}.{name}[{index}]")
