r"""VACE-like training shapes for the ahead-of-time memory check: Qwen3.5-9B, GRPO with a
frozen reference (KL to it), rows of 8,192 tokens, one row per chip per micro-batch on a
v5p-64 slice. The VACE paper does not state its batch, row length or KL settings (SPEC 2):
these are the sizes docs/pod_memory.md measures, not a recipe to run.

  python -m whale_jax.aot --config=configs/aot_vace_9b.py --topology=v5p:2x4x4
"""
import ml_collections


def get_config(arg: str = ""):
  del arg
  config = ml_collections.ConfigDict()
  config.recipe = "vace"
  config.model = dict(source="hf", path="checkpoints/Qwen/Qwen3.5-9B", dtype="bfloat16",
                      remat="dots_with_no_batch_dims")
  config.training = dict(optimizer=dict(learning_rate=1e-6, warmup_steps=0), row_length=8192,
                         samples_per_step=32, num_microbatches=4,
                         grpo=dict(kl_weight=0.001),
                         sampler=dict(max_slots=64, steps_per_call=64, max_cache_length=8192))
  config.mesh = dict(data=1, fsdp=8, tensor=4)
  return config
