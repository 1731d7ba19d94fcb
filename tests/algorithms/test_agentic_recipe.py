"""The coding-agent proposers as a recipe selects them: config.search.proposer="agentic" in a
harness_only run (the scripted tool-calling policy of tests/search/test_agentic_search.py over
a scripted solver in the sandboxed runtime), the config boundary's checks of the new keys, the
CLI agent built from a config, and a dead endpoint stopping a search instead of becoming empty
proposals."""
import collections
import glob
import hashlib
import json
import os
import socket

import pytest

from tests.algorithms import tiny
from tests.search import fakes
from tests.search.test_agentic_search import ScriptedPolicy
from tests.search.test_agentic_search import planting_model
from whale_jax import tasks
from whale_jax import typed_config
from whale_jax.algorithms import builders
from whale_jax.algorithms import experiment
from whale_jax.algorithms import experiment_config
from whale_jax.algorithms import hosts
from whale_jax.algorithms import sections
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.harness import runtime as runtime_lib
from whale_jax.sampling import openai_client
from whale_jax.search import agentic_proposer
from whale_jax.search import cli_agent
from whale_jax.search import meta_harness
from whale_jax.search import archive as archive_lib
from whale_jax.search import model_proposer
from whale_jax.search import proposal as proposal_lib

INSTRUCTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "whale_jax", "tasks", "qa", "instructions", "synthetic_qa.md")


def agentic_config():
  config = tiny.tiny_config("harness_only")
  config.search = dict(proposer="agentic",
                       agent_budgets=dict(max_steps=6, max_runs=1, max_run_tasks=2))
  return config


def test_harness_only_with_the_agentic_proposer_counts_its_runs_and_accepts_its_patch(
    tmp_path, monkeypatch):
  config = agentic_config()
  config.sampling.max_tokens = 512   # the scripted solver's replies, whole
  domain_section = config.domain.to_dict()
  domain = tasks.get_domain(domain_section.pop("name"), **domain_section)
  splits = domain.splits()
  split_of = {i.id: name for name, instances in splits.items() for i in instances}
  target = splits["harness"][1]
  policy = ScriptedPolicy()
  clients = []

  def scripted_client(search_section, run_policy, tokenizer):
    clients.append(search_section.agent_backend)
    return policy
  monkeypatch.setattr(builders, "agent_client", scripted_client)

  episodes = collections.Counter()   # what the runtime ran, by split: observed from outside
  original = runtime_lib.HarnessRuntime.submit   # every episode passes here, batched or not

  def counting(self, harness, episode):
    episodes[split_of[episode.task_id]] += 1
    return original(self, harness, episode)
  monkeypatch.setattr(runtime_lib.HarnessRuntime, "submit", counting)

  build_run = experiment.build_run

  def with_scripted_solver(*args, **kwargs):   # the solver: a scripted QA model, not weights
    run = build_run(*args, **kwargs)
    run.runtime.close()
    run.runtime = HarnessRuntime(
        ScriptedBackend(run.tokenizer, planting_model(sum(splits.values(), []),
                                                      target.public["question"])),
        run.tokenizer, num_workers=2, timeout_seconds=30,
        allowed_imports=run.domain.allowed_imports)
    return run
  monkeypatch.setattr(experiment, "build_run", with_scripted_solver)

  workdir = str(tmp_path / "run")
  summary = experiment.run(config, workdir, show_progress=False)
  assert clients == ["in_process"]

  # The agent's session is saved in the search's archive, with the steering file's hash.
  (session_path,) = glob.glob(os.path.join(workdir, "archive", "*", "agent_sessions",
                                           "iteration_*", "session_*.json"))
  session = json.load(open(session_path))
  with open(INSTRUCTIONS, encoding="utf-8") as file:
    steering_hash = hashlib.sha256(file.read().encode("utf-8")).hexdigest()[:16]
  assert session["instructions"]["hash"] == steering_hash
  assert session["submitted"] and session["rollouts"] == 2
  assert policy.trace_path.endswith(f"/traces/{target.id}.txt")

  # The run's config records what the proposer resolved: the hash and the recipe's default.
  resolved = json.load(open(os.path.join(workdir, "config.json")))["resolved"]["proposer"]
  assert resolved["instructions"]["hash"] == steering_hash
  assert resolved["search_answers"] == "answers"   # harness_only: Meta-Harness's choice
  assert resolved["run_tool"] and resolved["budgets"]["max_steps"] == 6

  # The agent's two `run` episodes are in the run's harness rollouts, as the runtime saw them.
  counts = summary["counts"]
  assert counts["harness"] == episodes["harness"] + episodes["validation"]
  rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  (search_row,) = [row for row in rows if row["phase"] == "harness"]
  assert search_row["agent_rollouts"] == 2
  assert counts["harness"] == search_row["search_rollouts"] + 2

  # The search accepted the submitted patch, and it became the incumbent.
  archive_dir = os.path.dirname(os.path.dirname(os.path.dirname(session_path)))
  archive = archive_lib.Archive(archive_dir)
  accepted = archive.get(search_row["accepted"])
  assert accepted.origin == "patch" and accepted.proposer == "agentic"
  assert accepted.instruction_hash == steering_hash
  source = archive.source(accepted.id)
  assert "TOPK = 3" in source and "TOPK = 1" in archive.source("c0000")
  assert summary["incumbent_hash"] == Harness(source).hash


@pytest.mark.parametrize("search, message", [
    (dict(proposer="agentic", agent_budget={}), "did you mean 'agent_budgets'"),
    (dict(proposer="agentic", agent_budgets=dict(max_step=3)), "did you mean 'max_steps'"),
    (dict(proposer="agentic", agent_budgets=dict(max_steps=0)), "max_steps=0 must be an int >= 1"),
    (dict(proposer="agentic", agent_backend="opnai"), "did you mean 'openai'"),
    (dict(proposer="agentic", agent_backend="openai"), "base_url is missing"),
    (dict(proposer="agentic", run_tool="yes"), "run_tool='yes' is str"),
    (dict(proposer="agentic", search_answers="answer"), "did you mean 'answers'"),
    (dict(proposer="agentic", instructions="no/such.md"), "instructions='no/such.md' does not"),
    (dict(proposer="agentic", agent_backend="openai", base_url="http://127.0.0.1:9/v1",
          model="m", sampling=dict(temprature=1.0)), "did you mean 'temperature'"),
    (dict(proposer="agentic", sampling=dict(max_tokens=0)), "config.search.sampling"),
    (dict(proposer="agentc"), "did you mean 'agentic'"),
    (dict(proposer="cli_agent"), "command=None"),
    (dict(proposer="cli_agent", command=["a"], wall_clock_seconds=0), "must be > 0"),
    (dict(proposer="cli_agent", command=["a"], endpoint=("127.0.0.1",)), "(host, port)"),
    (dict(proposer="cli_agent", command=["a"], comand="b"), "did you mean 'command'"),
])
def test_the_config_boundary_refuses_bad_agent_keys_in_one_line(search, message, tmp_path):
  config = agentic_config()
  config.search = search
  with pytest.raises(typed_config.ConfigError) as raised:
    experiment.run(config, str(tmp_path / "run"), show_progress=False)
  assert message in str(raised.value) and "\n" not in str(raised.value)
  assert not os.path.exists(tmp_path / "run")   # refused before anything was written


def test_an_agent_as_harness_learning_teacher_is_refused(tmp_path):
  config = tiny.tiny_config("harness_learning")
  config.harness_learning = dict(teachers=(dict(proposer="agentic"),))
  with pytest.raises(typed_config.ConfigError, match=r"teachers\[0\]\.proposer='agentic'"):
    experiment_config.parse(config, str(tmp_path))


def test_the_cli_agent_is_built_jailed_from_its_section(tmp_path):
  domain = tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)
  splits = domain.splits()
  section = dict(proposer="cli_agent", command="agent -p {prompt}", wall_clock_seconds=60,
                 max_cost_usd=2.5, endpoint=("127.0.0.1", 8123), read_only_paths=(
                     str(tmp_path),), instructions=INSTRUCTIONS)
  proposer = builders.build_proposer(
      typed_config.read(sections.SearchSection, section, "config.search"), None, None, domain,
      "harness_learning")
  assert isinstance(proposer, cli_agent.CliAgentProposer)
  assert isinstance(proposer.runner, cli_agent.BwrapRunner)
  described = proposer.config()
  assert described["command"] == ["agent", "-p", "{prompt}"]
  assert described["search_answers"] == "answers_and_documents"   # Harness Learning's default
  assert described["runner"]["endpoint"] == ("127.0.0.1", 8123)
  assert described["max_cost_usd"] == 2.5 and described["wall_clock_seconds"] == 60
  gold = splits["validation"][0].reference["golden_answers"][0]
  assert gold in proposer.withheld     # a held-out answer is never shown to the agent
  bound = proposer.for_search(tmp_path / "archive", None, splits["harness"])
  assert bound.archive_dir == str(tmp_path / "archive") and proposer.archive_dir is None


class DeadEndpoint:
  def chat(self, messages, **sampling):
    raise openai_client.EndpointUnavailable("http://127.0.0.1:9/v1", 3, "refused", 2)


class FlakyEndpoint:
  def chat(self, messages, **sampling):
    raise ConnectionError("reset by peer")


def test_a_dead_endpoint_stops_the_search_but_one_failed_call_is_a_failed_proposal():
  proposer = model_proposer.ModelProposer(DeadEndpoint(), name="dead")

  class Context:
    messages, iteration, num_tokens = ({"role": "user", "content": "x"},), 2, 1
    call_site = (2,)   # ProposerContext.call_site of iteration 2 in an unnamed session
  with pytest.raises(openai_client.EndpointUnavailable, match="failed 3 calls in a row"):
    proposal_lib.safe_propose(proposer, Context(), 2)
  (failed,) = proposal_lib.safe_propose(model_proposer.ModelProposer(FlakyEndpoint()),
                                        Context(), 1)
  assert failed.error == "ConnectionError: reset by peer" and not failed.text


def test_a_dead_endpoint_stops_an_agentic_search(tmp_path):
  domain = tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)
  with socket.socket() as closed:   # a port nothing listens on
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
  client = agentic_proposer.OpenAIToolClient(f"http://127.0.0.1:{port}/v1", "proposer",
                                             max_retries=0, max_consecutive_failures=2)
  proposer = agentic_proposer.AgenticProposer(client, tmp_path / "archive", domain,
                                              domain.splits()["harness"])
  with pytest.raises(openai_client.EndpointUnavailable, match=f"127.0.0.1:{port}.*2 calls"):
    meta_harness.search(Harness(domain.seed_harness, origin="seed"), fakes.FakeEvaluate(),
                        proposer, tmp_path / "archive", domain=domain,
                        instances=domain.splits()["harness"], iterations=4,
                        candidates_per_iteration=1, weights_id="w0")
  # The first failure was a failed call (its transcript kept, nothing archived); the second
  # stopped the search.
  session = json.load(open(tmp_path / "archive" / "agent_sessions" / "iteration_002" /
                           "session_00.json"))
  assert session["stop_reason"] == "client_error" and f"127.0.0.1:{port}" in session["error"]
  assert not (tmp_path / "archive" / "agent_sessions" / "iteration_003").exists()


def test_a_proposer_bound_on_a_multi_host_run_still_proposes_on_host_zero_only():
  class Binding:
    def __init__(self, archive_dir=None):
      self.archive_dir, self.calls = archive_dir, 0

    def for_search(self, archive_dir, evaluate, instances, seed=0):
      return Binding(archive_dir)

    def propose(self, context, n):
      self.calls += 1
      return [proposal_lib.failed("host 0 proposed")]

  sent = []
  host_zero = hosts.HostZeroProposer(Binding(), process_index=0,
                                     broadcast=lambda text: sent.append(text) or text)
  bound = host_zero.for_search("/a", None, [])
  assert isinstance(bound, hosts.HostZeroProposer) and bound.proposer.archive_dir == "/a"
  (proposal,) = bound.propose(None, 1)
  assert proposal.error == "host 0 proposed" and bound.proposer.calls == 1 and sent
  other = hosts.HostZeroProposer(Binding(), process_index=1, broadcast=lambda text: sent[0])
  bound_other = other.for_search("/b", None, [])
  assert bound_other.propose(None, 1)[0].error == "host 0 proposed"
  assert bound_other.proposer.calls == 0        # host 1 never asked its own proposer
  with pytest.raises(AttributeError):           # a proposer that does not bind: none to call
    hosts.HostZeroProposer(object(), process_index=0).for_search
