"""Task domains: data splits, verifiers, tools, seed harnesses and behaviour metrics.

  from whale_jax import tasks
  domain = tasks.get_domain("synthetic_qa", seed=0)
  splits = domain.splits()                       # {"weight", "harness", "validation", "test"}
  episode = tasks.make_episode(domain, splits["harness"][0], SamplingParams(max_tokens=256))
  trajectory = runtime.run_episodes(Harness(domain.seed_harness), [episode])[0]
  score = domain.verify(splits["harness"][0], trajectory.answer, trajectory)
  metrics = domain.metrics(instances, trajectories, scores)

Domains: "searchqa", "synthetic_qa", "math", "chess", "docqa", "toolflow",
"reasoning_gym:<dataset>" (see whale_jax.tasks.registry). Each family is a folder (qa/, math/,
chess/, docqa/, toolflow/, reasoning_gym/: builder, loaders, answers, generator, edit
catalogue, seed harnesses, instructions); this folder's top keeps what all domains share. An
instance's public fields are the only part of it that crosses into a sandbox; its reference
stays on the host with the verifier.
"""
from whale_jax.tasks.domain import Domain
from whale_jax.tasks.domain import Instance
from whale_jax.tasks.domain import make_episode
from whale_jax.tasks.registry import domain_names
from whale_jax.tasks.registry import get_domain
from whale_jax.tasks.splits import SPLIT_NAMES
