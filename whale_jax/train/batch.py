"""The training batch: one dict of [B, T] arrays read by every loss and by the train step.

Shape letters: B rows, T row length.

  "tokens"             [B, T] int32   token ids; padding is id 0 in segment 0.
  "positions"          [B, T] int32   RoPE positions, counted from 0 within each segment.
  "segment_ids"        [B, T] int32   1, 2, ... for the samples packed into a row, 0 = padding.
                                      A token attends only to earlier tokens of its segment.
  "loss_mask"          [B, T] float32 1 where token t is a model-generated target to train on;
                                      the logits at t - 1 predict it. 0 on prompt, tool-output
                                      and padding tokens and on the first token of a segment.
GRPO also reads:
  "advantages"         [B, T] float32 the sample's advantage, repeated on each of its tokens.
  "sampler_logprobs"   [B, T] float32 log-probability of token t that the sampler reported
                                      (same temperature as the loss), 0 off the loss mask.
  "reference_logprobs" [B, T] float32 optional; the reference model's, for the KL term.
  "old_logprobs"       [B, T] float32 optional; the trainer's own log-probabilities at the
                                      weights that produced the samples. Only needed when one
                                      batch feeds more than one update; without it the current
                                      weights are taken to be those weights.

Loss mask and attention (segment ids) are separate: a tool output is attended to but never
trained on. `packing.pack` builds this dict from variable-length samples.
"""
import numpy as np

REQUIRED_KEYS = ("tokens", "positions", "segment_ids", "loss_mask")
GRPO_KEYS = ("advantages", "sampler_logprobs")
OPTIONAL_KEYS = ("reference_logprobs", "old_logprobs")
_INTEGER_KEYS = ("tokens", "positions", "segment_ids")


def validate(batch, required_keys=REQUIRED_KEYS):
  """Raises ValueError/TypeError when batch is not a dict of equal-shape [B, T] arrays.

  Returns:
    (B, T)
  """
  if not isinstance(batch, dict):
    raise TypeError(f"The batch must be a dict of [B, T] arrays, got {type(batch).__name__}. "
                    "Build it with whale_jax.train.packing.pack().")
  missing = [key for key in required_keys if key not in batch]
  if missing:
    raise ValueError(f"The batch lacks {missing}; it has {sorted(batch)}. A batch needs "
                     f"{list(required_keys)} (see whale_jax.train.batch).")
  known = set(REQUIRED_KEYS) | set(GRPO_KEYS) | set(OPTIONAL_KEYS)
  unknown = sorted(set(batch) - known)
  if unknown:
    raise ValueError(f"The batch has unknown keys {unknown}; allowed keys are {sorted(known)}.")
  shape = np.shape(batch["tokens"])
  if len(shape) != 2:
    raise ValueError(f"batch['tokens'] has shape {shape}; it must be [B, T] (rows, length).")
  for key, value in batch.items():
    if np.shape(value) != shape:
      raise ValueError(f"batch[{key!r}] has shape {np.shape(value)} but batch['tokens'] has "
                       f"{shape}; every batch array must be [B, T] with the same B and T.")
    dtype = np.dtype(value.dtype)
    if key in _INTEGER_KEYS and not np.issubdtype(dtype, np.integer):
      raise TypeError(f"batch[{key!r}] has dtype {dtype}; it must be an integer array.")
    if key not in _INTEGER_KEYS and not np.issubdtype(dtype, np.floating):
      raise TypeError(f"batch[{key!r}] has dtype {dtype}; it must be a float array.")
  return shape
