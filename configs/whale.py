r"""WHALE (fixed schedule (E, I, M) = (0.6, 6, 3), or adaptive) on SearchQA, math or chess.

Paper settings (SPEC 1.4-1.6): G = 8 rollouts per prompt, keep reward > 0.5, learning rate
1e-7, prompt batch 256, SFT minibatch 64, temperature 1.0, top-k 20, test mean@8 every 0.1
epoch; no validation split. Every setting the papers state, with its source, this file's
value and where it departs or guesses: docs/paper_settings.md. Healthy run
(SearchQA, Qwen3.5-2B): training reward rises within the first cycle and the accepted harness
changes in most harness phases.

Proposer (every method here, Meta-Harness's harness-only baseline included): the papers' CLI
coding agent, one jailed `claude -p` session per iteration (Opus 4.7, effort max, 2,400 s)
that writes the M candidates and pending_eval.json and may `run` drafts on search tasks
(presets.claude_code_search; needs Claude Code installed where the jail sees it and
$ANTHROPIC_API_KEY). One word switches it (the search section's other keys by flag):
  agentic    the tool-calling coding agent over any OpenAI-compatible endpoint
             (search/agentic_proposer.py; --config.search.base_url, --config.search.model)
  one_shot   one chat call per candidate on a context rendered from the archive, cut to
             config.search.context_tokens (16,000) tokens
smoke keeps the offline edit library; tiny keeps the coding agent (give the command by flag).

  python -m whale_jax.main --config=configs/whale.py:searchqa --workdir=/mnt/whale/run1
  python -m whale_jax.main --config=configs/whale.py:math,adaptive --workdir=...
  python -m whale_jax.main --config=configs/whale.py:math,stagewise --workdir=...  # a baseline
  python -m whale_jax.main --config=configs/whale.py:searchqa,agentic --workdir=... \
      --config.search.base_url=http://127.0.0.1:8000/v1 --config.search.model=NAME
  python -m whale_jax.main --config=configs/whale.py:smoke --workdir=/tmp/whale_smoke  # CPU
  python -m whale_jax.main --config=configs/whale.py:searchqa,tiny --workdir=/tmp/w \
      "--config.search.command=('python3', '/path/agent.py', '{prompt}')" \
      "--config.search.read_only_paths=('/path/agent.py',)" \
      --config.domain.judge.base_url=http://127.0.0.1:8124/v1   # paper path, CPU size
"""
import ml_collections

from configs import presets

# The seven SearchQA test sets in FlashRAG's layout (question, golden_answers, id), 100 of each.
SEARCHQA_TEST = tuple(f"data/flashrag/{name}" for name in (
    "nq/test.jsonl", "triviaqa/test.jsonl", "popqa/test.jsonl", "hotpotqa/dev.jsonl",
    "2wikimultihopqa/dev.jsonl", "musique/dev.jsonl", "bamboogle/test.jsonl"))
# D_harness of SearchQA: WHALE's own 256 NQ training questions (SPEC 1.4; the repo's toml
# names it train_meta_harness_nq_256.parquet), taken whole; removed from the weight pool.
SEARCHQA_HARNESS = "data/searchR1_processed/mh_dist_align_256.parquet"
# D_weight: WHALE trains on 18,946 questions of the NQ + HotpotQA train merge (74 steps per
# epoch at 256 prompts); which 18,946 of Search-R1's train file is not published, so they are
# drawn at random with the split seed (a guess; with WHALE's own file, set questions to it
# and split_sizes.weight to -1).
SEARCHQA_WEIGHT_QUESTIONS = 18_946
DOMAINS = {
    "searchqa": dict(name="searchqa", questions=["data/searchR1/train.parquet"],
                     split_questions={"harness": [SEARCHQA_HARNESS],
                                      "test": list(SEARCHQA_TEST)},
                     per_file_sizes={"test": 100},
                     retrieval_urls=["http://localhost:8000/retrieve"], verifier="judge",
                     judge=dict(base_url="http://localhost:8001/v1", model="judge",
                                api_key_env=None,   # tasks.judge.openai_judge options
                                constrained="auto", max_concurrency=64, max_retries=3,
                                cache=True),
                     split_sizes={"weight": SEARCHQA_WEIGHT_QUESTIONS, "harness": 256,
                                  "validation": 0, "test": 700}),
    # DAPO-Math-17K deduplicated (17,917; the splits drop repeats) less D_harness's 256: WHALE
    # draws D_harness from the same pool, here the splits are disjoint.
    "math": dict(name="math", problems=["data/dapo_math_17k.parquet"],
                 split_problems={"test": ["data/aime_2024.jsonl", "data/aime_2025.jsonl"]},
                 split_sizes={"weight": -1, "harness": 256, "validation": 0, "test": 60}),
    # Lichess puzzles with 1-9 solution plies; the test set is 256 of a 1,024 pool; the
    # verifier accepts the reference line only (SPEC 1.4, 1.8).
    "chess": dict(name="chess", puzzles=["data/lichess_db_puzzle.csv"], max_solution_plies=9,
                  accept_any_mate=False, split_pool_sizes={"test": 1024},
                  split_sizes={"weight": 16_384, "harness": 256, "validation": 0,
                               "test": 256}),
}
# WHALE has no validation split (no gate): every validation size above is 0.
MODELS = {"searchqa": "Qwen/Qwen3.5-2B", "math": "Qwen/Qwen3.5-2B", "chess": "Qwen/Qwen3.5-4B"}
WEIGHT_EPOCHS = {"searchqa": 4.0, "math": 6.0, "chess": 4.0}
# Generated tokens per rollout, over all of an episode's model calls (SPEC 1.4: 8,192 cumulative
# assistant tokens; chess 16,384), with the Qwen3.5 thinking mode on.
EPISODE_TOKENS = {"searchqa": 8192, "math": 8192, "chess": 16_384}
# The baselines' budgets (SPEC 1.10): weight-only = WEIGHT_EPOCHS, harness-only Meta-Harness
# iterations, stagewise (E*, I*) = its best weight epochs and search iterations (chess: not
# reported, a guess).
HARNESS_ONLY_ITERATIONS = {"searchqa": 40, "math": 60, "chess": 40}
STAGEWISE = {"searchqa": (2.7, 32), "math": (4.3, 33), "chess": (2.0, 20)}
METHODS = ("weight_only", "harness_only", "stagewise", "fst")
# The proposer switches (module docstring); claude_code, the default, is accepted too.
PROPOSERS = ("claude_code", "agentic", "one_shot")


# "tiny": the paper's components at CPU size (presets.tiny); SearchQA searches a local corpus
# file (BM25) instead of the retrieval server, the solver is the embedded demo model (it writes
# <answer> tags, so the judge is asked).
TINY_SPLITS = {"searchqa": {"weight": -1, "harness": 4, "validation": 0, "test": 7},
               "math": {"weight": -1, "harness": 2, "validation": 0, "test": 4},
               "chess": {"weight": 8, "harness": 2, "validation": 0, "test": 2}}
TINY_TEST_POOL = 4  # chess: the test's 2 drawn from a pool of 4
TINY_MODELS = {"searchqa": (dict(source="embedded"), "embedded")}


def get_config(arg: str = "searchqa"):
  args = presets.parse_args(arg, tuple(DOMAINS) + METHODS + PROPOSERS + ("adaptive", "smoke",
                                                                       "tiny"),
                            "configs/whale.py")
  domain = next((name for name in DOMAINS if name in args), "searchqa")
  method = next((name for name in METHODS if name in args), None)
  config = ml_collections.ConfigDict()
  config.recipe = method or ("whale_adaptive" if "adaptive" in args else "whale")
  # remat: rows of 16,384 tokens need it to fit a v5p chip (docs/pod_memory.md).
  config.model = dict(source="hf", path=f"checkpoints/{MODELS[domain]}", dtype="bfloat16",
                      remat="dots_with_no_batch_dims")
  config.tokenizer = ""
  config.domain = DOMAINS[domain]
  config.sampling = presets.paper_sampling()
  config.eval_sampling = dict()
  # max_cache_length: the longest prompt + max_tokens of one llm call. Twice the row length
  # (samples longer than a row are not trained on); the model's own 262,144 positions for 256
  # slots would be a KV cache that fits no v6e-8 or v5e-16 chip (docs/pod_memory.md).
  # SFT minibatch 64 trajectories (verl counts one sequence per multi-turn episode).
  config.training = dict(optimizer=dict(learning_rate=1e-7, warmup_steps=0), row_length=16_384,
                         samples_per_step=64, minibatch_unit="trajectory", num_microbatches=8,
                         sampler=dict(max_slots=256, steps_per_call=64, max_cache_length=32_768))
  config.loop = dict(seed=0, prompt_batch=256, num_samples=8, score_threshold=0.5,
                     sft_epochs=1, search_iterations=6, candidates_per_iteration=3,
                     eval_num_samples=8, eval_interval_rollouts=0, eval_interval_epochs=0.1,
                     checkpoint_every_steps=4)
  config.whale = dict(weight_epochs=0.6, total_weight_epochs=WEIGHT_EPOCHS[domain],
                      max_cycles=30)
  if method in ("weight_only", "harness_only", "stagewise"):
    epochs, iterations = {
        "weight_only": (WEIGHT_EPOCHS[domain], 1),
        "harness_only": (1.0, HARNESS_ONLY_ITERATIONS[domain]),
        "stagewise": STAGEWISE[domain]}[method]
    config.baseline = dict(total_weight_epochs=epochs, search_iterations=iterations,
                           weight_update="rsft")
  config.search = proposer_search(next((name for name in PROPOSERS if name in args),
                                        "claude_code"))
  # WHALE holds candidates to no line limit; 200 lines (Harness Learning's QA limit) is kept as
  # a guard on the proposer's output, a departure (docs/paper_settings.md).
  config.search.max_lines = 200
  config.runtime = dict(num_workers=256, timeout_seconds=1800.0, allow_weak_sandbox=False,
                        max_episode_tokens=EPISODE_TOKENS[domain], enable_thinking=True)
  config.mesh = dict(data=-1, fsdp=8, tensor=1)
  if "tiny" in args:
    tiny(config, domain)
  if "smoke" in args:
    presets.smoke(config)
    config.whale.update(weight_epochs=0.5, total_weight_epochs=1.0)
    config.search = dict(proposer="edit_library")
  return config


def proposer_search(name):
  """config.search of a proposer switch: "claude_code" (the papers'), "agentic" or
  "one_shot" over an OpenAI-compatible endpoint (module docstring)."""
  if name == "claude_code":
    return presets.claude_code_search()
  endpoint = dict(base_url="https://api.anthropic.com/v1", model="claude-opus-4-7",
                  api_key_env="PROPOSER_API_KEY",
                  sampling=dict(max_tokens=32_000, temperature=1.0))
  if name == "agentic":
    return dict(proposer="agentic", agent_backend="openai", run_tool=True, **endpoint)
  return dict(proposer="openai", context_tokens=16_000, **endpoint)


def tiny(config, domain):
  """The paper config at CPU size: needs the data files (paths as above, relative to the
  working directory), the proposer (the coding agent's command, e.g. a script given by
  --config.search.command and --config.search.read_only_paths; with agentic or one_shot an
  OpenAI-compatible endpoint at presets.TINY_ENDPOINT or --config.search.base_url), for
  SearchQA the judge endpoint (--config.domain.judge.base_url), and the sandbox
  (tests/algorithms/test_paper_smoke.py runs every one)."""
  presets.tiny(config, TINY_SPLITS[domain], TINY_MODELS.get(domain), max_tokens=96)
  if domain == "searchqa":
    config.domain.update(retrieval_urls=None, corpus="data/searchR1/wiki-18.jsonl",
                         per_file_sizes={"test": 1})
    config.domain.judge.update(max_attempts=1)
  if domain == "chess":
    config.domain.split_pool_sizes = {"test": TINY_TEST_POOL}
  if config.search.proposer == "cli_agent":
    # A short session; `run` on at most 2 search tasks (4 episodes) once per session.
    config.search.update(wall_clock_seconds=300.0, agent_budgets=dict(
        max_runs=1, max_run_tasks=2, max_run_episodes=4))
  else:
    config.search.update(model="embedded", api_key_env="", timeout_seconds=120.0,
                         max_retries=2, max_consecutive_failures=3)  # keys, so flags set them
  # One weight step is an epoch of the tiny weight split: cycle 0's weights, its harness
  # search, cycle 1's weights.
  config.whale.update(weight_epochs=1.0, total_weight_epochs=2.0, max_cycles=2)
  if "baseline" in config:
    config.baseline.update(total_weight_epochs=1.0, search_iterations=2)
  return config
