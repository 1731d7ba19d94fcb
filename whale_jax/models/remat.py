"""Rematerialization of the layer scans: what one layer keeps for its backward pass.

  body = remat.wrap(config, body)   # body(carry, layer_params) of a lax.scan over layers

config.remat names the policy (models/config.py REMAT_POLICIES):
  "none"                     keep every intermediate (fastest, most memory)
  "full"                     keep only the layer's input; recompute the rest in the backward
  "dots"                     keep the outputs of matmuls, recompute elementwise work
  "dots_with_no_batch_dims"  keep matmul outputs without batch dimensions: the weight
                             projections, not the attention scores or the linear layers'
                             chunked products
"""
import jax

_POLICIES = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def wrap(config, fn):
  """fn under jax.checkpoint with config.remat's policy (fn itself for "none")."""
  if config.remat == "none":
    return fn
  return jax.checkpoint(fn, policy=_POLICIES[config.remat], prevent_cse=False)
