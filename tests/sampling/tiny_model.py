"""The tiny model of the sampling tests: one config, so that the tests share compilations.

Its vocabulary covers the byte tokenizer's 267 ids (plus one, so that it splits over two
tensor-parallel devices). Random weights from numpy give about 5 nats of entropy per token.
"""
import jax
import jax.numpy as jnp

from tests.train import random_params
from whale_jax.models import ModelConfig
from whale_jax.tokenization import load_tokenizer

TOKENIZER = load_tokenizer("byte")
CONFIG = ModelConfig(vocab_size=268, num_layers=2, embed_dim=32, mlp_dim=48, num_heads=4,
                     num_kv_heads=2, head_dim=8, max_position_embeddings=256)
STEPS_PER_CALL = 8


def params(seed):
  return jax.tree.map(jnp.asarray, random_params.numpy_params(CONFIG, seed=seed))
