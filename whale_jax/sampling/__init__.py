"""Sampling: the jitted sampler, the generation engine and the generate API."""
from whale_jax.sampling.api import Completion
from whale_jax.sampling.api import LLMBackend
from whale_jax.sampling.api import SamplingParams
from whale_jax.sampling.engine import Engine
from whale_jax.sampling.sampler import Sampler
