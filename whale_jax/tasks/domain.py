"""What a task domain is: instances with public fields and a private reference, and a Domain.

An Instance is one problem. Its `public` fields are the `task` dict a harness receives — the
only part of it that ever crosses into a sandbox — and must survive a JSON round trip. Its
`reference` (golden answers, solution line, scorer entry) stays on the host, where the
verifier reads it; it is left out of repr() so it cannot slip into a log or a prompt.

A Domain is a frozen bundle of plain functions, built by `whale_jax.tasks.get_domain`:

  domain.splits()                  -> {"weight": [...], "harness": [...], "validation": [...],
                                       "test": [...]}, seeded, disjoint, built once
  domain.verify(instance, answer, trajectory) -> score in [0, 1]
  domain.verify_many(instances, answers, trajectories) -> [score], or None: a batch at once
                                      (SearchQA's judge asks its requests concurrently);
                                      verify_episodes(domain, ...) picks it or verify
  domain.tools(instance)           -> {"search": fn, ...}, host-side callables for one episode
  domain.metrics(instances, trajectories, scores) -> {"success_rate": ..., ...}
  domain.description               the task description shown to harness proposers
  domain.seed_harness              h0: the source of a `run(task, llm, tools) -> str` program
  domain.allowed_imports           modules a harness of this domain may import
  domain.counters()                -> {name: int (or str for a mode)}, what the domain's own
                                      services did so far in this process (SearchQA: its LLM
                                      judge's calls, parsed verdicts, fallbacks, cache hits,
                                      tokens, constrained-choice mode); {} for most domains
  domain.edit_catalogue            the offline edit library's mechanisms for its harnesses
                                      (tasks/<family>/edits.py); () for none
  domain.instructions              path of the agentic proposers' steering text
                                      (tasks/<family>/instructions/<name>.md); None = default

make_episode(domain, instance, sampling) is the harness runtime's Episode for an instance.
verify scores what the episode did whatever its outcome (answer is None unless it ended "ok");
callers that count failed episodes as 0 do so themselves.
"""
import dataclasses
import functools
import json
from typing import Any, Callable, Mapping

from whale_jax.harness import runtime
from whale_jax.parallel import accounting
from whale_jax.sampling import api


@dataclasses.dataclass(frozen=True, eq=False)
class Instance:
  """One problem.

  Attributes:
    id: unique and stable across runs (e.g. "nq:1234", "synthetic:17", "lichess:00sHx").
    public: the JSON-serializable `task` dict a harness sees.
    reference: whatever the verifier needs; never sent to a sandbox.
  """
  id: str
  public: Mapping[str, Any]
  reference: Any = dataclasses.field(default=None, repr=False)

  def __post_init__(self):
    if not isinstance(self.id, str) or not self.id:
      raise ValueError(f"Instance.id={self.id!r} must be a non-empty string.")
    if not isinstance(self.public, Mapping):
      raise TypeError(f"Instance {self.id}: public must be a dict of task fields; got "
                      f"{type(self.public).__name__}.")
    try:
      round_trip = json.loads(json.dumps(dict(self.public)))
    except (TypeError, ValueError) as error:
      raise ValueError(f"Instance {self.id}: public fields must be JSON-serializable, since "
                       f"they are sent to the sandbox as JSON ({error}).") from None
    if round_trip != dict(self.public):
      raise ValueError(f"Instance {self.id}: public fields change in a JSON round trip (tuples "
                       "or non-string keys?); use lists and string keys.")


def public_fingerprint(instance):
  """A canonical string of the public fields: two instances a harness cannot tell apart."""
  return json.dumps(dict(instance.public), sort_keys=True, ensure_ascii=False)


@dataclasses.dataclass(frozen=True)
class Domain:
  """A task domain as plain functions (see the module docstring).

  Attributes:
    name: registry name, e.g. "synthetic_qa" or "reasoning_gym:chain_sum".
    description: what the task is and what `run` must return, for harness proposers.
    seed_harness: source of h0.
    splits: () -> {split name: [Instance]}; the same lists on every call.
    verify: (instance, answer, trajectory or None) -> float in [0, 1].
    tools: instance -> {tool name: host-side callable} for one episode.
    metrics: (instances, trajectories, scores) -> {metric name: float}.
    allowed_imports: modules a candidate harness may import.
    config: the resolved configuration, for the run record.
    counters: () -> {name: int} (module docstring).
    verify_many: (instances, answers, trajectories) -> [float], the scores of a batch; None
      scores one at a time with verify.
    edit_catalogue: ((mechanism name, make), ...), make(source, tree) -> [(blocks, hypothesis,
      prompt_only_safe)] (whale_jax/harness/source_edits.py); () when the domain has none.
    instructions: path of a Markdown steering file for agentic proposers; None = the default.
  """
  name: str
  description: str
  seed_harness: str
  splits: Callable[[], dict]
  verify: Callable[..., float]
  tools: Callable[[Instance], dict]
  metrics: Callable[..., dict]
  allowed_imports: tuple[str, ...]
  config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  counters: Callable[[], dict] = dict
  verify_many: Callable[..., list] | None = None
  edit_catalogue: tuple = ()
  instructions: str | None = None

  def __post_init__(self):
    object.__setattr__(self, "splits", functools.cache(self.splits))


def verify_episodes(domain, instances, answers, trajectories):
  """The scores of a batch of episodes: domain.verify_many when the domain has one, else
  domain.verify for each. Counted in parallel.accounting (verify_calls, verified_episodes,
  seconds["verify"]): what this process verified."""
  instances = list(instances)
  accounting.COUNTERS.add("verify_calls")
  accounting.COUNTERS.add("verified_episodes", len(instances))
  with accounting.COUNTERS.timed("verify"):
    return _verify(domain, instances, answers, trajectories)


def _verify(domain, instances, answers, trajectories):
  verify_many = getattr(domain, "verify_many", None)  # test doubles may have verify alone
  if verify_many is not None:
    return [float(score) for score in verify_many(list(instances), list(answers),
                                                  list(trajectories))]
  return [float(domain.verify(instance, answer, trajectory))
          for instance, answer, trajectory in zip(instances, answers, trajectories)]


def make_episode(domain, instance, sampling=api.SamplingParams(), episode_id=""):
  """The runtime Episode of `instance`: its public fields, a fresh set of the domain's tools."""
  return runtime.Episode(task_id=instance.id, task=dict(instance.public),
                         tools=domain.tools(instance), sampling=sampling, episode_id=episode_id)
