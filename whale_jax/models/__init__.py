"""Decoder models: config, parameters, forward passes, KV cache and HF conversion."""
from whale_jax.models.config import ModelConfig
