r"""The embedded default: WHALE against weight-only and harness-only on a tiny solver, on CPU.

The solver is whale_jax/assets/demo_solver (trained by configs/embedded_solver.py on other
worlds); the task is a synthetic multi-hop QA world it has never seen, under the compact seed
harness (two turns, top-1 passage cut to 12 words). The offline edit library may change only
how many turns the solver gets, how many passages a search shows and how long each is
(MECHANISMS). What these edits show is worth more once RSFT under them has taught the solver
to use it; the edits that do the solver's work for it (the question as the search query, a
retrieval before the first turn) are left out. Every method starts from the same
(weights, harness), searches the same harness space and spends the same budget of training
rollouts; test mean@k is paired (same questions, same seeds). Prints a table and what WHALE
changed and when, and writes workdir/best_so_far.png and workdir/changes.md;
bench/demo_pairs.py scores (weights, harness) pairs across the methods' final checkpoints on
the same questions.

  python -m whale_jax.main --config=configs/demo.py --workdir=runs/demo
  python -m whale_jax.main --config=configs/demo.py --config.loop.seed=1 --config.search.seed=1 \
      --workdir=runs/demo1
  python -m whale_jax.main --config=configs/demo.py:in_process --workdir=runs/demo_model
  python -m whale_jax.main --config=configs/demo.py:smoke --workdir=/tmp/demo_smoke
  python -m whale_jax.main --config=configs/demo.py:vace --workdir=runs/demo_vace
  python -m whale_jax.main --config=configs/demo.py:vace,smoke --workdir=/tmp/vace_smoke

Variants: "in_process" proposes harness edits with the solver itself (a tiny model writes
poor patches; it shows the wiring), "openai" with an OpenAI-compatible endpoint
(--config.search.base_url=..., --config.search.model=..., key in PROPOSER_API_KEY).

"vace": VACE's claim on the same world, solver, seed harness and edit library (vace()
below): VACE (GRPO blocks, one edit-library candidate per block from the block's own
trajectories, gated on the validation split at the updated weights), the ungated alternation
(VACE's "WHALE-style": every candidate adopted, the gate still logged), rl_only (the same
GRPO blocks under h0) and vace_harness_only (the same gated candidates at the start weights,
from diagnostic batches), each from the same (weights, h0) with the same rollout cap, each
reporting its best-validation pair (the initial pair included), test mean@3 on the same 300
questions with paired differences, and the gate log summarised (6 min 24 s on 2 CPU cores at
load average 2-4, 12 min at 8; the README's "VACE's claim" section has its numbers).
"""
import ml_collections

from configs import presets

BUDGET_ROLLOUTS = 2048
# The harness edits every method may make: how many turns, how many passages per search and
# how long each is. Each shows the solver more than h0 does, in a form it must learn to read.
MECHANISMS = ("turn_budget", "retrieval_topk", "passage_length")


def get_config(arg: str = ""):
  config = ml_collections.ConfigDict()
  config.recipe = "compare"
  config.methods = ("whale", "weight_only", "harness_only")
  config.model = dict(source="embedded")
  config.tokenizer = "embedded"
  config.domain = dict(name="synthetic_qa", seed=7, seed_harness="searchqa_compact",
                       split_sizes={"weight": -1, "harness": 48, "validation": 48,
                                    "test": 300})
  config.sampling = dict(max_tokens=16, temperature=1.0, top_k=20)
  config.eval_sampling = dict()
  config.training = dict(optimizer=dict(learning_rate=2e-4, warmup_steps=0),
                         row_length=512, samples_per_step=64,
                         sampler=dict(max_slots=64, steps_per_call=16, max_cache_length=512))
  config.loop = dict(seed=0, prompt_batch=32, num_samples=4, score_threshold=0.5,
                     sft_epochs=3, search_iterations=2, candidates_per_iteration=3,
                     eval_num_samples=2, eval_interval_rollouts=1024,
                     checkpoint_every_steps=4)
  config.whale = dict(weight_epochs=0.125, total_weight_epochs=100.0,
                      budget_rollouts=BUDGET_ROLLOUTS, max_cycles=30)
  config.baseline = dict(total_weight_epochs=100.0, search_iterations=100,
                         budget_rollouts=BUDGET_ROLLOUTS)
  config.vace = dict(num_cycles=4, block_steps=4, budget_rollouts=BUDGET_ROLLOUTS)
  config.search = dict(proposer="edit_library", seed=0, mechanisms=MECHANISMS)
  # The default demo's harnesses come from the offline edit library (this project's own edits
  # of the seed harness), so where the machine cannot confine them (no bubblewrap) it runs them
  # anyway, with a warning; with bubblewrap present they run confined as always. Proposers that
  # write code (in_process, openai) are untrusted: those variants refuse to run unconfined.
  config.runtime = dict(num_workers=16, timeout_seconds=60.0, allow_weak_sandbox=True)
  config.mesh = dict(data=1, num_devices=1)
  args = presets.parse_args(arg, ("in_process", "openai", "smoke", "vace"), "configs/demo.py")
  if "vace" in args:
    vace(config)
  if "in_process" in args or "openai" in args:
    config.runtime.allow_weak_sandbox = False
  if "in_process" in args:
    config.search = dict(proposer="in_process", sampling=dict(max_tokens=256,
                                                              temperature=1.0))
  if "openai" in args:
    config.search = dict(proposer="openai", base_url="http://localhost:8000/v1",
                         model="proposer", api_key_env="PROPOSER_API_KEY",
                         sampling=dict(max_tokens=8192, temperature=1.0))
  if "smoke" in args and "vace" in args:
    vace_smoke(config)
  elif "smoke" in args:
    config.domain.split_sizes = {"weight": 16, "harness": 4, "validation": 4, "test": 8}
    config.loop.update(prompt_batch=4, num_samples=2, eval_num_samples=1,
                       eval_interval_rollouts=0)
    config.whale.update(weight_epochs=0.5, budget_rollouts=48)
    config.baseline.budget_rollouts = 48
    config.runtime.num_workers = 2
  return config


VACE_CYCLES = 4        # gated revisions (harness candidates) per run
VACE_BLOCK_STEPS = 3   # GRPO steps per block: 4 x 3 = 12 updates for vace, ungated, rl_only


def vace(config):
  """VACE's methods on the demo's world (module docstring). GRPO as configs/vace.py runs it:
  groups of 8, advantages (r - mean) / std, DAPO's filtering of zero-advantage groups,
  clip 0.2 / 0.28, no KL term; 16 prompts per step (the demo's size, not the paper's 32).
  No DAPO refill rounds: with configs/vace.py's 2, each step sampled 3 x 128 episodes to find
  informative groups (the solver fails most questions under h0) and the 2,048-rollout budget
  held 2 of VACE's 4 gated revisions (README, settings tried). The validation split (48 questions) is the gate's and the selection's;
  the harness split is unused (VACE proposes from the block's trajectories, harness_only from
  a diagnostic batch of 16 x 8 weight-split episodes). Every method stops at the demo's
  2,048 training rollouts (weight + harness, gates and validations included) or after
  VACE_CYCLES cycles; test mean@3 (3 evaluations, as the paper) at the start and the end."""
  config.methods = ("vace", "ungated", "rl_only", "vace_harness_only")
  config.domain.split_sizes = {"weight": -1, "harness": 0, "validation": 48, "test": 300}
  config.training.grpo = dict(clip_epsilon=0.2, clip_epsilon_high=0.28, kl_weight=0.0)
  config.loop.update(prompt_batch=16, num_samples=8, advantage_normalization="grpo",
                     filter_zero_advantage=True, max_refill_rounds=0, search_iterations=2,
                     candidates_per_iteration=1, eval_num_samples=3, eval_interval_rollouts=0,
                     gate_rule="strict", checkpoint_every_steps=VACE_BLOCK_STEPS)
  config.vace = dict(num_cycles=VACE_CYCLES, block_steps=VACE_BLOCK_STEPS,
                     budget_rollouts=BUDGET_ROLLOUTS)


def vace_smoke(config):
  """The vace variant at test size: 2 cycles of 1-step blocks on a few questions."""
  config.domain.split_sizes = {"weight": 16, "harness": 0, "validation": 4, "test": 6}
  config.loop.update(prompt_batch=2, num_samples=4, eval_num_samples=2,
                     checkpoint_every_steps=1)
  config.vace = dict(num_cycles=2, block_steps=1, budget_rollouts=BUDGET_ROLLOUTS)
  config.runtime.num_workers = 2
