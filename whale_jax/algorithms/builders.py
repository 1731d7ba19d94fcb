"""From config sections to the objects a recipe runs on: mesh, model, tokenizer, judge, domain,
proposer, runtime, and the Run that holds them.

  run = build_run(experiment, workdir)        # restored from workdir's checkpoint, if any
  model_config, params, model_dir = load_model(experiment.model, mesh)
  tokenizer = load_run_tokenizer("byte", model_dir)
  domain = build_domain(experiment.domain)
  proposer = build_proposer(experiment.search, policy, tokenizer, domain, recipe)

Every builder but build_run takes one typed section of the ExperimentConfig
(algorithms/experiment_config.py: sections.ModelSection, SearchSection, MeshSection,
tasks/registry.DomainSection, checked once there), never the ConfigDict; build_run takes the
ExperimentConfig. Used by experiment.py (every recipe) and harness_learning.py (the proposer
model, its tokenizer and the teachers).

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
            "" = the domain's, Domain.instructions), name, seed.
            context_tokens (any proposer): the budget of the proposer context rendered
            from the archive (meta_harness.DEFAULT_CONTEXT_TOKENS = 16,000 by default);
            max_lines (any proposer): the most lines a Meta-Harness candidate may have
            (static_checks.DEFAULT_MAX_LINES = 200 by default).
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
  runtime   a RuntimeConfig: HarnessRuntime's keyword arguments (num_workers, timeout_seconds,
            memory_bytes, ...).
  mesh      {data, fsdp, tensor} sizes, and num_devices (use the first N; 0 = all).
"""
import dataclasses
import os

import jax

from whale_jax import tasks
from whale_jax import typed_config
from whale_jax.algorithms import experiment_config
from whale_jax.algorithms import hosts
from whale_jax.algorithms import loop
from whale_jax.algorithms import sections
from whale_jax.algorithms import policy as policy_lib
from whale_jax.algorithms import run_log
from whale_jax.harness import HarnessRuntime
from whale_jax.models import ModelConfig
from whale_jax.models import hf
from whale_jax.models import presets
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.search import agentic_proposer
from whale_jax.search import archive_view
from whale_jax.search import cli_agent
from whale_jax.search import edit_library
from whale_jax.search import model_proposer
from whale_jax.search import steering
from whale_jax.tasks import judge as judge_lib
from whale_jax.tokenization import load_tokenizer
from whale_jax.train import checkpoint as checkpoint_lib
from whale_jax.train import train_state

EMBEDDED_SOLVER = presets.EMBEDDED_SOLVER
PROPOSERS = sections.PROPOSERS


def build_mesh(mesh_section):
  """The device mesh of config.mesh (an sections.MeshSection)."""
  num_devices = mesh_section.num_devices  # 0 = all devices
  if jax.process_count() > 1 and num_devices and num_devices != jax.device_count():
    raise ValueError(f"config.mesh.num_devices={num_devices} on a run of "
                     f"{jax.process_count()} processes: a multi-host mesh spans every host's "
                     f"devices. Set config.mesh.num_devices=0 (all {jax.device_count()}).")
  return mesh_lib.make_mesh(**mesh_section.axis_sizes(),
                            devices=jax.devices()[:num_devices] if num_devices else None)


def load_model(model_section, mesh, key_path="config.model"):
  """(ModelConfig, params placed on mesh, model directory or None) of an sections.ModelSection.

  Random weights are initialized already sharded by the train rules (no full copy on one
  device first), as checkpoints are loaded.
  """
  source = model_section.source
  if source == "random":
    model_config = ModelConfig(**model_section.model_fields)
    params = train_state.init_params(model_config, jax.random.key(model_section.seed), mesh,
                                     rules.TRAIN_RULES)
    return model_config, params, None
  if source in ("hf", "embedded"):
    path = EMBEDDED_SOLVER if source == "embedded" else model_section.path
    model_config, params = hf.load_hf(path, dtype=model_section.dtype, mesh=mesh,
                                      **model_section.model_fields)
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
  """domain_section (a tasks/registry.DomainSection) whose judge keeps its verdicts in
  workdir/judge_cache, so a resumed or repeated evaluation asks nothing twice; unchanged when
  the judge section names its own cache_dir, turns the cache off, or workdir is not a local
  path (gs://...)."""
  judge_section = domain_section.options.get("judge")
  if (not isinstance(judge_section, dict) or domain_section.options.get("verifier") != "judge"
      or judge_section.get("cache_dir") or not judge_section.get("cache", True) or
      "://" in os.fspath(workdir)):
    return domain_section
  return dataclasses.replace(domain_section, options={
      **domain_section.options,
      "judge": {**judge_section, "cache_dir": os.path.join(workdir, "judge_cache")}})


def build_domain(domain_section):
  """The tasks.Domain of a tasks/registry.DomainSection (its judge section built)."""
  keywords = domain_section.keywords()
  if isinstance(keywords.get("judge"), dict):
    keywords["judge"] = build_judge(keywords["judge"])
  return tasks.get_domain(domain_section.name, **keywords)


RECIPE_FAMILIES = {"whale": "whale", "whale_adaptive": "whale", "fst": "whale", "vace": "vace",
                   "ungated": "vace", "rl_only": "vace", "vace_harness_only": "vace",
                   "weight_only": "baselines", "harness_only": "baselines",
                   "stagewise": "baselines", "sia": "baselines",
                   "harness_learning": "harness_learning"}


def default_search_answers(recipe):
  """What of the search split's references a coding agent sees under recipe by default (each
  paper's choice: archive_view.SEARCH_ANSWERS_BY_RECIPE); "none" for an unknown recipe."""
  return archive_view.SEARCH_ANSWERS_BY_RECIPE.get(RECIPE_FAMILIES.get(recipe, ""), "none")


def agent_client(search_section, policy, tokenizer):
  """The chat client of an agentic section: the in-process sampler or an OpenAI endpoint."""
  if search_section.agent_backend == "in_process":
    sampling = SamplingParams(**(search_section.sampling or {"max_tokens": 1024}))
    return agentic_proposer.InProcessToolClient(policy.sampler, tokenizer, sampling)
  return agentic_proposer.OpenAIToolClient(
      search_section.base_url, search_section.model,
      api_key_env=search_section.api_key_env or None,
      timeout_seconds=search_section.timeout_seconds, max_retries=search_section.max_retries,
      max_consecutive_failures=search_section.max_consecutive_failures)


def _build_agent(search_section, policy, tokenizer, domain, recipe):
  """An unbound AgenticProposer or CliAgentProposer (the loop binds it with for_search)."""
  kind = search_section.proposer
  if domain is None:
    raise ValueError(f"config.search.proposer={kind!r} needs the domain (build_proposer(..., "
                     "domain=...)): its splits' references are withheld from the agent.")
  common = dict(
      search_answers=search_section.search_answers or default_search_answers(recipe),
      withheld=agentic_proposer.held_out_strings(domain.splits()),
      instructions=(steering.load_file(search_section.instructions)
                    if search_section.instructions else None),
      name=search_section.name or kind)
  if kind == "agentic":
    return agentic_proposer.AgenticProposer(
        agent_client(search_section, policy, tokenizer), None, domain, None,
        budgets=search_section.agent_budgets,
        sampling={} if search_section.agent_backend == "in_process"
        else dict(search_section.sampling or {}), seed=search_section.seed,
        tokenizer=tokenizer, use_run_tool=search_section.run_tool, **common)
  runner = cli_agent.BwrapRunner(
      read_only_paths=search_section.read_only_paths,
      pass_environment=search_section.pass_environment,
      environment=search_section.environment or None,
      endpoint=tuple(search_section.endpoint) if search_section.endpoint else None,
      https_allow=tuple(search_section.https_allow))
  return cli_agent.CliAgentProposer(
      search_section.command, None, domain, None, runner=runner,
      wall_clock_seconds=search_section.wall_clock_seconds,
      max_cost_usd=search_section.max_cost_usd, session_per=search_section.session_per,
      use_run_tool=search_section.run_tool, budgets=search_section.agent_budgets, **common)


def build_proposer(search_section, policy, tokenizer, domain=None, recipe=None):
  """The proposer of a search section (a Meta-Harness proposer or a Harness Learning teacher).

  Args:
    search_section: an sections.SearchSection (module docstring; its context_tokens and
      max_lines are the search's: build_run puts them in the Run).
    policy: the solver Policy; "in_process" proposes with its sampler (or, with model_path,
      with another checkpoint on the sampler's mesh).
    tokenizer: the solver's tokenizer.
    domain: the tasks.Domain ("agentic" and "cli_agent" need it: its held-out references are
      withheld, its name picks the steering file).
    recipe: the recipe the proposer serves (the default of search_answers).
  """
  kind = search_section.proposer
  if kind in ("agentic", "cli_agent"):
    return _build_agent(search_section, policy, tokenizer, domain, recipe)
  if kind == "edit_library":
    return edit_library.EditLibraryProposer(
        seed=search_section.seed, mechanisms=search_section.mechanisms,
        edit_catalogue=getattr(domain, "edit_catalogue", None) or None)
  if kind == "in_process":
    backend, proposer_tokenizer = policy.sampler, tokenizer
    if search_section.model_path:  # a proposer checkpoint different from the solver
      # On a local mesh: on a multi-host run only host 0 proposes (algorithms/hosts.py).
      local = policy.sampler_mesh
      model_config, params = hf.load_hf(search_section.model_path, mesh=local)
      proposer_tokenizer = load_tokenizer(search_section.tokenizer or search_section.model_path)
      backend = Sampler(model_config, params, tokenizer=proposer_tokenizer, mesh=local)
    return model_proposer.in_process_proposer(backend, proposer_tokenizer,
                                              SamplingParams(**search_section.sampling),
                                              seed=search_section.seed)
  if kind == "openai":
    # The chat call's keywords, as a dict: the endpoint, not SamplingParams, interprets them.
    return model_proposer.openai_proposer(
        search_section.base_url, search_section.model, api_key_env=search_section.api_key_env,
        timeout_seconds=search_section.timeout_seconds, max_retries=search_section.max_retries,
        sampling=dict(search_section.sampling), seed=search_section.seed,
        name=search_section.name or None,
        initial_backoff_seconds=search_section.initial_backoff_seconds,
        max_backoff_seconds=search_section.max_backoff_seconds,
        max_consecutive_failures=search_section.max_consecutive_failures,
        extra_body=search_section.extra_body)
  raise ValueError(f"config.search.proposer={kind!r}; use one of {', '.join(PROPOSERS)}.")


def build_runtime(sampler, tokenizer, domain, runtime):
  """The HarnessRuntime serving sampler (runtime: a RuntimeConfig), allowing the domain's
  imports unless runtime.allowed_imports names others."""
  return HarnessRuntime(sampler, tokenizer, **runtime.keywords(domain.allowed_imports))


def build_checked_domain(domain_section, workdir, key_path="config.domain"):
  """build_domain, its errors (a split larger than the data, a missing file) as a
  ConfigError naming key_path: called before the model loads."""
  try:
    return build_domain(with_judge_cache(domain_section, workdir))
  except (ValueError, TypeError, OSError) as error:
    raise typed_config.ConfigError(typed_config.one_line(error, key_path)) from None


def build_run(experiment, workdir, show_progress=True, recipe=None):
  """Builds (or, when workdir holds a checkpoint, restores) the Run of an ExperimentConfig
  (a ConfigDict is parsed first).

  The domain is built first, before the mesh and the model: a bad split size or data file
  fails in seconds. recipe: the recipe the Run serves (default experiment.recipe; a
  "compare" run passes each method), for the proposer's per-recipe defaults.
  """
  experiment = experiment_config.parse(experiment, workdir)
  domain = build_checked_domain(experiment.domain, workdir)
  mesh = build_mesh(experiment.mesh)
  model_config, params, model_dir = load_model(experiment.model, mesh)
  tokenizer = load_run_tokenizer(experiment.tokenizer, model_dir)
  policy = policy_lib.Policy(model_config, params, tokenizer, mesh, experiment.training)
  # On a multi-host run the agent, and the episodes of its `run` tool, run on host 0 only
  # (loop.bind_proposer).
  runtime, proposer = hosts.for_processes(
      build_runtime(policy.sampler, tokenizer, domain, experiment.runtime),
      build_proposer(experiment.search, policy, tokenizer, domain,
                     recipe or experiment.recipe))
  manager = checkpoint_lib.make_manager(os.path.join(workdir, "checkpoints"), max_to_keep=2)
  run = loop.Run(
      workdir=workdir, loop=experiment.loop, policy=policy,
      runtime=runtime, domain=domain, sampling=experiment.sampling,
      eval_sampling=experiment.eval_sampling, proposer=proposer,
      log=run_log.RunLog(workdir, enabled=jax.process_index() == 0),
      counts=run_log.RolloutCounts(), state=loop.LoopState(incumbent=domain.seed_harness),
      manager=manager, tokenizer=tokenizer, show_progress=show_progress,
      search_context_tokens=experiment.search.context_tokens,
      search_max_lines=experiment.search.max_lines)
  loop.restore(run, train_state.abstract(model_config, policy.optimizer, mesh,
                                         rules.TRAIN_RULES))
  return run
