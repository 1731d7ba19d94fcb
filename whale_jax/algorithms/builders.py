"""From config sections to the objects a recipe runs on: mesh, model, tokenizer, judge, domain,
proposer, runtime, and the Run that holds them.

  run = build_run(config, workdir)            # restored from workdir's checkpoint, if any
  model_config, params, model_dir = load_model({"source": "hf", "path": ...}, mesh)
  tokenizer = load_run_tokenizer("byte", model_dir)
  domain = build_domain({"name": "searchqa", "verifier": "judge", "judge": {...}, ...})
  proposer = build_proposer({"proposer": "openai", "base_url": ..., "model": ...}, policy,
                            tokenizer)

Every builder but build_run takes plain values (one config section as a dict, already checked
by algorithms/config_check.py), never the experiment ConfigDict; build_run is where the
ConfigDict becomes those values. Used by experiment.py (every recipe) and harness_learning.py
(the proposer model, its tokenizer and the teachers).

Sections (configs/*.py hold complete examples):
  model     source "random" (ModelConfig fields + seed), "hf" (path, dtype, loader options) or
            "embedded" (the solver shipped in whale_jax/assets/demo_solver).
  tokenizer "byte", "embedded", a tokenizer path, or "" for the model directory's own.
  domain    name + the domain builder's keyword arguments (whale_jax.tasks.get_domain); with
            verifier="judge", judge = the keyword arguments of tasks.judge.openai_judge
            (base_url, model, api_key_env, constrained, max_concurrency, max_retries,
            cache, ...): the SearchQA LLM judge over an OpenAI-compatible endpoint; its
            verdicts are cached in workdir/judge_cache (with_judge_cache).
  search    proposer "edit_library" (seed), "in_process" (sampling, seed, and optionally
            model_path/tokenizer of another checkpoint) or "openai" (base_url, model,
            api_key_env, sampling = the chat call's keywords, seed, timeout_seconds,
            max_retries).
            "agentic": a tool-calling coding agent (search/agentic_proposer.py) over
            agent_backend "in_process" (the solver's sampler, its chat template's tool calls;
            sampling = SamplingParams fields) or "openai" (base_url, model, api_key_env,
            timeout_seconds, max_retries, max_consecutive_failures: calls failing in a row
            that stop the run; sampling = the chat call's keywords);
            agent_budgets (AgentBudgets fields), run_tool (the agent may `run` drafts on the
            harness split, counted as harness rollouts), search_answers ("" = the recipe's
            default, archive_view.SEARCH_ANSWERS_BY_RECIPE), instructions (a steering file;
            "" = the domain's in search/instructions/), name, seed.
            "cli_agent": a command run jailed in a copy of the archive view
            (search/cli_agent.py): command, wall_clock_seconds, max_cost_usd, endpoint
            ((host, port) the agent may reach as plain TCP, or () for none), https_allow
            ("host:port" pairs it may reach over HTTPS through the host's CONNECT proxy, e.g.
            ("api.anthropic.com:443",); () = none), read_only_paths,
            pass_environment, environment, search_answers, instructions, name,
            session_per ("candidate": a session per proposal; "iteration": one session writes
            the iteration's M candidates and pending_eval.json, as WHALE runs Claude Code),
            run_tool (the `run` command in the jail: drafts on the harness split, counted as
            harness rollouts) and agent_budgets (its runs and episodes per session);
            configs/presets.claude_code_search() is the papers' `claude -p` setup.
            The held-out splits' references are withheld from both; what was resolved
            (backend, budgets, search answers, the steering file's hash) is
            run.proposer.config(), written into the run's config.json.
  runtime   HarnessRuntime keyword arguments (num_workers, timeout_seconds, memory_bytes, ...).
  mesh      {data, fsdp, tensor} sizes, and num_devices (use the first N; 0 = all).
"""
import dataclasses
import inspect
import os

import jax

from whale_jax import tasks
from whale_jax.algorithms import config_check
from whale_jax.algorithms import hosts
from whale_jax.algorithms import loop
from whale_jax.algorithms import options
from whale_jax.algorithms import policy as policy_lib
from whale_jax.algorithms import run_log
from whale_jax.harness import HarnessRuntime
from whale_jax.models import ModelConfig
from whale_jax.models import hf
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.sampling import engine as engine_lib
from whale_jax.sampling import openai_client
from whale_jax.search import agent_tools
from whale_jax.search import agentic_proposer
from whale_jax.search import archive_view
from whale_jax.search import cli_agent
from whale_jax.search import edit_library
from whale_jax.search import model_proposer
from whale_jax.search import steering
from whale_jax.tasks import judge as judge_lib
from whale_jax.tokenization import load_tokenizer
from whale_jax.tasks import registry
from whale_jax.train import checkpoint as checkpoint_lib
from whale_jax.train import grpo
from whale_jax.train import optimizer as optimizer_lib
from whale_jax.train import train_state

EMBEDDED_SOLVER = options.EMBEDDED_SOLVER
PROPOSERS = options.PROPOSERS


def _parameters(function, skip=()):
  """(names of function's keyword parameters, whether it also takes **kwargs)."""
  parameters = inspect.signature(function).parameters.values()
  names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
  return names - set(skip), any(p.kind == p.VAR_KEYWORD for p in parameters)


def _check_call(function, section_, key_path, skip=(), extra=()):
  """ConfigError for a key of section_ that function (or extra) does not take."""
  names, takes_any = _parameters(function, skip)
  if not takes_any:
    config_check.check_keys(section_, names | set(extra), key_path)


def _build(cls, section_, key_path):
  """cls(**section_) with unknown keys and cls's own checks as one-line ConfigErrors."""
  fields = {field.name for field in dataclasses.fields(cls)}
  config_check.check_keys(section_, fields, key_path)
  try:
    return cls(**section_)
  except (TypeError, ValueError) as error:
    raise config_check.ConfigError(f"{key_path}: {' '.join(str(error).split())}") from None


def check_model_section(model_section, key_path="config.model"):
  model_section = dict(model_section)
  source = model_section.pop("source", "random")
  if source == "random":
    model_section.pop("seed", None)
    _build(ModelConfig, model_section, key_path)
  else:
    fields = {field.name for field in dataclasses.fields(ModelConfig)}
    _check_call(hf.load_hf, model_section, key_path, skip=("mesh", "rules"), extra=fields)


def check_search_section(search_section, key_path="config.search"):
  search_section = dict(search_section)
  kind = search_section.pop("proposer", "edit_library")
  config_check.check_choice(kind, PROPOSERS, f"{key_path}.proposer", "proposer")
  sampling = dict(search_section.get("sampling", {}))
  if kind in ("agentic", "cli_agent"):
    _build(agent_tools.AgentBudgets, dict(search_section.get("agent_budgets", {})),
           f"{key_path}.agent_budgets")
    if kind == "agentic" and search_section.get("agent_backend", "in_process") == "in_process":
      _build(SamplingParams, sampling, f"{key_path}.sampling")
    elif kind == "agentic":
      _check_call(agentic_proposer.OpenAIToolClient.__init__,
                  {k: v for k, v in search_section.items()
                   if k in ("base_url", "model", "api_key_env", "timeout_seconds",
                            "max_retries", "max_consecutive_failures")}, key_path,
                  skip=("self", "sleep"))
      config_check.check_keys(sampling, openai_client.SAMPLING_FIELDS, f"{key_path}.sampling")
    return
  if kind == "edit_library":
    config_check.check_keys(search_section, {"seed", "mechanisms"}, key_path)
  elif kind == "in_process":
    config_check.check_keys(search_section, {"seed", "sampling", "model_path", "tokenizer"},
                            key_path)
    _build(SamplingParams, sampling, f"{key_path}.sampling")
  else:
    for required in ("base_url", "model"):
      if not search_section.get(required):
        raise config_check.ConfigError(
            f"{key_path}.{required} is missing; config.search.proposer='openai' needs "
            "base_url (e.g. 'http://localhost:8000/v1') and model (the served model's name).")
    client_names, _ = _parameters(openai_client.OpenAICompatibleClient.__init__,
                                  skip=("self", "sleep"))
    _check_call(model_proposer.openai_proposer, search_section, key_path,
                extra=client_names | {"sampling"})
    config_check.check_keys(sampling, openai_client.SAMPLING_FIELDS, f"{key_path}.sampling")


def check_domain_section(domain_section, key_path="config.domain"):
  domain_section = dict(domain_section)
  name = domain_section.pop("name")
  if name.startswith(registry.REASONING_GYM_PREFIX):
    builder = registry.reasoning_gym_domain
  else:
    builder = registry.BUILDERS[name]
  _check_call(builder, domain_section, key_path, skip=("dataset",))
  if isinstance(domain_section.get("judge"), dict):
    _check_call(judge_lib.openai_judge, domain_section["judge"], f"{key_path}.judge")
    constrained = domain_section["judge"].get("constrained", "auto")
    if constrained not in judge_lib.CONSTRAINED:
      raise config_check.ConfigError(
          f"{key_path}.judge.constrained={constrained!r}; use 'auto' (constrained choice where "
          "the endpoint takes it, free text elsewhere), 'always' or 'never'.")
  elif domain_section.get("verifier") == "judge":
    raise config_check.ConfigError(
        f"{key_path}.verifier='judge' needs {key_path}.judge = dict(base_url=..., model=...) "
        "(tasks.judge.openai_judge options), or use verifier='exact_match'.")


def check_training_section(training, key_path="config.training"):
  _build(optimizer_lib.OptimizerConfig, dict(training.get("optimizer", {})),
         f"{key_path}.optimizer")
  _build(grpo.GRPOConfig, dict(training.get("grpo", {})), f"{key_path}.grpo")
  _check_call(engine_lib.Engine.__init__, dict(training.get("sampler", {})),
              f"{key_path}.sampler", skip=("self", "config", "params", "tokenizer", "mesh",
                                           "rules"))


def check_sections(config):
  """The checks of config_check.check that need jax-importing modules: SamplingParams,
  ModelConfig, optimizer, GRPO and engine options, HarnessRuntime, the domain builder, the
  judge and the proposer. Raises config_check.ConfigError; builds nothing heavy."""
  if config.get("recipe") == "warm_start":
    check_training_section(section(config, "training"))
    return
  sampling = _build(SamplingParams, section(config, "sampling"), "config.sampling")
  eval_sampling = section(config, "eval_sampling")
  config_check.check_keys(eval_sampling, {f.name for f in dataclasses.fields(SamplingParams)},
                          "config.eval_sampling")
  try:
    sampling.replace(**eval_sampling)
  except (TypeError, ValueError) as error:
    raise config_check.ConfigError(f"config.eval_sampling: {error}") from None
  check_model_section(section(config, "model"))
  check_training_section(section(config, "training"))
  check_domain_section(section(config, "domain"))
  check_search_section(section(config, "search"))
  _check_call(HarnessRuntime.__init__, section(config, "runtime"), "config.runtime",
              skip=("self", "backend", "tokenizer"))
  hl_section = section(config, "harness_learning")
  if hl_section:
    key_path = "config.harness_learning"
    hl_config = options.HarnessLearningConfig(**hl_section)
    if hl_config.proposer_model:
      check_model_section(hl_config.proposer_model, f"{key_path}.proposer_model")
    if hl_config.proposer_training:
      check_training_section(hl_config.proposer_training, f"{key_path}.proposer_training")
    _build(SamplingParams, dict(hl_config.proposer_sampling), f"{key_path}.proposer_sampling")
    for index, teacher in enumerate(hl_config.teachers):
      check_search_section(teacher, f"{key_path}.teachers[{index}]")
    for name in ("sft_domains", "grpo_domains"):
      for index, entry in enumerate(getattr(hl_config, name)):
        if isinstance(entry, dict):
          check_domain_section(entry, f"{key_path}.{name}[{index}]")


def section(config, name):
  """config.<name> as a plain dict ({} when absent); a copy the caller may change."""
  value = config.get(name) if hasattr(config, "get") else None
  if value is None:
    return {}
  return value.to_dict() if hasattr(value, "to_dict") else dict(value)


def build_mesh(mesh_section):
  """The device mesh of config.mesh ({"data": -1} when empty)."""
  mesh_section = dict(mesh_section or {"data": -1})
  num_devices = mesh_section.pop("num_devices", 0)  # 0 = all devices
  if jax.process_count() > 1 and num_devices and num_devices != jax.device_count():
    raise ValueError(f"config.mesh.num_devices={num_devices} on a run of "
                     f"{jax.process_count()} processes: a multi-host mesh spans every host's "
                     f"devices. Set config.mesh.num_devices=0 (all {jax.device_count()}).")
  return mesh_lib.make_mesh(**mesh_section,
                            devices=jax.devices()[:num_devices] if num_devices else None)


def load_model(model_section, mesh, key_path="config.model"):
  """(ModelConfig, params placed on mesh, model directory or None) from a model section.

  Random weights are initialized already sharded by the train rules (no full copy on one
  device first), as checkpoints are loaded.
  """
  model_section = dict(model_section)
  source = model_section.pop("source", "random")
  if source == "random":
    seed = model_section.pop("seed", 0)
    model_config = ModelConfig(**model_section)
    params = train_state.init_params(model_config, jax.random.key(seed), mesh,
                                     rules.TRAIN_RULES)
    return model_config, params, None
  if source in ("hf", "embedded"):
    path = EMBEDDED_SOLVER if source == "embedded" else model_section.pop("path")
    model_section.pop("path", None)
    dtype = model_section.pop("dtype", "float32")
    model_config, params = hf.load_hf(path, dtype=dtype, mesh=mesh, **model_section)
    return model_config, params, path
  raise ValueError(f"{key_path}.source={source!r}; use 'random', 'hf' or 'embedded'.")


def load_run_tokenizer(name, model_dir, key_path="config.tokenizer"):
  """The tokenizer called name ("byte", "embedded", a path) or, for "", model_dir's own."""
  if name:
    return load_tokenizer(EMBEDDED_SOLVER if name == "embedded" else name)
  if model_dir is None:
    raise ValueError(f"{key_path} is empty and the model has no directory to take a "
                     f"tokenizer from; set {key_path} (e.g. 'byte').")
  return load_tokenizer(model_dir)


def build_judge(judge_section):
  """The SearchQA LLM judge over an OpenAI-compatible endpoint (tasks.judge.openai_judge)."""
  return judge_lib.openai_judge(**judge_section)


def with_judge_cache(domain_section, workdir):
  """domain_section whose judge keeps its verdicts in workdir/judge_cache, so a resumed or
  repeated evaluation asks nothing twice; unchanged when the judge section names its own
  cache_dir, turns the cache off, or workdir is not a local path (gs://...)."""
  judge_section = domain_section.get("judge")
  if (not isinstance(judge_section, dict) or domain_section.get("verifier") != "judge" or
      judge_section.get("cache_dir") or not judge_section.get("cache", True) or
      "://" in os.fspath(workdir)):
    return domain_section
  return {**domain_section,
          "judge": {**judge_section, "cache_dir": os.path.join(workdir, "judge_cache")}}


def build_domain(domain_section):
  """The tasks.Domain of a domain section (name + builder options, judge section built)."""
  domain_section = dict(domain_section)
  name = domain_section.pop("name")
  if isinstance(domain_section.get("judge"), dict):
    domain_section["judge"] = build_judge(domain_section["judge"])
  return tasks.get_domain(name, **domain_section)


RECIPE_FAMILIES = {"whale": "whale", "whale_adaptive": "whale", "fst": "whale", "vace": "vace",
                   "ungated": "vace", "weight_only": "baselines", "harness_only": "baselines",
                   "stagewise": "baselines", "sia": "baselines",
                   "harness_learning": "harness_learning"}


def default_search_answers(recipe):
  """What of the search split's references a coding agent sees under recipe by default (each
  paper's choice: archive_view.SEARCH_ANSWERS_BY_RECIPE); "none" for an unknown recipe."""
  return archive_view.SEARCH_ANSWERS_BY_RECIPE.get(RECIPE_FAMILIES.get(recipe, ""), "none")


def agent_client(search_section, policy, tokenizer):
  """The chat client of an agentic section: the in-process sampler or an OpenAI endpoint."""
  backend = search_section.get("agent_backend", "in_process")
  if backend == "in_process":
    sampling = SamplingParams(**dict(search_section.get("sampling") or {"max_tokens": 1024}))
    return agentic_proposer.InProcessToolClient(policy.sampler, tokenizer, sampling)
  return agentic_proposer.OpenAIToolClient(
      search_section["base_url"], search_section["model"],
      api_key_env=search_section.get("api_key_env") or None,
      **{k: search_section[k] for k in ("timeout_seconds", "max_retries",
                                        "max_consecutive_failures") if k in search_section})


def _build_agent(kind, search_section, policy, tokenizer, domain, recipe):
  """An unbound AgenticProposer or CliAgentProposer (the loop binds it with for_search)."""
  if domain is None:
    raise ValueError(f"config.search.proposer={kind!r} needs the domain (build_proposer(..., "
                     "domain=...)): its splits' references are withheld from the agent.")
  common = dict(
      search_answers=search_section.get("search_answers") or default_search_answers(recipe),
      withheld=agentic_proposer.held_out_strings(domain.splits()),
      instructions=(steering.load_file(search_section["instructions"])
                    if search_section.get("instructions") else None),
      name=search_section.get("name") or kind)
  if kind == "agentic":
    sampling = dict(search_section.get("sampling") or {})
    return agentic_proposer.AgenticProposer(
        agent_client(search_section, policy, tokenizer), None, domain, None,
        budgets=agent_tools.AgentBudgets(**dict(search_section.get("agent_budgets") or {})),
        sampling={} if search_section.get("agent_backend", "in_process") == "in_process"
        else sampling, seed=search_section.get("seed", 0), tokenizer=tokenizer,
        use_run_tool=search_section.get("run_tool", True), **common)
  endpoint = search_section.get("endpoint") or None
  runner = cli_agent.BwrapRunner(
      read_only_paths=search_section.get("read_only_paths", ()),
      pass_environment=search_section.get("pass_environment", ()),
      environment=search_section.get("environment") or None,
      endpoint=tuple(endpoint) if endpoint else None,
      https_allow=tuple(search_section.get("https_allow") or ()))
  return cli_agent.CliAgentProposer(
      search_section["command"], None, domain, None, runner=runner,
      wall_clock_seconds=search_section.get("wall_clock_seconds", 1800.0),
      max_cost_usd=search_section.get("max_cost_usd"),
      session_per=search_section.get("session_per", "candidate"),
      use_run_tool=search_section.get("run_tool", True),
      budgets=agent_tools.AgentBudgets(**dict(search_section.get("agent_budgets") or {})),
      **common)


def build_proposer(search_section, policy, tokenizer, domain=None, recipe=None):
  """The proposer of a search section (a Meta-Harness proposer or a Harness Learning teacher).

  Args:
    search_section: {"proposer": one of PROPOSERS, ...its options} (module docstring).
    policy: the solver Policy; "in_process" proposes with its sampler (or, with model_path,
      with another checkpoint on the sampler's mesh).
    tokenizer: the solver's tokenizer.
    domain: the tasks.Domain ("agentic" and "cli_agent" need it: its held-out references are
      withheld, its name picks the steering file).
    recipe: the recipe the proposer serves (the default of search_answers).
  """
  search_section = dict(search_section)
  kind = search_section.pop("proposer", "edit_library")
  if kind in ("agentic", "cli_agent"):
    return _build_agent(kind, search_section, policy, tokenizer, domain, recipe)
  seed = search_section.pop("seed", 0)
  if kind == "edit_library":
    return edit_library.EditLibraryProposer(seed=seed,
                                            mechanisms=search_section.get("mechanisms"))
  sampling = dict(search_section.pop("sampling", {"max_tokens": 1024}))
  if kind == "in_process":
    backend, proposer_tokenizer = policy.sampler, tokenizer
    if search_section.get("model_path"):  # a proposer checkpoint different from the solver
      # On a local mesh: on a multi-host run only host 0 proposes (algorithms/hosts.py).
      local = policy.sampler_mesh
      model_config, params = hf.load_hf(search_section["model_path"], mesh=local)
      proposer_tokenizer = load_tokenizer(search_section.get("tokenizer") or
                                          search_section["model_path"])
      backend = Sampler(model_config, params, tokenizer=proposer_tokenizer, mesh=local)
    return model_proposer.in_process_proposer(backend, proposer_tokenizer,
                                              SamplingParams(**sampling), seed=seed)
  if kind == "openai":
    # The chat call's keywords, as a dict: the endpoint, not SamplingParams, interprets them.
    return model_proposer.openai_proposer(
        search_section.pop("base_url"), search_section.pop("model"), sampling=sampling,
        seed=seed, **search_section)
  raise ValueError(f"config.search.proposer={kind!r}; use one of {', '.join(PROPOSERS)}.")


def build_runtime(sampler, tokenizer, domain, runtime_section):
  """The HarnessRuntime serving sampler, allowing the domain's imports unless overridden."""
  return HarnessRuntime(sampler, tokenizer, **{"allowed_imports": domain.allowed_imports,
                                               **runtime_section})


def build_run(config, workdir, show_progress=True, recipe=None):
  """Builds (or, when workdir holds a checkpoint, restores) the Run of an experiment config.

  recipe: the recipe the Run serves (default config.recipe; a "compare" run passes each
  method), for the proposer's per-recipe defaults.
  """
  mesh = build_mesh(section(config, "mesh"))
  model_config, params, model_dir = load_model(section(config, "model"), mesh)
  tokenizer = load_run_tokenizer(config.get("tokenizer", ""), model_dir)
  domain = build_domain(with_judge_cache(section(config, "domain"), workdir))
  policy = policy_lib.Policy(model_config, params, tokenizer, mesh,
                             options.PolicyConfig(**section(config, "training")))
  search_section = section(config, "search")
  if (jax.process_count() > 1 and search_section.get("proposer") in ("agentic", "cli_agent")
      and search_section.get("run_tool", True)):
    # The agent runs on host 0 only, but every host serves a share of each batch of episodes.
    raise ValueError("config.search.run_tool=True on a multi-host run: the agent's `run` "
                     "would wait for the other hosts' episodes; set config.search.run_tool="
                     "False (the agent still reads every trace) or run on one host.")
  runtime, proposer = hosts.for_processes(
      build_runtime(policy.sampler, tokenizer, domain, section(config, "runtime")),
      build_proposer(search_section, policy, tokenizer, domain, recipe or config.get("recipe")))
  sampling = SamplingParams(**section(config, "sampling"))
  manager = checkpoint_lib.make_manager(os.path.join(workdir, "checkpoints"), max_to_keep=2)
  run = loop.Run(
      workdir=workdir, loop=options.LoopConfig(**section(config, "loop")), policy=policy,
      runtime=runtime, domain=domain, sampling=sampling,
      eval_sampling=sampling.replace(**section(config, "eval_sampling")), proposer=proposer,
      log=run_log.RunLog(workdir, enabled=jax.process_index() == 0),
      counts=run_log.RolloutCounts(), state=loop.LoopState(incumbent=domain.seed_harness),
      manager=manager, tokenizer=tokenizer, show_progress=show_progress)
  loop.restore(run, train_state.abstract(model_config, policy.optimizer, mesh,
                                         rules.TRAIN_RULES))
  return run
