"""The one episode collector: every recipe's way to run harness episodes and score them.

  evaluation = collect(runtime, domain, harness, instances, seeds, sampling)   # one per seed
  evaluation.scores, evaluation.trajectories, evaluation.success_rate, evaluation.mean_turns
  evaluations = collect_many(runtime, domain, [(h, instances, seeds) for h in candidates],
                             sampling)                                    # all in flight

Training rollouts (rollouts/grouped.py), harness search and gate evaluations
(search/evaluation.py's Evaluator) and test evaluations all go through collect, so all of
them score alike and retry infrastructure failures alike:
an episode that ends "ok" is scored by domain.verify; "harness_error" and "timeout"
score 0. An "infra_error" episode (not the harness's fault) is run again up to infra_retries
times and scores 0 if it never succeeds; the count is in evaluation.num_infra_errors, and the
evaluation cache (search/evaluation_cache.py) never stores it. Retried episodes count as
rollouts. Turns are the llm calls of an episode (WHALE's turn count).

Several harnesses at once (WHALE evaluates an iteration's 3 candidates in parallel):
collect_many takes [(harness, instances, seeds)] and puts every job's episodes in flight as
one batch (runtime.run_many: the runtime's workers and the engine's slots serve them
together; a runtime without run_many runs the jobs one after another), retries the infra
failures of all jobs as one batch and verifies all answers in one domain call. Each episode
keeps its own seed, so the results equal one collect per job, in any order.

Several hosts (a runtime with `hosts`, algorithms/hosts.ShardedRuntime): collect_many splits
the episodes of all jobs by whole groups (rollouts/sharding.py: episodes of one job sharing a
task id, group k on host k mod P); each host runs, retries and verifies (judges) only its own,
then one all-gather of numbers gives every host each episode's score, outcome, turns and token
counts, and the jobs' summed rollouts and generated tokens. The Evaluations hold this host's
Trajectories and EpisodeRecords for the other hosts' episodes; scores, costs, outcome counts
and mean turns equal one host's. Nothing else crosses hosts here: the hosts write their own
trajectories to trace shards where they are kept (harness/trajectory.py).
"""
import dataclasses
import json

from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import sharding
from whale_jax.tasks import domain as domain_lib

INFRA_RETRIES = 1


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """Per-instance results of one harness, in the order of the instances.

  Attributes:
    task_ids, sample_keys: what was evaluated.
    scores: one score in [0, 1] per instance.
    trajectories: one Trajectory per instance (on a multi-host run, a
      rollouts.sharding.EpisodeRecord, numbers only, for each episode another host ran).
    rollouts: episodes actually run to produce this (cache hits cost none; retries count).
    generated_tokens: tokens the model generated in those episodes.
  """
  task_ids: tuple[str, ...]
  sample_keys: tuple[int, ...]
  scores: tuple[float, ...]
  trajectories: tuple[trajectory_lib.Trajectory, ...]
  rollouts: int = 0
  generated_tokens: int = 0

  def __post_init__(self):
    sizes = {len(self.task_ids), len(self.sample_keys), len(self.scores),
             len(self.trajectories)}
    if len(sizes) != 1:
      raise ValueError(f"Evaluation needs one task id, sample key, score and trajectory per "
                       f"instance; got {len(self.task_ids)}, {len(self.sample_keys)}, "
                       f"{len(self.scores)} and {len(self.trajectories)}.")

  @property
  def success_rate(self):
    return sum(self.scores) / len(self.scores) if self.scores else 0.0

  @property
  def mean_turns(self):
    if not self.trajectories:
      return 0.0
    return sum(t.num_turns for t in self.trajectories) / len(self.trajectories)

  @property
  def num_infra_errors(self):
    return sum(t.outcome == "infra_error" for t in self.trajectories)

  def outcome_counts(self):
    return {outcome: sum(t.outcome == outcome for t in self.trajectories)
            for outcome in trajectory_lib.OUTCOMES}

  def score_by_task(self):
    return dict(zip(self.task_ids, self.scores))


def collect(runtime, domain, harness, instances, seeds, sampling, infra_retries=INFRA_RETRIES,
            episode_ids=None):
  """Runs one episode per (instance, seed) (all in flight together), retries infrastructure
  failures, scores them; returns the Evaluation (task_ids and sample_keys per episode).

  Args:
    instances, seeds: one seed (the episode's sampling seed) per instance; an instance may
      appear several times (G samples of a training prompt).
    sampling: SamplingParams of every episode; its seed is replaced by the episode's.
    infra_retries: extra attempts for an episode that ends "infra_error".
    episode_ids: one name per episode for its trajectory (default "").
  """
  return collect_many(runtime, domain, [(harness, instances, seeds, episode_ids)], sampling,
                      infra_retries)[0]


def run_batches(runtime, batches):
  """[[Trajectory]] of batches [(harness, [Episode])]: all in flight together through
  runtime.run_many, or one batch after another with run_episodes on a runtime without it."""
  batches = [(harness, list(episodes)) for harness, episodes in batches]
  run_many = getattr(runtime, "run_many", None)
  if run_many is not None:
    return [list(trajectories) for trajectories in run_many(batches)]
  return [list(runtime.run_episodes(harness, episodes)) if episodes else []
          for harness, episodes in batches]


def collect_many(runtime, domain, jobs, sampling, infra_retries=INFRA_RETRIES):
  """collect for several jobs at once (module docstring); returns one Evaluation per job.

  Args:
    runtime: a HarnessRuntime; on a multi-host run one with a `hosts` attribute (a
      sharding.HostGroup, algorithms/hosts.ShardedRuntime), and then this host runs, retries
      and verifies only the episodes it owns (module docstring).
    jobs: [(harness, instances, seeds)] or [(harness, instances, seeds, episode_ids)]: what
      collect takes, per job.
    sampling, infra_retries: as collect's, for every job.
  """
  prepared = []
  for job in jobs:
    harness, instances, seeds, *rest = job
    instances, seeds = list(instances), [int(seed) for seed in seeds]
    if len(instances) != len(seeds):
      raise ValueError(f"collect got {len(instances)} instances but {len(seeds)} seeds; give "
                       "one seed per instance.")
    episode_ids = list((rest[0] if rest else None) or [""] * len(instances))
    prepared.append((harness, instances, seeds, episode_ids))
  hosts = getattr(runtime, "hosts", None)
  owners = [[0] * len(job[1]) for job in prepared]
  if hosts is not None and hosts.count > 1:
    flat = sharding.group_owners([(number, instance.id) for number, job in enumerate(prepared)
                                  for instance in job[1]], hosts.count)
    for batch in owners:
      batch[:], flat = flat[:len(batch)], flat[len(batch):]
  me = hosts.index if hosts is not None and hosts.count > 1 else 0
  mine = [[i for i, owner in enumerate(batch) if owner == me] for batch in owners]

  def episodes(job, indices):
    _, instances, seeds, episode_ids = job
    return [domain_lib.make_episode(domain, instances[i], sampling.replace(seed=seeds[i]),
                                    episode_id=episode_ids[i]) for i in indices]

  trajectories = [[None] * len(job[1]) for job in prepared]
  ran = run_batches(runtime, [(job[0], episodes(job, indices))
                              for job, indices in zip(prepared, mine)])
  rollouts = [len(indices) for indices in mine]
  generated_tokens = [sum(t.num_completion_tokens for t in batch) for batch in ran]
  for number, (indices, batch) in enumerate(zip(mine, ran)):
    for index, trajectory in zip(indices, batch):
      trajectories[number][index] = trajectory
  for _ in range(infra_retries):
    failed = [[i for i in indices if trajectories[number][i].outcome == "infra_error"]
              for number, indices in enumerate(mine)]
    if not any(failed):
      break
    retried = run_batches(runtime, [(job[0], episodes(job, indices))
                                    for job, indices in zip(prepared, failed)])
    for number, (indices, again) in enumerate(zip(failed, retried)):
      rollouts[number] += len(indices)
      generated_tokens[number] += sum(t.num_completion_tokens for t in again)
      for index, trajectory in zip(indices, again):
        trajectories[number][index] = trajectory
  # One verification call over this host's finished episodes (a judge answers them together).
  ok = [(number, index) for number, indices in enumerate(mine) for index in indices
        if trajectories[number][index].ok]
  verified = domain_lib.verify_episodes(
      domain, [prepared[n][1][i] for n, i in ok], [trajectories[n][i].answer for n, i in ok],
      [trajectories[n][i] for n, i in ok])
  scores = [[0.0] * len(job[1]) for job in prepared]  # not ended "ok": scores 0
  for (number, index), score in zip(ok, verified):
    scores[number][index] = score
  if hosts is not None and hosts.count > 1:
    _gather_numbers(hosts, prepared, owners, mine, trajectories, scores, rollouts,
                    generated_tokens)
  return [Evaluation(tuple(i.id for i in job[1]), tuple(job[2]), tuple(scores[number]),
                     tuple(trajectories[number]), rollouts=rollouts[number],
                     generated_tokens=generated_tokens[number])
          for number, job in enumerate(prepared)]


def _gather_numbers(hosts, prepared, owners, mine, trajectories, scores, rollouts,
                    generated_tokens):
  """One all-gather of every host's numbers (sharding.encode_numbers per episode it ran, its
  rollouts and generated tokens per job, a digest of the episodes it was asked to run); fills
  in the other hosts' episodes as EpisodeRecords and sums the costs, in place."""
  asked = sharding.digest([[job[0].hash, [instance.id for instance in job[1]], job[2], job[3]]
                           for job in prepared])
  payload = json.dumps({"digest": asked, "rollouts": rollouts, "tokens": generated_tokens,
                        "numbers": [[sharding.encode_numbers(scores[n][i], trajectories[n][i])
                                     for i in indices] for n, indices in enumerate(mine)]},
                       separators=(",", ":"))
  shares = [json.loads(text) for text in hosts.allgather(payload)]
  drifted = [host for host, share in enumerate(shares) if share["digest"] != shares[0]["digest"]]
  if drifted:
    raise RuntimeError(
        f"Hosts {drifted} were asked to run other episodes (or another harness) than host 0 "
        f"({sum(len(job[1]) for job in prepared)} episodes here, harnesses "
        f"{[job[0].hash for job in prepared]}): the hosts' loops have drifted apart. Check that "
        "every host runs the same config and code on the same workdir.")
  for number, job in enumerate(prepared):
    rollouts[number] = sum(share["rollouts"][number] for share in shares)
    generated_tokens[number] = sum(share["tokens"][number] for share in shares)
    positions = [0] * hosts.count
    for index, owner in enumerate(owners[number]):
      numbers = shares[owner]["numbers"][number][positions[owner]]
      positions[owner] += 1
      if owner != hosts.index:
        scores[number][index], trajectories[number][index] = sharding.decode_numbers(
            numbers, job[3][index], job[1][index].id, owner)
