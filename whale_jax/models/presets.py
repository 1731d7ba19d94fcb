"""Model shapes of the Qwen3.5 text decoders the seed papers trained, and a tiny CPU variant.

  model_config = presets.get("qwen3_5_4b", param_dtype="bfloat16")   # a ModelConfig
  config.model = presets.fields("qwen3_5_tiny")                       # in a config file

Shared facts of Qwen3.5 dense text decoders (transformers' Qwen3_5TextConfig defaults and the
published checkpoints' config.json): vocabulary 248,320; full-attention head_dim 256 with
RoPE on the first 64 dims (partial_rotary_factor 0.25), rope_theta 1e7; schedule of 3
Gated DeltaNet layers then 1 gated full-attention layer, repeated; linear key/value head dims
128 and convolution width 4; RMSNorm eps 1e-6; max_position_embeddings 262,144.

Per size (where a value is less certain it says so):
  2B: 24 layers, width 2048, MLP 6144, 8 query / 2 key-value heads, tied embeddings.
      Linear heads 16 key / 16 value: taken from Qwen3.5-0.8B's published config (same
      family, linear heads not found for 2B itself) -- check config.json before relying on it.
  4B: 32 layers, width 2560, MLP 9216, 16 query / 4 key-value heads, linear heads 16 key /
      32 value, tied embeddings (as the small Qwen models; verify against config.json).
  9B: 32 layers, width 4096, MLP 12288, 16 query / 4 key-value heads, linear heads 16 key /
      32 value, untied embeddings (transformers' Qwen3_5TextConfig defaults are this model).
A real checkpoint's config.json always wins: hf.load_hf reads the shapes from it.
"""
import dataclasses
import os

from whale_jax.models.config import ModelConfig

# The small solver checkpoint shipped with the package (config.model.source="embedded").
EMBEDDED_SOLVER = os.path.join(os.path.dirname(os.path.dirname(__file__)), "assets",
                               "demo_solver")

_QWEN3_5_COMMON = dict(
    model_type="qwen3_5", vocab_size=248_320, head_dim=256, partial_rotary_factor=0.25,
    rope_theta=10_000_000.0, rms_norm_eps=1e-6, max_position_embeddings=262_144,
    linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_width=4,
    bos_token_id=None, eos_token_ids=(248_044,), pad_token_id=None)
_PATTERN = ("linear_attention",) * 3 + ("full_attention",)


def _qwen3_5(num_layers, **fields):
  return ModelConfig(**_QWEN3_5_COMMON, num_layers=num_layers,
                     layer_types=_PATTERN * (num_layers // 4), **fields)


PRESETS = {
    "qwen3_5_2b": lambda: _qwen3_5(24, embed_dim=2048, mlp_dim=6144, num_heads=8,
                                   num_kv_heads=2, linear_num_key_heads=16,
                                   linear_num_value_heads=16, tie_embeddings=True),
    "qwen3_5_4b": lambda: _qwen3_5(32, embed_dim=2560, mlp_dim=9216, num_heads=16,
                                   num_kv_heads=4, linear_num_key_heads=16,
                                   linear_num_value_heads=32, tie_embeddings=True),
    "qwen3_5_9b": lambda: _qwen3_5(32, embed_dim=4096, mlp_dim=12288, num_heads=16,
                                   num_kv_heads=4, linear_num_key_heads=16,
                                   linear_num_value_heads=32, tie_embeddings=False),
    # CPU smoke tests: the same schedule and head grouping at toy width.
    "qwen3_5_tiny": lambda: ModelConfig(
        model_type="qwen3_5", vocab_size=257, num_layers=8, embed_dim=64, mlp_dim=128,
        num_heads=4, num_kv_heads=2, head_dim=16, partial_rotary_factor=0.25,
        rope_theta=10_000_000.0, layer_types=_PATTERN * 2, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_width=4, tie_embeddings=True),
}


def get(name, **changes) -> ModelConfig:
  """The preset's ModelConfig, with changes (e.g. param_dtype="bfloat16") applied."""
  if name not in PRESETS:
    raise ValueError(f"Unknown model preset {name!r}; choose one of {sorted(PRESETS)}.")
  return PRESETS[name]().replace(**changes)


def fields(name, **changes) -> dict:
  """The preset as a dict of ModelConfig fields, for `config.model = ...` in config files."""
  return dataclasses.asdict(get(name, **changes))
