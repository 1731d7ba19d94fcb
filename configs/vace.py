r"""VACE (validation-gated alternation of GRPO blocks and one harness candidate; SPEC 2) on
OfficeQA ("docqa") or AutomationBench ("toolflow"), and the paper's baselines as methods.

Paper settings (SPEC 2.2-2.5): Qwen3.5-9B; OfficeQA split 84 train / 53 validation / 109 test
(binary correctness), AutomationBench's HR, Marketing and Finance tasks split 80 / 58 / 71
(partial credit); GRPO with DAPO-style oversampling and filtering of groups whose
advantages are all zero;
one harness candidate per round from the round's RL trajectories, kept only on strict
improvement of the validation mean at the updated checkpoint (ties keep the incumbent); the
reported pair is the one with the best validation score seen; test = mean of 3 evaluations
(eval_num_samples=3: every test task run 3 times, averaged). 12 harness trials on OfficeQA and
32 on AutomationBench (Table 3). Healthy run (the paper, Qwen3.5-9B): the retained pair's
validation score rises, not monotonically (OfficeQA 30.3% -> 47.2%, 7 accepts / 2 ties /
3 rejects; AutomationBench 53.1% -> 81.4%, 18 / 0 / 14), every decision in
gate_decisions.jsonl with both validation means.

Guesses where the paper is silent (each marked "guess" below): group size 8, learning rate
1e-6, prompts per step 32, block length 5 GRPO steps (Table 4 evaluates proposals at RL
updates 5, 15, 30), up to 2 DAPO refill rounds per step, DAPO clip-higher 0.2 / 0.28
without a KL term, sampling at temperature 1
and top-k 20, the proposer endpoint, the verifier tolerance (the domain's default).

Harness-edit scope (SPEC 2.1: "skills and execution guidance"; config.vace.edit_scope,
default "guidance", search/edit_scope.py): a candidate may change only the values of the
harness's module-level literal constants: the instruction texts the model reads (SYSTEM_PROMPT,
USER_PROMPT_TEMPLATE, where skills and guidance are written) and the execution rules
(MAX_TURNS, MAX_RESULT_CHARS, calls per turn, ...), each to another literal. Every function
(how the model and the tools are called, how replies are parsed, what is returned), every
import and the set of constants stay the incumbent's, so tool semantics, the evaluator and
the environment's rules are fixed. A candidate outside the scope is refused before it costs a
rollout (archived as rejected, reason edit_scope), like one that fails a static check; the
proposer's instructions say so and the edit library proposes only in-scope edits.
edit_scope="any" lifts the restriction.

Proposer (what the paper uses, SPEC 2.2): a trajectory-driven optimizer in HarnessEvolve's
style, one candidate per round from that round's RL trajectories, its model and prompt not
published. Here: one chat call per round (proposer "openai", one-shot) on a context built
from the block's trajectories, cut to config.search.context_tokens; the endpoint and model are
guesses (set --config.search.base_url and --config.search.model). Not the Claude Code session
of configs/whale.py: VACE's paper does not use a CLI coding agent.

Methods (one word of the argument; default vace), with the same budgets (12 or 32 harness
candidates, 5 GRPO updates per candidate) and, but for sia, the same splits:
  vace          GRPO blocks + one gated candidate per block (recipe "vace").
  whale_style   the same alternation without the gate: every runnable candidate is kept
                (recipe "ungated").
  rl_only       GRPO under the seed harness for the same number of updates, in blocks of
                BLOCK_STEPS, the pair scored on validation after every block (recipe
                "rl_only", vace.schedule="rl_only").
  harness_only  the same gated candidates at W0 with no GRPO step at all (recipe
                "vace_harness_only", vace.schedule="harness_only"): each cycle runs one
                diagnostic batch (a GRPO
                batch's worth of training tasks, counted as harness rollouts; its size a
                guess) under the current harness, proposes from it and gates the candidate.
  sia           SIA-style (recipe "vace", vace.schedule="harness_first"): the harness_only
                phase first (the same gated candidates at W0), then as many GRPO updates
                as VACE's blocks hold with the harness it kept fixed, the pair scored on
                validation after every block of BLOCK_STEPS updates.
  static        the seed pair, evaluated only (recipe "weight_only" with a rollout budget
                too small for one weight step).
Every method reports the pair with the best validation score it saw (the gate's means, or
one validation evaluation after an RL block), the initial pair among the candidates, and its
test mean over 3 evaluations (each evaluation's mean and their standard deviation beside it:
summary.json's final_per_evaluation, final_evaluation_std). The
AutomationBench split is drawn per domain (Table 1: HR 26/15/24, Marketing 27/22/23,
Finance 27/21/24 train/validation/test); the paper does not say how, so each domain's tasks
are drawn by a seeded shuffle of their own (a guess; tasks/toolflow_files.split_by_domain).
Tasks whose app state or assertions whale_jax does not support are left out before that draw
(unsupported="skip"); at load time one log line per domain says how many and why, and
summary.json's domain_counters hold dropped_tasks_<domain> and dropped_reasons_<domain>. The
test mean per domain is summary.json's final_per_domain (and a column of the methods table).
The smoke variant splits its generated tasks per domain too (5/2/2 of each); tiny splits
the pooled file (TINY_SPLITS).

  The methods table (final test mean, gates, GRPO steps, rollouts, behaviour metrics) of runs
  made with this file: vace.method_table({method: summary}) (whale_jax/algorithms/vace.py).

  python -m whale_jax.main --config=configs/vace.py:docqa --workdir=/mnt/whale/vace/officeqa
  python -m whale_jax.main --config=configs/vace.py:toolflow,rl_only --workdir=...
  python -m whale_jax.main --config=configs/vace.py:docqa,smoke --workdir=/tmp/vace  # CPU
  python -m whale_jax.main --config=configs/vace.py:toolflow,smoke,sia --workdir=/tmp/vs
  python -m whale_jax.main --config=configs/vace.py:docqa,tiny --workdir=/tmp/vt \
      --config.search.base_url=http://127.0.0.1:8123/v1   # paper path (served proposer), CPU
  python -m whale_jax.main --config=configs/vace.py:toolflow,tiny --workdir=/tmp/vf \
      --config.search.base_url=http://127.0.0.1:8123/v1   # the same on AutomationBench records
"""
import ml_collections

from configs import presets

DOMAINS = {
    "docqa": dict(name="docqa", questions=["data/officeqa/officeqa_full.csv"],
                  corpus="data/officeqa/treasury_bulletins_parsed/transformed_page_level",
                  split_sizes={"weight": 84, "harness": 0, "validation": 53, "test": 109}),
    "toolflow": dict(name="toolflow", tasks=["data/automationbench/tasks.jsonl"],
                     domains=("hr", "marketing", "finance"),
                     split_sizes_by_domain={   # Table 1, each domain drawn on its own
                         "hr": {"weight": 26, "harness": 0, "validation": 15, "test": 24},
                         "marketing": {"weight": 27, "harness": 0, "validation": 22,
                                       "test": 23},
                         "finance": {"weight": 27, "harness": 0, "validation": 21,
                                     "test": 24}},
                     reward="partial", exclude_initially_satisfied=True, unsupported="skip"),
}
HARNESS_TRIALS = {"docqa": 12, "toolflow": 32}   # Table 3: harness proposals per run
BLOCK_STEPS = 5                                  # guess: GRPO steps per block (Table 4)
PROMPT_BATCH = 32                                # guess: prompts per GRPO step
METHODS = {"vace": "vace", "whale_style": "ungated", "rl_only": "rl_only",
           "harness_only": "vace_harness_only", "sia": "vace", "static": "weight_only"}
SCHEDULES = {"sia": "harness_first"}   # config.vace.schedule
SMOKE_SPLIT_PER_DOMAIN = {"weight": 5, "harness": 0, "validation": 2, "test": 2}
SMOKE_DOMAINS = {
    "docqa": dict(seed_harness="docqa_compact", num_issues=4),
    "toolflow": dict(seed_harness="toolflow_compact", tasks_per_domain=10,
                     exclude_initially_satisfied=True),
}


def split_totals(domain):
  """{split: size} of a domain section, summed over split_sizes_by_domain when it has one."""
  if "split_sizes_by_domain" in domain:
    totals = {}
    for sizes in domain["split_sizes_by_domain"].values():
      for name, size in sizes.items():
        totals[name] = totals.get(name, 0) + size
    return totals
  return dict(domain["split_sizes"])


def _rl_epochs(num_updates, prompt_batch, train_size):
  """Weight epochs that make loop.steps_for_epochs come to num_updates GRPO steps."""
  return num_updates * prompt_batch / train_size * (1 - 1e-9)


def get_config(arg: str = "docqa"):
  args = presets.parse_args(arg, tuple(DOMAINS) + tuple(METHODS) + ("smoke", "tiny"),
                            "configs/vace.py")
  domains = [name for name in DOMAINS if name in args]
  methods = [name for name in METHODS if name in args]
  if len(domains) > 1 or len(methods) > 1:
    raise ValueError(f"--config=configs/vace.py:{arg}: name at most one domain "
                     f"({', '.join(DOMAINS)}) and one method ({', '.join(METHODS)}).")
  domain = domains[0] if domains else "docqa"
  method = methods[0] if methods else "vace"
  config = ml_collections.ConfigDict()
  config.recipe = METHODS[method]
  # remat: rows of 32,768 tokens of the 9B model need full recomputation to fit a v5p chip
  # (docs/pod_memory.md).
  config.model = dict(source="hf", path="checkpoints/Qwen/Qwen3.5-9B", dtype="bfloat16",
                      remat="full")
  config.tokenizer = ""
  config.domain = dict(DOMAINS[domain])
  config.sampling = presets.paper_sampling()   # guess: temperature 1, top-k 20, 8192 tokens
  config.eval_sampling = dict()
  config.training = dict(
      optimizer=dict(learning_rate=1e-6, warmup_steps=0),        # guess
      grpo=dict(clip_epsilon=0.2, clip_epsilon_high=0.28, kl_weight=0.0),  # guess (DAPO)
      row_length=32_768, samples_per_step=32, num_microbatches=8,
      sampler=dict(max_slots=256, steps_per_call=64, max_cache_length=32_768))
  config.loop = dict(seed=0, prompt_batch=PROMPT_BATCH,
                     num_samples=8,                    # guess: group size
                     advantage_normalization="grpo", filter_zero_advantage=True,
                     max_refill_rounds=2,              # guess: DAPO oversampling rounds
                     search_iterations=HARNESS_TRIALS[domain] + 1, candidates_per_iteration=1,
                     eval_num_samples=3, eval_interval_rollouts=0, gate_rule="strict",
                     checkpoint_every_steps=BLOCK_STEPS)
  config.vace = dict(num_cycles=HARNESS_TRIALS[domain], block_steps=BLOCK_STEPS)
  train_size = split_totals(config.domain)["weight"]
  config.baseline = dict(
      total_weight_epochs=_rl_epochs(HARNESS_TRIALS[domain] * BLOCK_STEPS, PROMPT_BATCH,
                                     train_size),
      search_iterations=HARNESS_TRIALS[domain] + 1, weight_update="grpo")
  config.search = dict(proposer="openai", base_url="http://localhost:8001/v1",   # guess
                       model="proposer", api_key_env="PROPOSER_API_KEY",
                       sampling=dict(max_tokens=32_000, temperature=1.0),
                       context_tokens=16_000)
  # guess: 8,192 generated tokens per rollout over all its model calls, thinking on.
  config.runtime = dict(num_workers=256, timeout_seconds=1800.0, allow_weak_sandbox=False,
                        max_episode_tokens=8192, enable_thinking=True)
  config.mesh = dict(data=-1, fsdp=8, tensor=1)
  if "smoke" in args:
    smoke(config, domain)
  if "tiny" in args:
    tiny(config, domain)
  _method(config, method)
  return config


def smoke(config, domain):
  """A CPU run of a few minutes on the offline generator: tiny random model, compact seed
  harness, 2 cycles of 1-step GRPO blocks, the edit library as proposer. The random model's
  groups mostly score alike, so zero-advantage groups are kept (filtering off) to exercise
  the update."""
  presets.smoke(config)
  config.domain = presets.tiny_domain(domain, **SMOKE_DOMAINS[domain])
  if domain == "toolflow":   # per domain, as the paper's split
    del config.domain["split_sizes"]
    config.domain.domains = DOMAINS["toolflow"]["domains"]
    config.domain.split_sizes_by_domain = {name: dict(SMOKE_SPLIT_PER_DOMAIN)
                                           for name in config.domain.domains}
  config.loop.update(search_iterations=3, candidates_per_iteration=1,
                     filter_zero_advantage=False, max_refill_rounds=0, eval_num_samples=1,
                     checkpoint_every_steps=1)
  config.vace = dict(num_cycles=2, block_steps=1)
  config.baseline = dict(total_weight_epochs=_rl_epochs(2, config.loop.prompt_batch,
                                                        split_totals(config.domain)["weight"]),
                         search_iterations=3, weight_update="grpo")
  config.search = dict(proposer="edit_library")
  return config


TINY_SPLITS = {"docqa": {"weight": 4, "harness": 0, "validation": 2, "test": 2},
               "toolflow": {"weight": 4, "harness": 0, "validation": 2, "test": 2}}


def tiny(config, domain):
  """The paper config at CPU size, only sizes changed (presets.tiny): the OpenAI-compatible
  proposer at presets.TINY_ENDPOINT or --config.search.base_url, the domain's files at the
  paths above (relative to the working directory), the sandbox; 2 cycles of 1-step GRPO
  blocks. Zero-advantage groups are kept (filtering off), as in smoke."""
  if "split_sizes_by_domain" in config.domain:   # a few tasks: the pooled TINY_SPLITS
    del config.domain["split_sizes_by_domain"]
  presets.tiny(config, TINY_SPLITS[domain])
  config.loop.update(search_iterations=3, candidates_per_iteration=1,
                     filter_zero_advantage=False, max_refill_rounds=0)
  config.vace = dict(num_cycles=2, block_steps=1)
  config.baseline = dict(total_weight_epochs=_rl_epochs(2, config.loop.prompt_batch,
                                                        config.domain.split_sizes["weight"]),
                         search_iterations=3, weight_update="grpo")
  config.search.update(model="embedded", api_key_env="", timeout_seconds=120.0,
                       max_retries=2, max_consecutive_failures=3)
  return config


def _method(config, method):
  if method in SCHEDULES:
    config.vace.schedule = SCHEDULES[method]
  if method == "static":         # no weight step fits a budget of one rollout
    config.baseline.budget_rollouts = 1
