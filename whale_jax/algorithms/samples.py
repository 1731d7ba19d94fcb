"""From recorded trajectories to training samples (train/packing.py's Sample).

Every model call of a trajectory becomes one sample per completion: the prompt ids exactly
as the host sent them, then the completion ids exactly as the sampler returned them. The
loss mask is 1 on the completion only, so prompt text, tool outputs and earlier turns
(which reappear inside later prompts) are never trained on. Completions are never
re-tokenized from text. A sample longer than max_length is dropped (and counted).
"""
import numpy as np

from whale_jax.train import packing


def from_trajectory(trajectory, advantage=0.0, max_length=None):
  """(samples, num_dropped) for one trajectory."""
  samples, dropped = [], 0
  for call in trajectory.calls:
    prompt = list(call.prompt_token_ids)
    for completion in call.completions:
      if not completion.token_ids or not prompt:
        continue
      token_ids = prompt + list(completion.token_ids)
      if max_length is not None and len(token_ids) > max_length:
        dropped += 1
        continue
      loss_mask = np.zeros(len(token_ids), np.float32)
      loss_mask[len(prompt):] = 1.0
      logprobs = np.zeros(len(token_ids), np.float32)
      logprobs[len(prompt):] = completion.logprobs
      samples.append(packing.Sample(np.asarray(token_ids, np.int32), loss_mask, logprobs,
                                    float(advantage)))
  return samples, dropped


def from_trajectories(trajectories, advantages=None, max_length=None):
  """Samples of many trajectories (advantages: one per trajectory, default 0)."""
  samples, dropped = [], 0
  for i, trajectory in enumerate(trajectories):
    advantage = 0.0 if advantages is None else advantages[i]
    new, new_dropped = from_trajectory(trajectory, advantage, max_length)
    samples += new
    dropped += new_dropped
  return samples, dropped
