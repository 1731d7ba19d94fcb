"""The checks of the config sections that stay plain values (model, tokenizer, domain, search,
mesh) and of the workdir: each raises ConfigError, one line naming the full key path and the
fix. experiment_config.parse calls them while it builds the typed ExperimentConfig, once, before
jax starts; the typed sections (loop, training, sampling, runtime, the recipes' options) are
checked by typed_config.read and their classes' own __post_init__.

  config_check.check_domain({"name": "searchqa", "split_sizes": {...}}, "config.domain")
  config_check.check_proposer({"proposer": "openai", ...}, "config.search")

Every rule is read from the module it belongs to, all importable without jax: the domain
names and builders' keyword arguments (tasks/registry.py), the split sizes
(tasks/splits.check_sizes), the judge's options (tasks/judge.py), the proposers' options
(search/: edit_mechanisms, agent_tools.AgentBudgets, agentic_proposer, model_proposer,
cli_agent.SESSION_PER, connect_proxy, archive_view.SEARCH_ANSWER_MODES), ModelConfig's fields.
"""
import dataclasses
import inspect
import os

from whale_jax import typed_config
from whale_jax.models import config as model_config_lib
from whale_jax.sampling import api as sampling_api
from whale_jax.sampling import openai_client
from whale_jax.search import agent_tools
from whale_jax.search import agentic_proposer
from whale_jax.search import archive_view
from whale_jax.search import cli_agent
from whale_jax.search import connect_proxy
from whale_jax.search import edit_mechanisms
from whale_jax.search import model_proposer
from whale_jax.tasks import judge as judge_lib
from whale_jax.tasks import registry
from whale_jax.tasks import splits as splits_lib

ConfigError = typed_config.ConfigError
did_you_mean = typed_config.did_you_mean
check_keys = typed_config.check_keys
check_choice = typed_config.check_choice

MODEL_SOURCES = ("random", "hf", "embedded")
# Keys of a "hf" or "embedded" model section besides ModelConfig fields (models/hf.load_hf's
# arguments but mesh and rules; tests/algorithms/test_builders.py holds them to its signature).
HF_MODEL_KEYS = ("source", "path", "dtype", "compute_dtype")
MESH_KEYS = ("data", "fsdp", "tensor", "num_devices")
NAMED_TOKENIZERS = ("byte", "embedded")
PROPOSERS = ("edit_library", "in_process", "openai", "agentic", "cli_agent")
AGENT_BACKENDS = ("in_process", "openai")   # the chat client of proposer="agentic"
# The search section's keys of the coding-agent proposers and their types (builders.py's
# _build_agent reads them and says what each does).
AGENTIC_KEYS = {"proposer": str, "agent_backend": str, "base_url": str, "model": str,
                "api_key_env": str, "timeout_seconds": float, "max_retries": int,
                "max_consecutive_failures": int, "sampling": dict, "agent_budgets": dict,
                "run_tool": bool, "search_answers": str, "instructions": str, "name": str,
                "seed": int}
CLI_AGENT_KEYS = {"proposer": str, "command": object, "wall_clock_seconds": float,
                  "max_cost_usd": float, "endpoint": tuple, "https_allow": tuple,
                  "read_only_paths": tuple, "pass_environment": tuple, "environment": dict,
                  "search_answers": str, "instructions": str, "name": str, "seed": int,
                  "session_per": str, "run_tool": bool, "agent_budgets": dict}


def check_types(section, fields_and_types, key_path):
  """Raises ConfigError for the first value whose type is not its field's."""
  for key, expected in fields_and_types.items():
    if key in section:
      typed_config.read(expected, section[key], f"{key_path}.{key}")


def _parameters(function, skip=()):
  """(names of function's keyword parameters, whether it also takes **kwargs)."""
  parameters = inspect.signature(function).parameters.values()
  names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
  return names - set(skip), any(p.kind == p.VAR_KEYWORD for p in parameters)


def check_call(function, section, key_path, skip=(), extra=()):
  """ConfigError for a key of section that function (or extra) does not take."""
  names, takes_any = _parameters(function, skip)
  if not takes_any:
    check_keys(section, names | set(extra), key_path)


def _check_path(path, key_path, what):
  if not isinstance(path, str) or not path:
    raise ConfigError(f"{key_path}={path!r}; it must be the path of {what}.")
  if not os.path.exists(path):
    raise ConfigError(f"{key_path}={path!r} does not exist (looked in {os.getcwd()}); "
                      f"download {what} there or point {key_path} at it.")


def check_model(model, key_path="config.model", complete=True):
  """A model section: source "random" (ModelConfig fields + seed), "hf" (path, dtype, ...
  and ModelConfig overrides) or "embedded". complete=False (a warm start's, whose
  vocabulary comes from the tokenizer it trains) checks the source only."""
  model = dict(model)
  source = model.get("source", "random")
  check_choice(source, MODEL_SOURCES, f"{key_path}.source", "model source")
  fields = {field.name for field in dataclasses.fields(model_config_lib.ModelConfig)}
  if not complete:
    return
  if source == "random":
    seed = model.pop("seed", 0)
    model.pop("source", None)
    typed_config.read(int, seed, f"{key_path}.seed")
    typed_config.read(model_config_lib.ModelConfig, model, key_path)
    return
  check_keys(model, fields | set(HF_MODEL_KEYS), key_path)
  if source == "hf":
    _check_path(model.get("path"), f"{key_path}.path", "the checkpoint directory")


def check_tokenizer(name, key_path="config.tokenizer"):
  if not isinstance(name, str):
    raise ConfigError(f"{key_path}={name!r}; use 'byte', 'embedded', a tokenizer path, or '' "
                      "for the model directory's own.")
  if name and name not in NAMED_TOKENIZERS:
    _check_path(name, key_path, "the tokenizer")


def check_domain_name(name, key_path):
  prefix = registry.REASONING_GYM_PREFIX
  if isinstance(name, str) and name.startswith(prefix) and len(name) > len(prefix):
    return
  check_choice(name, tuple(registry.BUILDERS) + (prefix + "<dataset>",), key_path, "domain")


def check_domain(domain, key_path="config.domain"):
  """A domain section: name + the builder's keyword arguments (registry.py), split_sizes
  (splits.check_sizes) and, with verifier="judge", a judge section (judge.openai_judge)."""
  if not isinstance(domain, dict):
    raise ConfigError(f"{key_path}={domain!r} must be a dict.")
  domain = dict(domain)
  if "name" not in domain:
    raise ConfigError(f"{key_path}.name is missing; name the domain (e.g. 'searchqa').")
  name = domain.pop("name")
  check_domain_name(name, f"{key_path}.name")
  builder = (registry.reasoning_gym_domain if name.startswith(registry.REASONING_GYM_PREFIX)
             else registry.BUILDERS[name])
  check_call(builder, domain, key_path, skip=("dataset",))
  if domain.get("split_sizes") is not None:
    sizes = domain["split_sizes"]
    if not isinstance(sizes, dict):
      raise ConfigError(f"{key_path}.split_sizes={sizes!r} must be a dict of split sizes "
                        f"({', '.join(splits_lib.SPLIT_NAMES)}).")
    try:
      splits_lib.check_sizes(sizes)
    except ValueError as error:
      raise ConfigError(f"{key_path}.{' '.join(str(error).split())}") from None
  if isinstance(domain.get("judge"), dict):
    check_call(judge_lib.openai_judge, domain["judge"], f"{key_path}.judge")
    constrained = domain["judge"].get("constrained", "auto")
    if constrained not in judge_lib.CONSTRAINED:
      raise ConfigError(
          f"{key_path}.judge.constrained={constrained!r}; use 'auto' (constrained choice where "
          "the endpoint takes it, free text elsewhere), 'always' or 'never'.")
  elif domain.get("verifier") == "judge":
    raise ConfigError(
        f"{key_path}.verifier='judge' needs {key_path}.judge = dict(base_url=..., model=...) "
        "(tasks.judge.openai_judge options), or use verifier='exact_match'.")


def check_proposer(search, key_path="config.search"):
  """A search section (or a Harness Learning teacher): builders.build_proposer's layout."""
  if not isinstance(search, dict):
    raise ConfigError(f"{key_path}={search!r} must be a dict with a 'proposer' key.")
  search = dict(search)
  context_tokens = search.pop("context_tokens", None)   # any proposer: the context's budget
  if context_tokens is not None and (isinstance(context_tokens, bool) or
                                     not isinstance(context_tokens, int) or context_tokens < 1):
    raise ConfigError(f"{key_path}.context_tokens={context_tokens!r} must be a positive int: "
                      "the tokens of the proposer context rendered from the archive (default "
                      "16000).")
  max_lines = search.pop("max_lines", None)   # any proposer: the candidates' line limit
  if max_lines is not None and (isinstance(max_lines, bool) or not isinstance(max_lines, int)
                                or max_lines < 1):
    raise ConfigError(f"{key_path}.max_lines={max_lines!r} must be a positive int: the most "
                      "lines a candidate harness may have (default 200).")
  kind = search.get("proposer", "edit_library")
  check_choice(kind, PROPOSERS, f"{key_path}.proposer", "proposer")
  sampling = search.get("sampling") or {}
  if kind in ("agentic", "cli_agent"):
    _check_agent_proposer(search, kind, key_path)
    return
  if kind == "edit_library":
    check_keys(search, {"proposer", "seed", "mechanisms"}, key_path)
    if search.get("mechanisms") is not None:
      try:
        edit_mechanisms.check(search["mechanisms"], f"{key_path}.mechanisms")
      except ValueError as error:
        raise ConfigError(str(error)) from None
  elif kind == "in_process":
    check_keys(search, {"proposer", "seed", "sampling", "model_path", "tokenizer"}, key_path)
    typed_config.read(sampling_api.SamplingParams, sampling, f"{key_path}.sampling")
    if search.get("model_path"):
      _check_path(search["model_path"], f"{key_path}.model_path", "the proposer checkpoint")
  else:
    for required in ("base_url", "model"):
      if not search.get(required):
        raise ConfigError(
            f"{key_path}.{required} is missing; config.search.proposer='openai' needs "
            "base_url (e.g. 'http://localhost:8000/v1') and model (the served model's name).")
    client_names, _ = _parameters(openai_client.OpenAICompatibleClient.__init__,
                                  skip=("self", "sleep"))
    check_call(model_proposer.openai_proposer, search, key_path,
               extra=client_names | {"sampling", "proposer"})
    check_keys(sampling, openai_client.SAMPLING_FIELDS, f"{key_path}.sampling")


def _check_agent_proposer(search, kind, key_path):
  """The keys, types and values of an agentic or CLI-agent search section."""
  allowed = AGENTIC_KEYS if kind == "agentic" else CLI_AGENT_KEYS
  check_keys(search, allowed, key_path)
  check_types({k: v for k, v in search.items() if v is not None}, allowed, key_path)
  check_choice(search.get("search_answers") or "none", archive_view.SEARCH_ANSWER_MODES,
               f"{key_path}.search_answers", "search_answers mode")
  if search.get("instructions"):
    _check_path(search["instructions"], f"{key_path}.instructions",
                "the steering text file (e.g. whale_jax/tasks/qa/instructions/searchqa.md)")
  typed_config.read(agent_tools.AgentBudgets, search.get("agent_budgets") or {},
                    f"{key_path}.agent_budgets")
  sampling = search.get("sampling") or {}
  if kind == "agentic":
    backend = search.get("agent_backend", "in_process")
    check_choice(backend, AGENT_BACKENDS, f"{key_path}.agent_backend", "agent backend")
    if backend == "openai":
      for required in ("base_url", "model"):
        if not search.get(required):
          raise ConfigError(f"{key_path}.{required} is missing; agent_backend='openai' needs "
                            "base_url (e.g. 'http://127.0.0.1:8000/v1') and model.")
      check_call(agentic_proposer.OpenAIToolClient.__init__,
                 {k: v for k, v in search.items()
                  if k in ("base_url", "model", "api_key_env", "timeout_seconds",
                           "max_retries", "max_consecutive_failures")}, key_path,
                 skip=("self", "sleep"))
      check_keys(sampling, openai_client.SAMPLING_FIELDS, f"{key_path}.sampling")
    else:
      typed_config.read(sampling_api.SamplingParams, sampling, f"{key_path}.sampling")
    return
  check_choice(search.get("session_per", "candidate"), cli_agent.SESSION_PER,
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
                       isinstance(endpoint[1], int) and not isinstance(endpoint[1], bool)):
    raise ConfigError(f"{key_path}.endpoint={endpoint!r} must be (host, port), e.g. "
                      "('127.0.0.1', 8000), or () for no network.")
  try:
    connect_proxy.parse_allow_list(search.get("https_allow") or ())
  except ValueError as error:
    raise ConfigError(f"{key_path}.https_allow: {error}; () keeps the proxy off.") from None
  for index, path in enumerate(search.get("read_only_paths", ())):
    _check_path(path, f"{key_path}.read_only_paths[{index}]", "a path the agent program needs")


def check_mesh(mesh, key_path="config.mesh"):
  check_keys(mesh, MESH_KEYS, key_path)
  check_types(mesh, dict.fromkeys(MESH_KEYS, int), key_path)


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
