"""Tiny random transformers checkpoints, built and saved locally (no hub access)."""
import numpy as np
import torch
import transformers

VOCAB_SIZE = 128

# Distinct sizes so a swapped axis fails loudly: heads 4, kv heads 2, head_dim 20 != 48 / 4.
_COMMON = dict(vocab_size=VOCAB_SIZE, hidden_size=48, intermediate_size=72, num_hidden_layers=3,
               num_attention_heads=4, num_key_value_heads=2, head_dim=20, rms_norm_eps=1e-6,
               max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)

# rms_norm_eps 1e-2: the RMSNorm after the delta rule scales each head's output to unit size,
# and with random weights some outputs are tiny (q . k near 0), so at eps 1e-6 float32 rounding
# is amplified up to 1000x: over 150 tokens transformers' own float32 logits are then 2.8e-4
# from its float64 ones (whale_jax's 1e-4). At 1e-2 both stay within 6e-5 of float64.
_QWEN3_5_LINEAR = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=12,
                       linear_value_head_dim=10, linear_conv_kernel_dim=4, rms_norm_eps=1e-2)

CONFIGS = {
    "qwen3_tied": lambda: transformers.Qwen3Config(**_COMMON, tie_word_embeddings=True,
                                                   rope_theta=10_000.0),
    "qwen3_untied": lambda: transformers.Qwen3Config(**_COMMON, tie_word_embeddings=False,
                                                     rope_theta=1_000_000.0),
    "qwen2_bias": lambda: transformers.Qwen2Config(**_COMMON, tie_word_embeddings=True,
                                                   rope_theta=10_000.0),
    "llama3_scaled": lambda: transformers.LlamaConfig(
        **_COMMON, tie_word_embeddings=False, rope_theta=500_000.0,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=32)),
    "llama_bias_mha": lambda: transformers.LlamaConfig(
        **{**_COMMON, "num_key_value_heads": 4, "head_dim": 12}, tie_word_embeddings=True,
        attention_bias=True, rope_theta=10_000.0),
    # Qwen3.5 hybrid (3 linear-attention layers to 1 full, repeated): head_dim 24 with 6 rotary
    # dims; linear heads 2 key / 4 value with key dim 12 != value dim 10.
    "qwen3_5_untied": lambda: transformers.Qwen3_5TextConfig(
        **{**_COMMON, "head_dim": 24, "num_hidden_layers": 8, **_QWEN3_5_LINEAR},
        tie_word_embeddings=False,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 2,
        rope_parameters=dict(rope_type="default", rope_theta=1_000_000.0,
                                                partial_rotary_factor=0.25)),
}

# Further Qwen3.5 variants, used by test_qwen3_5.py only: a schedule with no repeating pattern.
QWEN3_5_CONFIGS = {
    "qwen3_5_tied_irregular": lambda: transformers.Qwen3_5TextConfig(
        **{**_COMMON, "head_dim": 24, "num_hidden_layers": 5, **_QWEN3_5_LINEAR},
        tie_word_embeddings=True,
        layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention",
                     "linear_attention"],
        rope_parameters=dict(rope_type="default", rope_theta=10_000.0,
                                                partial_rotary_factor=0.5)),
}


def build(name, directory, seed=0):
  """Saves a random model of CONFIGS[name] to directory; returns the torch model (eval, f32).

  Every parameter, norms and biases included, is drawn at a scale where all of them matter.
  Qwen3.5's RMSNorms (but its linear layers' output norm) store the offset of their scale from
  1, so there the weight itself is drawn around 0.
  """
  torch.manual_seed(seed)
  config = {**CONFIGS, **QWEN3_5_CONFIGS}[name]()
  model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
  zero_centered = config.model_type.startswith("qwen3_5")
  with torch.no_grad():
    for param_name, param in model.named_parameters():
      if "norm" in param_name and zero_centered and "linear_attn.norm" not in param_name:
        param.copy_(0.2 * torch.randn_like(param))
      elif "norm" in param_name:
        param.copy_(1.0 + 0.2 * torch.randn_like(param))
      elif param_name.endswith("bias"):
        param.copy_(0.3 * torch.randn_like(param))
      else:
        param.copy_(torch.randn_like(param) / np.sqrt(param.shape[-1]))
  model.eval()
  model.save_pretrained(directory, safe_serialization=True)
  return model


def build_qwen3_5_vision_language(directory, seed=0):
  """Saves a tiny Qwen3.5 vision-language checkpoint (text decoder under model.language_model,
  a vision tower under model.visual); returns the torch model (eval, f32).

  Its text decoder is QWEN3_5_CONFIGS["qwen3_5_tied_irregular"]'s, but untied: the top-level
  tie_word_embeddings=False is what transformers applies.
  """
  torch.manual_seed(seed)
  text = QWEN3_5_CONFIGS["qwen3_5_tied_irregular"]().to_dict()
  vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                out_hidden_size=text["hidden_size"], patch_size=4, temporal_patch_size=2,
                spatial_merge_size=2, num_position_embeddings=16)
  config = transformers.Qwen3_5Config(text_config=text, vision_config=vision,
                                      tie_word_embeddings=False)
  model = transformers.Qwen3_5ForConditionalGeneration(config).to(torch.float32)
  with torch.no_grad():
    for param_name, param in model.named_parameters():
      if "language_model" not in param_name and param_name != "lm_head.weight":
        continue
      if "norm" in param_name and "linear_attn.norm" not in param_name:
        param.copy_(0.2 * torch.randn_like(param))
      elif "norm" in param_name:
        param.copy_(1.0 + 0.2 * torch.randn_like(param))
      elif param_name.endswith("bias"):
        param.copy_(0.3 * torch.randn_like(param))
      else:
        param.copy_(torch.randn_like(param) / np.sqrt(param.shape[-1]))
  model.eval()
  model.save_pretrained(directory, safe_serialization=True)
  return model


def padded_batch(rng, lengths, total_length, left=True):
  """tokens [B, T] int64 and attention_mask [B, T], padded with id 0 on the left or right."""
  tokens = np.zeros((len(lengths), total_length), np.int64)
  mask = np.zeros((len(lengths), total_length), np.int64)
  for row, length in enumerate(lengths):
    ids = rng.integers(3, VOCAB_SIZE, size=length)
    span = slice(total_length - length, total_length) if left else slice(0, length)
    tokens[row, span], mask[row, span] = ids, 1
  return tokens, mask


def torch_logits(model, tokens, mask):
  """Logits of the torch model with positions counted over real tokens (float32 numpy)."""
  positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
  with torch.no_grad():
    out = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                position_ids=torch.tensor(positions))
  return out.logits.float().numpy()
