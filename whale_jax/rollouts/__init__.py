"""Episodes run and scored: the one collector under training rollouts, harness search, gates
and test evaluations.

  from whale_jax.rollouts import collector, grouped
  evaluation = collector.collect(runtime, domain, harness, instances, seeds, sampling)
  batch = grouped.collect(runtime, domain, harness, instances, sampling, num_samples=8,
                          seed_key=("weight", step), run_seed=0)

Modules: collector (Evaluation; collect and collect_many: run, retry infrastructure failures,
score), grouped (RolloutBatch: G episodes per instance, seeded per episode, for training),
sharding (multi-host: whole groups per host, numbers across hosts, EpisodeRecord).
This layer sits under search/ and algorithms/: both take their episodes from it.
"""
