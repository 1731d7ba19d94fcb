"""The random Qwen3 models the sampler benchmarks time, in transformers' Qwen3Config names.

A module of its own (no flags, no imports) so that every benchmark reads the same shapes
without defining another benchmark's absl flags. num_params counts the tied embedding once.
"""

CONFIGS = {
    "small": dict(vocab_size=512, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, new_tokens=64),
    "large": dict(vocab_size=32768, hidden_size=768, intermediate_size=2048,
                  num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                  head_dim=64, new_tokens=64),
}
