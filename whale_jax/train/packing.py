"""Sequence packing: variable-length samples into fixed [B, T] rows with segment ids.

A sample is one whole trajectory as token ids: a single (prompt, completion) pair or a
multi-turn agent episode in which model turns alternate with tool outputs. Its loss_mask is
1 on the tokens the model generated and 0 on prompt and tool-output tokens. Packing places
whole samples (never split) into rows of row_length tokens, first fit in order of decreasing
length, numbers them 1, 2, ... within each row and restarts positions at 0 for each one.
The result is the batch dict of train/batch.py, as numpy arrays.

  batch, placements = pack(samples, row_length=512, num_rows=None)
  placements[i] = (row, start): sample i occupies batch[...][row, start:start + len(sample)].
"""
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Sample:
  """One trajectory to train on.

  Attributes:
    token_ids: [n] int, the full token sequence (prompt, model turns, tool outputs).
    loss_mask: [n] 0/1, 1 on model-generated tokens. loss_mask[0] must be 0: the first
      token has no preceding logits.
    sampler_logprobs: optional [n] float, the sampler's log-probability of each generated
      token (values off the loss mask are ignored).
    advantage: the sample's scalar advantage (GRPO), copied onto each of its tokens.
  """
  token_ids: np.ndarray
  loss_mask: np.ndarray
  sampler_logprobs: np.ndarray | None = None
  advantage: float = 0.0

  def __post_init__(self):
    token_ids = np.asarray(self.token_ids)
    loss_mask = np.asarray(self.loss_mask, np.float32)
    if token_ids.ndim != 1 or not np.issubdtype(token_ids.dtype, np.integer):
      raise TypeError(f"Sample.token_ids must be a 1-D integer array, got dtype "
                      f"{token_ids.dtype} and shape {token_ids.shape}.")
    if loss_mask.shape != token_ids.shape:
      raise ValueError(f"Sample.loss_mask has shape {loss_mask.shape} but token_ids has "
                       f"{token_ids.shape}; give one mask value per token.")
    if len(token_ids) == 0:
      raise ValueError("Sample.token_ids is empty; drop empty samples before packing.")
    if loss_mask[0] != 0:
      raise ValueError("Sample.loss_mask[0] is 1, but the first token has no preceding "
                       "logits to predict it. Start every sample with a prompt token (mask 0).")
    object.__setattr__(self, "token_ids", token_ids.astype(np.int32))
    object.__setattr__(self, "loss_mask", loss_mask)
    if self.sampler_logprobs is not None:
      sampler_logprobs = np.asarray(self.sampler_logprobs, np.float32)
      if sampler_logprobs.shape != token_ids.shape:
        raise ValueError(f"Sample.sampler_logprobs has shape {sampler_logprobs.shape} but "
                         f"token_ids has {token_ids.shape}; give one value per token (0 "
                         "where the model did not generate the token).")
      object.__setattr__(self, "sampler_logprobs", sampler_logprobs)


def pack(samples, row_length, num_rows=None, one_per_row=False):
  """Packs samples into rows; returns (batch dict of [B, T] numpy arrays, placements).

  Args:
    samples: Sample instances.
    row_length: T, tokens per row.
    num_rows: B; rows past the last used one are padding. None = as many as needed.
    one_per_row: put each sample in its own row, in order (no packing).
  Returns:
    batch with "tokens", "positions", "segment_ids", "loss_mask", "advantages" and, when
    every sample has them, "sampler_logprobs"; placements[i] = (row, start) of samples[i].
  """
  samples = list(samples)
  for index, sample in enumerate(samples):
    if not isinstance(sample, Sample):
      raise TypeError(f"samples[{index}] is a {type(sample).__name__}; wrap it as "
                      "packing.Sample(token_ids, loss_mask, sampler_logprobs, advantage).")
    if len(sample.token_ids) > row_length:
      raise ValueError(f"samples[{index}] has {len(sample.token_ids)} tokens, more than "
                       f"row_length={row_length}. Raise row_length or truncate the sample.")
  with_logprobs = [sample.sampler_logprobs is not None for sample in samples]
  if any(with_logprobs) and not all(with_logprobs):
    raise ValueError(f"samples {[i for i, has in enumerate(with_logprobs) if not has]} lack "
                     "sampler_logprobs while others have them; give them for all or none.")

  placements, row_fill = [None] * len(samples), []
  if one_per_row:
    order = range(len(samples))
  else:
    order = sorted(range(len(samples)), key=lambda i: -len(samples[i].token_ids))
  for index in order:
    length = len(samples[index].token_ids)
    row = len(row_fill) if one_per_row else next(
        (r for r, fill in enumerate(row_fill) if fill + length <= row_length), len(row_fill))
    if row == len(row_fill):
      row_fill.append(0)
    placements[index] = (row, row_fill[row])
    row_fill[row] += length
  if num_rows is None:
    num_rows = max(len(row_fill), 1)
  elif len(row_fill) > num_rows:
    raise ValueError(f"The {len(samples)} samples need {len(row_fill)} rows of "
                     f"{row_length} tokens but num_rows={num_rows}. Raise num_rows or "
                     "row_length, or pass fewer samples.")

  shape = (num_rows, row_length)
  batch = {"tokens": np.zeros(shape, np.int32), "positions": np.zeros(shape, np.int32),
           "segment_ids": np.zeros(shape, np.int32), "loss_mask": np.zeros(shape, np.float32),
           "advantages": np.zeros(shape, np.float32)}
  if samples and all(with_logprobs):
    batch["sampler_logprobs"] = np.zeros(shape, np.float32)
  next_segment = [1] * num_rows
  for index in sorted(range(len(samples)), key=lambda i: placements[i]):
    sample, (row, start) = samples[index], placements[index]
    span = slice(start, start + len(sample.token_ids))
    batch["tokens"][row, span] = sample.token_ids
    batch["positions"][row, span] = np.arange(len(sample.token_ids))
    batch["segment_ids"][row, span] = next_segment[row]
    batch["loss_mask"][row, span] = sample.loss_mask
    batch["advantages"][row, span] = sample.advantage
    if "sampler_logprobs" in batch:
      batch["sampler_logprobs"][row, span] = sample.sampler_logprobs * sample.loss_mask
    next_segment[row] += 1
  return batch, placements
