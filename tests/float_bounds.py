"""Bounds on how far two float32 computations of the same logprobs may differ, from rounding.

Tests that compare logprobs computed along two paths (served against in-process, the sampler's
against the trainer's) whose reductions run in different orders use these instead of a fixed
tolerance, so the bound follows the model's shape and weights rather than one measurement.
"""
import numpy as np

UNIT_ROUNDOFF = 2.0**-24  # float32
LAMBDA = 6.0  # P(|error| > LAMBDA sqrt(n) u per reduction) <= 2 exp(-LAMBDA**2 / 2) ~ 3e-8


def float32_logprob_bound(config, params, max_length):
  """Bound on |a - b| for one token's logprob computed in float32 along two reduction orders.

  A reduction of n float32 terms rounds to within LAMBDA sqrt(n) u of its exact value in
  relative terms (the probabilistic bound of Higham and Mary, 2019: each rounding is an
  independent relative error <= u, u = 2**-24), and two orders of the same reduction to within
  twice that of each other. Along the path to the final hidden state h a token passes, per
  layer, the RMS norms (D terms), query/key norms (H), attention scores (H) and their
  weighted sum over at most max_length keys, the output projection (N H), and the MLP (D and F
  terms); n is their total plus the unembedding's D. So |delta h| <= 2 LAMBDA sqrt(n) u |h|,
  and every logit z_v = <h, W_v> moves by at most that times |h| |W_v| (Cauchy-Schwarz), where
  |h| <= sqrt(D) max|final_norm scale| (h is RMS-normalised, then scaled). A logprob
  z_t - logsumexp(z) moves by at most twice the largest logit move.
  """
  n = (config.num_layers * (2 * config.embed_dim + 2 * config.head_dim + config.head_dim +
                            max_length + config.num_heads * config.head_dim + config.mlp_dim) +
       config.embed_dim)
  hidden_norm = np.sqrt(config.embed_dim) * np.max(np.abs(np.asarray(params["final_norm"])))
  unembedding = np.asarray(params["embedding"] if config.tie_embeddings else
                           params["unembedding"].T)  # [V, D]
  largest_row = np.max(np.linalg.norm(unembedding.astype(np.float64), axis=1))
  return 2 * (2 * LAMBDA * np.sqrt(n) * UNIT_ROUNDOFF) * hidden_norm * largest_row
