"""The model being optimized: its train state, its train steps, and the sampler that shares it.

  policy = Policy(model_config, params, tokenizer, mesh, options.PolicyConfig(...), name="solver")
  policy.sampler                        # an LLMBackend generating from the current weights
  result = policy.train(samples, "rsft")              # or "grpo"
  result.history, result.num_samples, result.num_dropped
  policy.weights_id                     # "solver@<number of optimizer steps>"

train() is the one place a training sample is dropped for its length: a sample longer than
config.row_length tokens (one packed row) is left out and counted (TrainResult.num_dropped,
which the recipes report as the metric dropped_samples); every recipe's samples (solver RSFT
and GRPO, proposer SFT and GRPO, the warm start) reach the train step through it.

After train() the sampler is pointed at the new params tree: trainer and sampler
share one set of arrays, so a weight update costs no copy and no name mapping. The train step
donates the old state, so training must not overlap generation from the same policy; the
algorithms call train() only between rollouts.

On a mesh that spans several hosts, each host samples its own share of the episodes
(algorithms/hosts.py), so its sampler must not join collectives with the other hosts: it
decodes on a mesh of its own devices (mesh.host_local_mesh) from a copy of the params made
at the end of train() by one device-to-device resharding (parallel/handoff.py: each host then
holds the full weights once more, for decoding; nothing passes through host memory).

Minibatches: samples are shuffled (seeded by the policy's seed and step) and cut into
minibatches of samples_per_step samples, one optimizer step each (RSFT's "SFT minibatch";
one pass over the samples = one SFT epoch); with minibatch_unit "trajectory" and the samples'
groups (their episodes) given, the episodes are shuffled and each minibatch holds every
sample of samples_per_step episodes. Each minibatch is packed into rows of row_length
tokens; the row count is rounded up to a power of two (and to the data-parallel size) so the
step compiles for few shapes.

GRPO (train(samples, "grpo")) runs train/grpo_update.update: the samples are cut into
config.training.grpo.num_minibatches minibatches (default: one per samples_per_step), the
old log-probs of every minibatch are taken before the first step -- recomputed at the current
weights, which are the weights that sampled the batch (nothing updates the sampler between
collection and train()), or the sampler's own (old_logprobs_source "sampler") -- and
ppo_epochs passes of one optimizer step per minibatch all clip against them. The sampler is
updated once, after the last step.

Reference: when the GRPO config keeps one (kl_weight > 0 or keep_reference), a frozen copy of
the params given to __init__ (the run's initial weights) is made there, before any
set_state, so a resumed run keeps the initial weights as its reference, not the restored ones.
"""
import dataclasses
import functools
import json

import jax
import numpy as np

from whale_jax import seeds as seeds_lib
from whale_jax.algorithms import options
from whale_jax.models import decoder
from whale_jax.parallel import distributed
from whale_jax.parallel import handoff as handoff_lib
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.sampling import Sampler
from whale_jax.train import grpo
from whale_jax.train import grpo_update
from whale_jax.train import optimizer as optimizer_lib
from whale_jax.train import packing
from whale_jax.train import reference as reference_lib
from whale_jax.train import rsft
from whale_jax.train import step as step_lib
from whale_jax.train import train_state

LOSSES = ("rsft", "grpo")


@dataclasses.dataclass(frozen=True)
class TrainResult:
  """What one Policy.train call did.

  Attributes:
    history: one dict of float metrics per optimizer step (empty if there were none).
    num_samples: the samples trained on.
    num_dropped: the samples longer than config.row_length, left out (module docstring).
  """
  history: list
  num_samples: int
  num_dropped: int


def _round_rows(num_rows, multiple):
  rows = max(multiple, 1)
  while rows < num_rows:
    rows *= 2
  return rows


class Policy:
  """A model under optimization; see the module docstring."""

  def __init__(self, model_config, params, tokenizer, mesh, policy_config=options.PolicyConfig(),
               name="solver"):
    self.model_config = model_config
    self.tokenizer = tokenizer
    self.mesh = mesh
    self.config = policy_config
    self.name = name
    self.optimizer_config = policy_config.optimizer
    self.optimizer = optimizer_lib.make(self.optimizer_config)
    self.grpo_config = policy_config.grpo
    self.state = train_state.create(model_config, params, self.optimizer, mesh,
                                    rules.TRAIN_RULES)
    self.reference = self._reference_logprobs = None
    if self.grpo_config.uses_reference:  # the initial weights, before any set_state
      self.reference = reference_lib.create(model_config, self.state["params"], mesh,
                                            rules.TRAIN_RULES,
                                            offload=self.grpo_config.offload_reference)
      self._reference_logprobs = grpo_update.make_reference_logprobs_fn(
          model_config, self.reference, mesh, rules.TRAIN_RULES, self.grpo_config.temperature,
          policy_config.num_microbatches)
    self._logprobs = None  # built on the first GRPO update
    self._handoff = None   # trainer -> sampler weights on a multi-host mesh
    self.sampler_mesh = (mesh_lib.host_local_mesh(mesh) if mesh_lib.spans_processes(mesh)
                         else mesh)
    self.sampler = Sampler(model_config, self._sampler_params(self.state["params"]),
                           tokenizer=tokenizer, mesh=self.sampler_mesh,
                           engine_config=policy_config.sampler)
    self._steps = {}
    self.allgather = distributed.allgather_texts  # counts across hosts (train on several)
    self._row_multiple = (mesh_lib.axis_size(mesh, "batch", rules.TRAIN_RULES)
                          * policy_config.num_microbatches)

  @property
  def params(self):
    return self.state["params"]

  @property
  def num_updates(self):
    return int(self.state["step"])

  @property
  def weights_id(self):
    return f"{self.name}@{self.num_updates}"

  def _sampler_params(self, params):
    """The params the sampler decodes with: params themselves on a single-host mesh, else
    this host's full copy on its local mesh (every host must call this together)."""
    if self.sampler_mesh is self.mesh:
      return params
    if self._handoff is None:
      self._handoff = handoff_lib.make_handoff(decoder.logical_axes(self.model_config),
                                               self.mesh, rules.SAMPLE_RULES)
    return self._handoff(params)

  def set_state(self, state):
    """Replaces the train state (e.g. after a restore) and points the sampler at it."""
    self.state = state
    self.sampler.update_params(self._sampler_params(state["params"]))

  def _step(self, loss):
    if loss not in self._steps:
      if loss == "rsft":
        loss_fn = functools.partial(rsft.loss, temperature=self.config.rsft_temperature)
      elif loss == "grpo":
        loss_fn = functools.partial(grpo.loss, grpo_config=self.grpo_config)
      else:
        raise ValueError(f"loss={loss!r} is not one of {LOSSES}.")
      self._steps[loss] = step_lib.make_train_step(
          self.model_config, loss_fn, self.optimizer, self.mesh, rules.TRAIN_RULES,
          num_microbatches=self.config.num_microbatches,
          learning_rate_schedule=optimizer_lib.learning_rate_schedule(self.optimizer_config))
    return self._steps[loss]

  def train(self, samples, loss="rsft", epochs=1, groups=None):
    """Optimizer steps over the samples of at most config.row_length tokens.

    "rsft": epochs passes of minibatches (groups: each sample's episode, used when
    config.minibatch_unit is "trajectory"). "grpo": grpo_update.update (module docstring); its
    passes are config.training.grpo.ppo_epochs, so epochs must be 1.
    On a mesh over several hosts, with groups given, samples are this host's own and groups
    gives each sample's episode as its index among every host's trained episodes (in the
    order one host would list them), which places it in the global order
    (_train_across_hosts); without groups, every host passes the same samples (e.g. the
    proposer's, in Harness Learning) and each places its shards of the same global batches.
    Returns:
      a TrainResult: the metrics of each optimizer step, the samples trained on and the
      number left out for their length (over all hosts).
    """
    if groups is not None and len(groups) != len(samples):
      raise ValueError(f"train(): {len(groups)} groups for {len(samples)} samples.")
    kept = [i for i, s in enumerate(samples) if len(s.token_ids) <= self.config.row_length]
    num_dropped = len(samples) - len(kept)
    if groups is not None:
      groups = [groups[i] for i in kept]
    samples = [samples[i] for i in kept]
    if loss == "grpo" and epochs != 1:
      raise ValueError(f"train(..., 'grpo', epochs={epochs}): GRPO passes over a batch are "
                       "config.training.grpo.ppo_epochs; call with epochs=1.")
    if mesh_lib.spans_processes(self.mesh) and groups is not None:
      return self._train_across_hosts(samples, loss, epochs, groups, num_dropped)
    if not samples:
      return TrainResult([], 0, num_dropped)
    step = self._step(loss)
    history = []
    try:
      if loss == "grpo":
        history = self._train_grpo(step, samples)
      else:
        self._train_epochs(step, samples, epochs, history, groups)
    finally:  # once per call: on a multi-host mesh this gathers the weights
      self.sampler.update_params(self._sampler_params(self.state["params"]))
    return TrainResult(history, len(samples), num_dropped)

  def _train_across_hosts(self, samples, loss, epochs, groups, num_dropped):
    """train() on a mesh over several hosts, each holding its own samples.

    One all-gather of counts ({episode: samples} and the samples dropped, per host) gives
    every host the global sample order: episodes in increasing index, an episode's samples in
    the order its host lists them, as one host holding every sample would list them. The
    minibatches are cut from that order with the same seeds as on one host (so 1 and P hosts
    train on the same sets of samples); each host packs the members it holds into its slice of
    every minibatch, the hosts agree on one row count (the largest need, rounded as
    _round_rows does; rows a host does not fill are padding, loss mask 0), and the slices
    become one global batch (jax.make_array_from_process_local_data). Losses are token sums
    over the global batch, so the numbers equal one host's up to float summation order.
    """
    counts = {}
    for group in groups:
      counts[int(group)] = counts.get(int(group), 0) + 1
    shares = [json.loads(text) for text in self.allgather(json.dumps(
        {"counts": sorted(counts.items()), "dropped": num_dropped}, separators=(",", ":")))]
    sizes = dict(pair for share in shares for pair in share["counts"])
    offsets, total = {}, 0
    for group in sorted(sizes):
      offsets[group], total = total, total + sizes[group]
    num_dropped = sum(share["dropped"] for share in shares)
    global_index, seen = [], {}
    for group in groups:
      global_index.append(offsets[int(group)] + seen.get(int(group), 0))
      seen[int(group)] = seen.get(int(group), 0) + 1
    local = dict(zip(global_index, range(len(samples))))
    if not total:
      return TrainResult([], 0, num_dropped)
    step = self._step(loss)
    if loss == "grpo":
      num_minibatches = grpo_update.num_minibatches_for(self.grpo_config, total,
                                                        self.config.samples_per_step)
      plan = [list(indices) for indices in grpo_update.minibatch_indices(
          total, num_minibatches, self._grpo_seed())]
    else:
      global_groups = [group for group in sorted(sizes) for _ in range(sizes[group])]
      plan = []
      for epoch in range(epochs):  # each minibatch is one step: the seeds one host uses
        plan += self.minibatches(total, epoch, global_groups, self.num_updates + len(plan))
    batches = self._global_batches(
        [[samples[local[i]] for i in indices if i in local] for indices in plan])
    history = []
    try:
      if loss == "grpo":
        self._ensure_logprobs()
        minibatches = [(batch, indices) for batch, indices in zip(batches, plan)]
        self.state, history = grpo_update.update(
            self.state, step, samples, self.grpo_config, self._logprobs,
            self._reference_logprobs, row_length=self.config.row_length,
            samples_per_step=self.config.samples_per_step, row_multiple=self._row_multiple,
            seed=self._grpo_seed(), minibatches=minibatches)
      else:
        for batch in batches:
          self.state, metrics = step(self.state, batch)
          history.append({name: float(value)
                          for name, value in jax.device_get(metrics).items()})
    finally:
      self.sampler.update_params(self._sampler_params(self.state["params"]))
    return TrainResult(history, total, num_dropped)

  def _global_batches(self, chunks):
    """One global batch per chunk (this host's samples of each minibatch): each chunk packed
    into the agreed number of rows on this host, the hosts' rows joined into one array."""
    process_count = jax.process_count()
    if self._row_multiple % process_count:
      raise ValueError(
          f"The train batch is split over {self._row_multiple} device rows, which the "
          f"{process_count} hosts cannot share evenly; give config.mesh data x fsdp a multiple "
          f"of {process_count} so that every host feeds its own rows.")
    local_multiple = self._row_multiple // process_count
    needed = [len({row for row, _ in packing.pack(chunk, self.config.row_length)[1]})
              for chunk in chunks]
    shares = [json.loads(text) for text in self.allgather(json.dumps(needed))]
    sharding = mesh_lib.batch_sharding(self.mesh, rules.TRAIN_RULES)
    batches = []
    for number, chunk in enumerate(chunks):
      rows = _round_rows(max(share[number] for share in shares), local_multiple)
      batch, _ = packing.pack(chunk, self.config.row_length, num_rows=rows)
      batch.setdefault("sampler_logprobs", np.zeros_like(batch["loss_mask"]))  # no samples
      batches.append({name: jax.make_array_from_process_local_data(
          sharding, value, (rows * process_count,) + value.shape[1:])
                      for name, value in batch.items()})
    return batches

  def _ensure_logprobs(self):
    if self._logprobs is None:
      self._logprobs = grpo_update.make_logprobs_fn(
          self.model_config, self.mesh, rules.TRAIN_RULES, self.grpo_config.temperature,
          self.config.num_microbatches)

  def _grpo_seed(self):
    return seeds_lib.derive_seed(self.config.seed, "minibatch_order", self.num_updates)

  def _train_grpo(self, step, samples):
    self._ensure_logprobs()
    self.state, history = grpo_update.update(
        self.state, step, samples, self.grpo_config, self._logprobs, self._reference_logprobs,
        row_length=self.config.row_length, samples_per_step=self.config.samples_per_step,
        row_multiple=self._row_multiple, seed=self._grpo_seed())
    return history

  def minibatches(self, num_samples, epoch, groups=None, num_updates=None):
    """[[sample index]] of one pass: samples_per_step samples each, or with groups and
    minibatch_unit "trajectory", every sample of samples_per_step groups (in sample order).
    Seeded by the policy's seed, num_updates (default: the optimizer steps taken) and epoch."""
    num_updates = self.num_updates if num_updates is None else num_updates
    rng = np.random.default_rng(seeds_lib.derive_seed(
        self.config.seed, "minibatch_order", num_updates, epoch))
    size = self.config.samples_per_step
    if groups is None or self.config.minibatch_unit == "sample":
      order = rng.permutation(num_samples)
      return [list(order[start:start + size]) for start in range(0, num_samples, size)]
    names = sorted(set(groups))
    order = [names[i] for i in rng.permutation(len(names))]
    batches = []
    for start in range(0, len(order), size):
      chosen = set(order[start:start + size])
      batches.append([i for i, group in enumerate(groups) if group in chosen])
    return batches

  def _train_epochs(self, step, samples, epochs, history, groups=None):
    for epoch in range(epochs):
      for indices in self.minibatches(len(samples), epoch, groups):
        chunk = [samples[i] for i in indices]
        batch, _ = packing.pack(chunk, self.config.row_length)
        rows = _round_rows(batch["tokens"].shape[0], self._row_multiple)
        if rows != batch["tokens"].shape[0]:
          batch, _ = packing.pack(chunk, self.config.row_length, num_rows=rows)
        self.state, metrics = step(self.state, batch)
        history.append({name: float(value) for name, value in jax.device_get(metrics).items()})

  def close(self):
    self.sampler.close()
