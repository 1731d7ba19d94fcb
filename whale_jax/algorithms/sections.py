"""The config sections that are not one recipe's options: where the model comes from, the
harness search's proposer, and the mesh.

  ModelSection          config.model      (and harness_learning.proposer_model)
  SearchSection         config.search     (and harness_learning.teachers)
  MeshSection           config.mesh

Field names are the config keys. ModelSection and SearchSection, whose config layout is not
their fields (model fields beside the source; keys that depend on the proposer), read it in
from_config (typed_config's hook). Like options.py, this module imports no jax.
"""
import dataclasses
import typing

from whale_jax import typed_config
from whale_jax.harness import static_checks
from whale_jax.models import config as model_config_lib
from whale_jax.sampling import api as sampling_api
from whale_jax.sampling import openai_client
from whale_jax.search import agent_tools
from whale_jax.search import archive_view
from whale_jax.search import cli_agent
from whale_jax.search import connect_proxy
from whale_jax.search import edit_mechanisms
from whale_jax.search import meta_harness

MODEL_SOURCES = ("random", "hf", "embedded")
# A model section's own keys by source, beside ModelConfig fields ("hf" and "embedded":
# models/hf.load_hf's arguments but mesh and rules; its compute_dtype is a ModelConfig field).
MODEL_SOURCE_KEYS = {"random": ("source", "seed"), "hf": ("source", "path", "dtype"),
                     "embedded": ("source", "path", "dtype")}


@dataclasses.dataclass(frozen=True)
class ModelSection:
  """config.model (and harness_learning.proposer_model): where the weights come from, and the
  ModelConfig fields the section sets (algorithms/builders.load_model).

    config.model = dict(source="hf", path="checkpoints/Qwen/Qwen3.5-2B", dtype="bfloat16",
                        remat="full")
    ModelSection(source="hf", path=..., dtype="bfloat16", model_fields={"remat": "full"})

  Attributes:
    source: "random" (weights initialized from seed; model_fields are a whole ModelConfig),
      "hf" (the Hugging Face checkpoint directory at path) or "embedded" (the solver shipped
      in whale_jax/assets/demo_solver).
    seed: "random": the seed of the initial weights.
    path: "hf": the checkpoint directory ("embedded" ignores it).
    dtype: "hf", "embedded": the parameter dtype; compute_dtype defaults to it.
    model_fields: the ModelConfig fields the section gives, each of ModelConfig's type (for
      "hf" and "embedded": overrides of the checkpoint's, e.g. remat, attention). In the config
      they sit beside the keys above.
  """
  source: str = "random"
  seed: int = 0
  path: str = ""
  dtype: str = "float32"
  model_fields: dict = dataclasses.field(default_factory=dict)

  @classmethod
  def from_config(cls, value, key_path):
    """The ModelSection of a config section: the source's keys (MODEL_SOURCE_KEYS) beside
    ModelConfig fields (typed_config's hook; a "random" section is checked whole where a run
    builds it: experiment_config.parse)."""
    source = value.get("source", "random")
    typed_config.check_choice(source, MODEL_SOURCES, f"{key_path}.source", "model source")
    own = MODEL_SOURCE_KEYS[source]
    types = typing.get_type_hints(model_config_lib.ModelConfig)
    typed_config.check_keys(value, set(own) | set(types), key_path)
    if "dtype" in own and "param_dtype" in value:
      raise typed_config.ConfigError(
          f"{key_path}.param_dtype is set by {key_path}.dtype for source={source!r}; remove "
          f"param_dtype and set dtype={value['param_dtype']!r}.")
    model_fields = {key: typed_config.read(types[key], item, f"{key_path}.{key}")
                    for key, item in value.items() if key not in own}
    return typed_config.read_fields(
        cls, {**{key: value[key] for key in own if key in value}, "model_fields": model_fields},
        key_path)


@dataclasses.dataclass(frozen=True)
class MeshSection:
  """config.mesh keys: the sizes of the mesh axes (parallel/mesh.make_mesh checks them against
  the devices; -1 = all remaining devices) and num_devices (use the first N; 0 = all)."""
  data: int = -1
  fsdp: int = 1
  tensor: int = 1
  num_devices: int = 0

  def __post_init__(self):
    typed_config.at_least("config.mesh.num_devices", self.num_devices, 0)

  def axis_sizes(self):
    return {"data": self.data, "fsdp": self.fsdp, "tensor": self.tensor}


PROPOSERS = ("edit_library", "in_process", "openai", "agentic", "cli_agent")
AGENT_BACKENDS = ("in_process", "openai")   # the chat client of proposer="agentic"
# The keys each proposer takes besides proposer, context_tokens and max_lines (openai: the
# keyword arguments of search/model_proposer.openai_proposer and its OpenAICompatibleClient).
PROPOSER_KEYS = {
    "edit_library": ("seed", "mechanisms"),
    "in_process": ("seed", "sampling", "model_path", "tokenizer"),
    "openai": ("base_url", "model", "api_key_env", "timeout_seconds", "max_retries",
               "initial_backoff_seconds", "max_backoff_seconds", "max_consecutive_failures",
               "extra_body", "sampling", "seed", "name"),
    "agentic": ("agent_backend", "base_url", "model", "api_key_env", "timeout_seconds",
                "max_retries", "max_consecutive_failures", "sampling", "agent_budgets",
                "run_tool", "search_answers", "instructions", "name", "seed"),
    "cli_agent": ("command", "wall_clock_seconds", "max_cost_usd", "endpoint", "https_allow",
                  "read_only_paths", "pass_environment", "environment", "session_per",
                  "run_tool", "agent_budgets", "search_answers", "instructions", "name",
                  "seed"),
}
# The defaults that differ by proposer: a field left at BY_PROPOSER takes its proposer's
# (None where the proposer does not take it).
PROPOSER_DEFAULTS = {
    "in_process": {"sampling": {"max_tokens": 1024}},
    "openai": {"api_key_env": "OPENAI_API_KEY", "max_retries": 4,
               "sampling": {"max_tokens": 1024}},
    "agentic": {"api_key_env": None, "max_retries": 3, "sampling": {}},
}


class _ByProposer:
  def __repr__(self):
    return "BY_PROPOSER"


BY_PROPOSER = _ByProposer()


@dataclasses.dataclass(frozen=True)
class SearchSection:
  """config.search (and each of harness_learning.teachers): the proposer and its options
  (algorithms/builders.build_proposer; the builders module docstring says what each does).

  Attributes:
    proposer: one of PROPOSERS; PROPOSER_KEYS lists the keys each takes beside these three.
    context_tokens: any proposer: the budget of the proposer context rendered from the
      archive.
    max_lines: any proposer: the most lines a Meta-Harness candidate may have.
    seed: the proposer's seed.
    mechanisms: edit_library: the edit mechanisms it may use (None: all of its domain's).
    model_path, tokenizer: in_process: another checkpoint to propose with, and its tokenizer
      ("": the checkpoint's).
    base_url, model, api_key_env, timeout_seconds, max_retries, initial_backoff_seconds,
      max_backoff_seconds, max_consecutive_failures, extra_body: openai, agentic with
      agent_backend="openai": the endpoint and its client (api_key_env None or "": no key).
    sampling: in_process and agentic's in-process backend: SamplingParams fields; openai and
      agentic's "openai" backend: the chat call's keywords (openai_client.SAMPLING_FIELDS).
    name: the proposer's name in the archive ("": the model's, or the proposer kind's).
    agent_backend: agentic: "in_process" or "openai".
    agent_budgets, run_tool, search_answers, instructions: agentic, cli_agent: the session's
      budgets, the `run` tool, what of the search split's references the agent sees ("": the
      recipe's default), the steering file ("": the domain's).
    command, wall_clock_seconds, max_cost_usd, endpoint, https_allow, read_only_paths,
      pass_environment, environment, session_per: cli_agent's command line and jail.
  """
  proposer: str = "edit_library"
  context_tokens: int = meta_harness.DEFAULT_CONTEXT_TOKENS
  max_lines: int = static_checks.DEFAULT_MAX_LINES
  seed: int = 0
  mechanisms: tuple[str, ...] | None = None
  model_path: str = ""
  tokenizer: str = ""
  base_url: str = ""
  model: str = ""
  api_key_env: str | None = BY_PROPOSER
  timeout_seconds: float = 600.0
  max_retries: int | None = BY_PROPOSER
  initial_backoff_seconds: float = 1.0
  max_backoff_seconds: float = 60.0
  max_consecutive_failures: int = 3
  extra_body: dict | None = None
  sampling: dict | None = BY_PROPOSER
  name: str = ""
  agent_backend: str = "in_process"
  agent_budgets: agent_tools.AgentBudgets = agent_tools.AgentBudgets()
  run_tool: bool = True
  search_answers: str = ""
  instructions: str = ""
  command: str | tuple[str, ...] | None = None
  wall_clock_seconds: float = 1800.0
  max_cost_usd: float | None = None
  endpoint: tuple = ()
  https_allow: tuple[str, ...] = ()
  read_only_paths: tuple[str, ...] = ()
  pass_environment: tuple[str, ...] = ()
  environment: dict | None = None
  session_per: str = "candidate"

  def __post_init__(self):
    for name in ("api_key_env", "max_retries", "sampling"):
      if getattr(self, name) is BY_PROPOSER:
        default = PROPOSER_DEFAULTS.get(self.proposer, {}).get(name)
        object.__setattr__(self, name, dict(default) if isinstance(default, dict) else default)
    if self.context_tokens < 1:
      raise ValueError(f"config.search.context_tokens={self.context_tokens!r} must be a "
                       "positive int: the tokens of the proposer context rendered from the "
                       f"archive (default {meta_harness.DEFAULT_CONTEXT_TOKENS}).")
    if self.max_lines < 1:
      raise ValueError(f"config.search.max_lines={self.max_lines!r} must be a positive int: "
                       "the most lines a candidate harness may have (default "
                       f"{static_checks.DEFAULT_MAX_LINES}).")
    if self.mechanisms is not None:
      edit_mechanisms.check(self.mechanisms, "config.search.mechanisms")
    typed_config.known_choice("config.search.agent_backend", self.agent_backend,
                              AGENT_BACKENDS, "agent backend")
    served = self.proposer == "openai" or (self.proposer == "agentic" and
                                           self.agent_backend == "openai")
    for required in ("base_url", "model"):
      if served and not getattr(self, required):
        raise ValueError(f"config.search.{required} is missing; proposer={self.proposer!r} "
                         f"{'' if self.proposer == 'openai' else 'with agent_backend=openai '}"
                         "needs base_url (e.g. 'http://127.0.0.1:8000/v1') and model (the "
                         "served model's name).")
    typed_config.known_choice("config.search.search_answers", self.search_answers or "none",
                              archive_view.SEARCH_ANSWER_MODES, "search_answers mode")
    typed_config.known_choice("config.search.session_per", self.session_per,
                              cli_agent.SESSION_PER, "session_per")
    if self.proposer == "cli_agent" and not self.command:
      raise ValueError(f"config.search.command={self.command!r}; proposer='cli_agent' needs the "
                       "agent's command line, a string or a list of strings (e.g. ['claude', "
                       "'-p', '{prompt}']).")
    for name in ("wall_clock_seconds", "max_cost_usd"):
      value = getattr(self, name)
      if value is not None and not value > 0:
        raise ValueError(f"config.search.{name}={value!r} must be > 0.")
    if self.endpoint and not (len(self.endpoint) == 2 and isinstance(self.endpoint[0], str) and
                              isinstance(self.endpoint[1], int) and
                              not isinstance(self.endpoint[1], bool)):
      raise ValueError(f"config.search.endpoint={self.endpoint!r} must be (host, port), e.g. "
                       "('127.0.0.1', 8000), or () for no network.")
    try:
      connect_proxy.parse_allow_list(self.https_allow)
    except ValueError as error:
      raise ValueError(f"config.search.https_allow: {error}; () keeps the proxy off.") from None

  @classmethod
  def from_config(cls, value, key_path):
    """The SearchSection of a config section: the keys its proposer takes (PROPOSER_KEYS), and
    its sampling's (typed_config's hook)."""
    proposer = value.get("proposer", "edit_library")
    typed_config.check_choice(proposer, PROPOSERS, f"{key_path}.proposer", "proposer")
    typed_config.check_keys(value, ("proposer", "context_tokens", "max_lines") +
                            PROPOSER_KEYS[proposer], key_path)
    sampling = value.get("sampling")
    if sampling is not None:
      in_process = proposer == "in_process" or (
          proposer == "agentic" and value.get("agent_backend", "in_process") == "in_process")
      if in_process:
        typed_config.read(sampling_api.SamplingParams, sampling, f"{key_path}.sampling")
      elif hasattr(sampling, "keys"):
        typed_config.check_keys(sampling, openai_client.SAMPLING_FIELDS, f"{key_path}.sampling")
    return typed_config.read_fields(cls, value, key_path)
