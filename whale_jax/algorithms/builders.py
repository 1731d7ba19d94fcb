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
            (base_url, model, api_key_env, ...): the SearchQA LLM judge over an
            OpenAI-compatible endpoint.
  search    proposer "edit_library" (seed), "in_process" (sampling, seed, and optionally
            model_path/tokenizer of another checkpoint) or "openai" (base_url, model,
            api_key_env, sampling = the chat call's keywords, seed, timeout_seconds,
            max_retries).
  runtime   HarnessRuntime keyword arguments (num_workers, timeout_seconds, memory_bytes, ...).
  mesh      {data, fsdp, tensor} sizes, and num_devices (use the first N; 0 = all).
"""
import os

import jax

from whale_jax import tasks
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
from whale_jax.search import edit_library
from whale_jax.search import model_proposer
from whale_jax.tasks import judge as judge_lib
from whale_jax.tokenization import load_tokenizer
from whale_jax.train import checkpoint as checkpoint_lib
from whale_jax.train import train_state

EMBEDDED_SOLVER = options.EMBEDDED_SOLVER
PROPOSERS = options.PROPOSERS


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


def build_domain(domain_section):
  """The tasks.Domain of a domain section (name + builder options, judge section built)."""
  domain_section = dict(domain_section)
  name = domain_section.pop("name")
  if isinstance(domain_section.get("judge"), dict):
    domain_section["judge"] = build_judge(domain_section["judge"])
  return tasks.get_domain(name, **domain_section)


def build_proposer(search_section, policy, tokenizer):
  """The proposer of a search section (a Meta-Harness proposer or a Harness Learning teacher).

  Args:
    search_section: {"proposer": one of PROPOSERS, ...its options} (module docstring).
    policy: the solver Policy; "in_process" proposes with its sampler (or, with model_path,
      with another checkpoint on the sampler's mesh).
    tokenizer: the solver's tokenizer.
  """
  search_section = dict(search_section)
  kind = search_section.pop("proposer", "edit_library")
  seed = search_section.pop("seed", 0)
  if kind == "edit_library":
    return edit_library.EditLibraryProposer(seed=seed)
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


def build_run(config, workdir, show_progress=True):
  """Builds (or, when workdir holds a checkpoint, restores) the Run of an experiment config."""
  mesh = build_mesh(section(config, "mesh"))
  model_config, params, model_dir = load_model(section(config, "model"), mesh)
  tokenizer = load_run_tokenizer(config.get("tokenizer", ""), model_dir)
  domain = build_domain(section(config, "domain"))
  policy = policy_lib.Policy(model_config, params, tokenizer, mesh,
                             options.PolicyConfig(**section(config, "training")))
  runtime, proposer = hosts.for_processes(
      build_runtime(policy.sampler, tokenizer, domain, section(config, "runtime")),
      build_proposer(section(config, "search"), policy, tokenizer))
  sampling = SamplingParams(**section(config, "sampling"))
  manager = checkpoint_lib.make_manager(os.path.join(workdir, "checkpoints"), max_to_keep=2)
  run = loop.Run(
      workdir=workdir, loop=options.LoopConfig(**section(config, "loop")), policy=policy,
      runtime=runtime, domain=domain, sampling=sampling,
      eval_sampling=sampling.replace(**section(config, "eval_sampling")), proposer=proposer,
      log=run_log.RunLog(workdir, enabled=jax.process_index() == 0),
      counts=run_log.RolloutCounts(), state=loop.fresh_state(domain.seed_harness),
      manager=manager, tokenizer=tokenizer, show_progress=show_progress)
  loop.restore(run, train_state.abstract(model_config, policy.optimizer, mesh,
                                         rules.TRAIN_RULES))
  return run
