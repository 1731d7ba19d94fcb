"""The random Qwen3 models the benchmarks time, in transformers' Qwen3Config names.

"3m" and "100m" are the reference sizes the sampler and train-step comparisons with
transformers use (~3M: vocab 512, width 256, 4 layers, 8/4 heads of 32, MLP 768; ~100M:
vocab 32,000, width 768, 12 layers, 12/4 heads of 64, MLP 2,048, tied). "small" and "large"
are the earlier shapes (4/2 heads of 64; vocab 32,768) of the older tables in
docs/benchmarks.md and of bench/sampler_versions.py.

A module of its own (no flags, no imports) so that every benchmark reads the same shapes
without defining another benchmark's absl flags. num_params counts the tied embedding once.
"""

CONFIGS = {
    "3m": dict(vocab_size=512, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
               num_attention_heads=8, num_key_value_heads=4, head_dim=32, new_tokens=64),
    "100m": dict(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                 num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                 head_dim=64, new_tokens=64),
    "small": dict(vocab_size=512, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, new_tokens=64),
    "large": dict(vocab_size=32768, hidden_size=768, intermediate_size=2048,
                  num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                  head_dim=64, new_tokens=64),
}
