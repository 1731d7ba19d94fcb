"""Training samples (train/packing.py's Sample): every way a recipe turns model output into data.

  completion_sample(prompt_ids, completion_ids, logprobs, advantage)   the one constructor
  from_trajectories(trajectories, advantages)               solver episodes (RSFT, GRPO)
  group_samples(prompts, completions, rewards, ...)         proposer replies (Harness Learning
                                                            GRPO), group-relative advantages
  demonstration_sample(tokenizer, messages, reply)          a teacher reply (proposer SFT)

A sample is a prompt followed by a completion, with the loss mask 1 on the completion only,
so prompt text, tool outputs and earlier turns (which reappear inside later prompts) are never
trained on. Sampled completions keep the sampler's token ids and logprobs exactly (never
re-tokenized from text); a demonstration is tokenized from its text and ends with the
tokenizer's end-of-turn token. Every model call of a trajectory becomes one sample per
completion (a sample longer than the policy's row is left out and counted by Policy.train,
the one place that drops samples for their length). So samples are LLM calls, not
trajectories: RSFT's minibatch (config.training.samples_per_step) counts samples
unless config.training.minibatch_unit is "trajectory", where it counts episodes (their
samples stay together: from_trajectories(..., with_groups=True) gives each sample's episode),
as WHALE's verl SFT minibatch of 64 counts one sequence per multi-turn trajectory.
"""
import numpy as np

from whale_jax.search import revision
from whale_jax.train import dapo
from whale_jax.train import grpo as grpo_lib
from whale_jax.train import packing

END_OF_TURN = "<|im_end|>"


def completion_sample(prompt_ids, completion_ids, logprobs=None, advantage=0.0):
  """prompt + completion as one Sample: loss on the completion, the sampler's logprobs there
  (zeros when logprobs is None: a demonstration)."""
  token_ids = list(prompt_ids) + list(completion_ids)
  loss_mask = np.zeros(len(token_ids), np.float32)
  loss_mask[len(prompt_ids):] = 1.0
  sampler_logprobs = np.zeros(len(token_ids), np.float32)
  if logprobs is not None:
    sampler_logprobs[len(prompt_ids):] = logprobs
  return packing.Sample(np.asarray(token_ids, np.int32), loss_mask, sampler_logprobs,
                        float(advantage))


def from_trajectory(trajectory, advantage=0.0):
  """The samples of one trajectory: one per completion of each call (none for an empty
  prompt or completion)."""
  samples = []
  for call in trajectory.calls:
    prompt = list(call.prompt_token_ids)
    for completion in call.completions:
      if not completion.token_ids or not prompt:
        continue
      samples.append(completion_sample(prompt, completion.token_ids, completion.logprobs,
                                       advantage))
  return samples


def from_trajectories(trajectories, advantages=None, with_groups=False):
  """The samples of many trajectories (advantages: one per trajectory, default 0);
  with_groups: (samples, [index of each sample's trajectory])."""
  samples, groups = [], []
  for i, trajectory in enumerate(trajectories):
    advantage = 0.0 if advantages is None else advantages[i]
    new = from_trajectory(trajectory, advantage)
    samples += new
    groups += [i] * len(new)
  return (samples, groups) if with_groups else samples


def group_advantages(rewards, normalization, filter_zero_advantage):
  """([P, G] float64 group-relative advantages, [P] bool: the group is kept) of [P, G]
  rewards (train/advantages.py; normalization is an estimator or an older name); a group whose
  rewards are all equal is dropped when filter_zero_advantage (DAPO)."""
  advantages = grpo_lib.group_advantages(rewards, normalization=normalization)
  kept = (dapo.informative_groups(rewards) if filter_zero_advantage
          else np.ones(len(advantages), bool))
  return advantages, kept


def group_samples(prompts, completions, rewards, normalization="mean_std",
                  filter_zero_advantage=True):
  """GRPO samples of K sampled replies per prompt; returns (samples, number of groups kept).

  Args:
    prompts: [P] prompt ids, one per context.
    completions: [P][K] Completions sampled for each prompt.
    rewards: [P][K] their rewards.
  """
  advantages, kept = group_advantages(rewards, normalization, filter_zero_advantage)
  samples = [completion_sample(prompt, completion.token_ids, completion.logprobs, advantage)
             for prompt, group, group_advantages, keep in zip(prompts, completions, advantages,
                                                              kept) if keep
             for completion, advantage in zip(group, group_advantages)
             if len(completion.token_ids)]
  return samples, int(kept.sum())


def end_of_turn_id(tokenizer):
  found = tokenizer.token_to_id(END_OF_TURN)
  return tokenizer.eos_id if found is None else found


def demonstration_sample(tokenizer, messages, reply):
  """(context prompt -> reply) as an SFT Sample: loss on the reply and its end-of-turn only."""
  completion = list(tokenizer.encode(reply)) + [end_of_turn_id(tokenizer)]
  return completion_sample(revision.prompt_ids(tokenizer, messages), completion)
