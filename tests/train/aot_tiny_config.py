"""A tiny config for tests/train/test_aot.py: head_dim 128 and rows of 1024 tokens, so the
TPU programs take the splash kernel; compiles in about a minute for v5e:2x2."""
import ml_collections


def get_config(arg=""):
  config = ml_collections.ConfigDict()
  config.recipe = "whale"
  config.model = dict(source="random", vocab_size=512, num_layers=2, embed_dim=256,
                      mlp_dim=512, num_heads=4, num_kv_heads=2, head_dim=128,
                      param_dtype="bfloat16", compute_dtype="bfloat16",
                      max_position_embeddings=1024, remat="none")
  config.training = dict(optimizer=dict(learning_rate=1e-6), row_length=1024,
                         samples_per_step=8, num_microbatches=2, grpo=dict(kl_weight=0.01),
                         sampler=dict(max_slots=8, steps_per_call=4, max_cache_length=1024,
                                      max_prefill_tokens=1024))
  config.mesh = dict(data=1, fsdp=4, tensor=1)
  if arg == "remat":
    config.model.remat = "dots_with_no_batch_dims"
  return config
