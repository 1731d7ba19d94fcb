"""Shared pieces of experiment configs: plain functions returning dicts."""
import difflib


def parse_args(arg, allowed, config_file):
  """The words of a get_config argument ("math,adaptive") as a set; a word that is not in
  allowed raises ValueError naming it, the closest allowed word and every allowed word."""
  words = {word.strip() for word in arg.split(",") if word.strip()} if arg else set()
  for word in sorted(words):
    if word not in allowed:
      close = difflib.get_close_matches(word, allowed, n=1, cutoff=0.6)
      hint = f" (did you mean {close[0]!r}?)" if close else ""
      raise ValueError(f"--config={config_file}:{arg}: {word!r} is not an argument of "
                       f"{config_file}{hint}; use comma-separated words of "
                       f"{', '.join(allowed)}.")
  return words


def tiny_model(vocab_size=267):
  """A random 2-layer Qwen3-style model for smoke runs on CPU (byte tokenizer vocabulary)."""
  return dict(source="random", seed=0, vocab_size=vocab_size, num_layers=2, embed_dim=64,
              mlp_dim=128, num_heads=4, num_kv_heads=2, head_dim=16, rope_theta=10_000.0,
              max_position_embeddings=4096)


OFFLINE_DOMAINS = {"searchqa": "synthetic_qa"}  # math and chess have offline data built in


def tiny_domain(name="synthetic_qa", **options):
  """The offline version of a domain with a few instances per split."""
  sizes = {"weight": 16, "harness": 4, "validation": 4, "test": 4}
  return dict(name=OFFLINE_DOMAINS.get(name, name), seed=0, split_sizes=sizes, **options)


def smoke(config):
  """Shrinks any config to a CPU smoke run of about a minute: tiny model, few rollouts."""
  config.model = tiny_model()
  config.tokenizer = "byte"
  config.domain = tiny_domain(config.domain.get("name", "synthetic_qa"))
  config.sampling = dict(max_tokens=24, temperature=1.0, top_k=20)
  config.eval_sampling = dict()
  config.training.update(row_length=2048, samples_per_step=16,
                         sampler=dict(max_slots=16, steps_per_call=16, max_cache_length=2048))
  config.training.optimizer = dict(learning_rate=1e-3, warmup_steps=0)
  config.loop.update(prompt_batch=4, num_samples=2, search_iterations=2,
                     candidates_per_iteration=2, eval_num_samples=1, eval_interval_rollouts=0,
                     eval_interval_epochs=0.0, score_threshold=-1.0)
  config.runtime = dict(num_workers=2, timeout_seconds=30.0, allow_weak_sandbox=False)
  config.mesh = dict(data=1, num_devices=1)
  return config


def paper_sampling(max_tokens=8192):
  """WHALE's rollout sampling (SPEC 1.5): temperature 1, top-p 1, top-k 20."""
  return dict(max_tokens=max_tokens, temperature=1.0, top_p=1.0, top_k=20)


TINY_ENDPOINT = "http://127.0.0.1:8000/v1"   # a `python -m whale_jax.serve` on this machine


def tiny(config, split_sizes, model=None, max_tokens=48):
  """Shrinks a paper config to a CPU run of a few minutes that changes only sizes: a tiny
  model (model, default tiny_model() with the byte tokenizer), split_sizes, a few rollouts,
  steps and candidates, short replies, 2 sandbox workers. Every component stays the paper's:
  the domain's file loaders (its paths, relative to the working directory), the proposer and
  judge endpoints (set config.search.base_url / config.domain.judge.base_url by flag, e.g.
  --config.search.base_url=http://127.0.0.1:8123/v1), the sandboxed runtime."""
  if model is None:
    config.model, config.tokenizer = tiny_model(), "byte"
  else:
    config.model, config.tokenizer = model
  config.domain.split_sizes = split_sizes
  config.sampling = dict(config.sampling, max_tokens=max_tokens)
  config.eval_sampling = dict()
  config.training.update(row_length=2048, samples_per_step=16, num_microbatches=1,
                         sampler=dict(max_slots=16, steps_per_call=16, max_cache_length=2048))
  config.training.optimizer = dict(learning_rate=1e-3, warmup_steps=0)
  config.loop.update(prompt_batch=4, num_samples=2, search_iterations=2,
                     candidates_per_iteration=2, eval_num_samples=1, eval_interval_rollouts=0,
                     eval_interval_epochs=0.0, checkpoint_every_steps=1)
  if config.search.get("proposer") in ("openai", "agentic"):
    config.search.base_url = TINY_ENDPOINT
    config.search.sampling = dict(config.search.sampling, max_tokens=64)
  if "judge" in config.domain:
    config.domain.judge.update(base_url=TINY_ENDPOINT, max_tokens=8, backoff_seconds=0.0)
  config.runtime = dict(num_workers=2, timeout_seconds=60.0, allow_weak_sandbox=False)
  config.mesh = dict(data=1, num_devices=1)
  return config


# The papers' proposer (SPEC 1.6; Meta-Harness's claude_wrapper): Claude Code headless, Opus
# 4.7 at effort max, WHALE's tool list (no subagents). {prompt} is the session's task line.
CLAUDE_CODE_COMMAND = ("claude", "-p", "{prompt}", "--model", "{model}", "--effort", "{effort}",
                       "--output-format", "json", "--allowedTools",
                       "Read,Glob,Grep,Write,Edit,Bash")


def claude_code_search(model="claude-opus-4-7", effort="max", wall_clock_seconds=2400.0,
                       read_only_paths=()):
  """config.search for the CLI coding-agent proposer as WHALE runs it: one `claude -p` session
  per iteration (2,400 s) writes the M candidates and pending_eval.json in the jail
  (search/cli_agent.py), with `run` for prototyping drafts on search tasks (its episodes
  count as harness rollouts; agent_budgets: AgentBudgets' defaults) and HTTPS to the
  Anthropic API only, with $ANTHROPIC_API_KEY passed in. Claude Code must be installed where
  the jail sees it: under /usr (e.g. `npm install -g @anthropic-ai/claude-code` with node from
  the system), or add its folders to read_only_paths."""
  command = tuple(part.format(model=model, effort=effort) if part in ("{model}", "{effort}")
                  else part for part in CLAUDE_CODE_COMMAND)
  return dict(proposer="cli_agent", command=command, wall_clock_seconds=wall_clock_seconds,
              session_per="iteration", run_tool=True, pass_environment=("ANTHROPIC_API_KEY",),
              https_allow=("api.anthropic.com:443",), read_only_paths=tuple(read_only_paths))
