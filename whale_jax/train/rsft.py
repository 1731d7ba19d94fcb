"""RSFT loss: token-mean negative log-likelihood of the model-generated tokens.

  J = (1 / sum of loss_mask over the global batch) * sum over tokens of -loss_mask * log p

Prompt and tool-output tokens have loss_mask 0 and never train (SPEC 1.5). The normalizer
is the number of target tokens in the whole global batch, not per row or per micro-batch:
the loss returns its sum and its token count separately, and the train step divides the
summed sums by the summed counts, so the result does not depend on how the batch is split.

Every loss in train/ has this signature (see step.make_train_step):
  loss(params, model_config, batch) -> (loss_sum, normalizer, metrics)
  metrics: {name: (sum, count)}, reported as the global sum / global count, or
           {name: value}, reported as the global sum.
"""
import jax.numpy as jnp

from whale_jax.train import logprobs as logprobs_lib


def loss_from_logprobs(logprobs, loss_mask):
  """(loss_sum, num_target_tokens, metrics) from per-token logprobs [B, T] and mask [B, T]."""
  loss_mask = loss_mask.astype(jnp.float32)
  num_target_tokens = jnp.sum(loss_mask)
  loss_sum = -jnp.sum(logprobs * loss_mask)
  metrics = {"num_target_tokens": num_target_tokens}
  return loss_sum, num_target_tokens, metrics


def loss(params, model_config, batch, temperature=1.0):
  """RSFT terms for one (micro-)batch; see the module docstring for the contract.

  Args:
    batch: "tokens", "positions", "segment_ids", "loss_mask" (see train/batch.py).
    temperature: log-probabilities of log_softmax(logits / temperature); SPEC 1.5 uses the
      rollout temperature, 1.0.
  """
  logprobs = logprobs_lib.token_logprobs(params, model_config, batch, temperature)
  return loss_from_logprobs(logprobs, batch["loss_mask"])
