r"""WHALE (fixed schedule (E, I, M) = (0.6, 6, 3), or adaptive) on SearchQA, math or chess.

Paper settings (SPEC 1.4-1.6): G = 8 rollouts per prompt, keep reward > 0.5, learning rate
1e-7, prompt batch 256, SFT minibatch 64, temperature 1.0, top-k 20, test mean@8. Healthy run
(SearchQA, Qwen3.5-2B): training reward rises within the first cycle and the accepted harness
changes in most harness phases.

  python -m whale_jax.main --config=configs/whale.py:searchqa --workdir=/mnt/whale/run1
  python -m whale_jax.main --config=configs/whale.py:math,adaptive --workdir=...
  python -m whale_jax.main --config=configs/whale.py:smoke --workdir=/tmp/whale_smoke  # CPU
"""
import ml_collections

from configs import presets

DOMAINS = {
    "searchqa": dict(name="searchqa", questions=["data/searchR1/train.parquet"],
                     split_questions={"test": ["data/searchR1/test.parquet"]},
                     retrieval_urls=["http://localhost:8000/retrieve"], verifier="judge",
                     judge=dict(base_url="http://localhost:8001/v1", model="judge",
                                api_key_env=None),   # tasks.judge.openai_judge options
                     split_sizes={"weight": -1, "harness": 256, "validation": 256,
                                  "test": 700}),
    "math": dict(name="math", problems=["data/dapo_math_17k.parquet"],
                 split_problems={"test": ["data/aime_2024.jsonl", "data/aime_2025.jsonl"]},
                 split_sizes={"weight": -1, "harness": 256, "validation": 256, "test": 60}),
    "chess": dict(name="chess", puzzles=["data/lichess_db_puzzle.csv"],
                  split_sizes={"weight": 16_384, "harness": 256, "validation": 256,
                               "test": 256}),
}
MODELS = {"searchqa": "Qwen/Qwen3.5-2B", "math": "Qwen/Qwen3.5-2B", "chess": "Qwen/Qwen3.5-4B"}
WEIGHT_EPOCHS = {"searchqa": 4.0, "math": 6.0, "chess": 4.0}


def get_config(arg: str = "searchqa"):
  args = presets.parse_args(arg, tuple(DOMAINS) + ("adaptive", "smoke"), "configs/whale.py")
  domain = next((name for name in DOMAINS if name in args), "searchqa")
  config = ml_collections.ConfigDict()
  config.recipe = "whale_adaptive" if "adaptive" in args else "whale"
  # remat: rows of 16,384 tokens need it to fit a v5p chip (docs/pod_memory.md).
  config.model = dict(source="hf", path=f"checkpoints/{MODELS[domain]}", dtype="bfloat16",
                      remat="dots_with_no_batch_dims")
  config.tokenizer = ""
  config.domain = DOMAINS[domain]
  config.sampling = presets.paper_sampling()
  config.eval_sampling = dict()
  config.training = dict(optimizer=dict(learning_rate=1e-7, warmup_steps=0), row_length=16_384,
                         samples_per_step=64, num_microbatches=8,
                         sampler=dict(max_slots=256, steps_per_call=64))
  config.loop = dict(seed=0, prompt_batch=256, num_samples=8, score_threshold=0.5,
                     sft_epochs=1, search_iterations=6, candidates_per_iteration=3,
                     eval_num_samples=8, eval_interval_rollouts=20_000,
                     checkpoint_every_steps=4)
  config.whale = dict(weight_epochs=0.6, total_weight_epochs=WEIGHT_EPOCHS[domain],
                      max_cycles=30)
  config.search = dict(proposer="openai", base_url="https://api.anthropic.com/v1",
                       model="claude-opus-4-7", api_key_env="PROPOSER_API_KEY",
                       sampling=dict(max_tokens=32_000, temperature=1.0))
  config.runtime = dict(num_workers=256, timeout_seconds=1800.0)
  config.mesh = dict(data=-1, fsdp=8, tensor=1)
  if "smoke" in args:
    presets.smoke(config)
    config.whale.update(weight_epochs=0.5, total_weight_epochs=1.0)
    config.search = dict(proposer="edit_library")
  return config
