"""Tiny random transformers checkpoints, built and saved locally (no hub access)."""
import numpy as np
import torch
import transformers

VOCAB_SIZE = 128

# Distinct sizes so a swapped axis fails loudly: heads 4, kv heads 2, head_dim 20 != 48 / 4.
_COMMON = dict(vocab_size=VOCAB_SIZE, hidden_size=48, intermediate_size=72, num_hidden_layers=3,
               num_attention_heads=4, num_key_value_heads=2, head_dim=20, rms_norm_eps=1e-6,
               max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)

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
}


def build(name, directory, seed=0):
  """Saves a random model of CONFIGS[name] to directory; returns the torch model (eval, f32).

  Every parameter, norms and biases included, is drawn at a scale where all of them matter.
  """
  torch.manual_seed(seed)
  config = CONFIGS[name]()
  model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
  with torch.no_grad():
    for param_name, param in model.named_parameters():
      if "norm" in param_name:
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
