r"""Meta-Harness search on synthetic QA with a scripted model: where the search's time goes,
and the one-shot against the agentic proposer.

  python bench/meta_harness_search.py                      # 64 tasks, 6 iterations x 3
  python bench/meta_harness_search.py --num_tasks=16 --iterations=3
  python bench/meta_harness_search.py --proposers=one_shot,agentic --num_tasks=32

The model is whale_jax.harness.ScriptedBackend answering like a reader that needs help: it
searches with the question and answers correctly only when its prompt shows at least three
passages, or carries a short-answer reminder. The edit library proposes; every candidate is
run on the sandboxed runtime. Prints the accepted harness's success against h0's, the rollouts,
the wall time split into evaluation (episodes on the runtime) and the search's own work
(proposer context, proposals, patch application, checks, archive writes), per candidate; then
resumes the finished archive to time a replay that runs no episode.

--proposers compares proposers on the same tasks, model and seed:
  one_shot  the edit library's proposals, charged the tokens a one-shot model proposer would
            spend on them: the whole rendered context (whale_jax.search.context) per proposal
            plus the reply.
  agentic   whale_jax.search.agentic_proposer with a scripted policy: it reads scores.md,
            greps the current harness's traces for failed answers, reads its source, takes its
            share of the edit library's ideas (the M sessions of an iteration take disjoint
            shares), prototypes up to --agent_runs of them with `run` on
            --agent_run_tasks failing tasks, and submits the one that scored best. Its tokens
            are the conversation's (chars / 4 per message, every step re-reading it all).
Per proposer: the best success found, rollouts-to-best (episodes run until the first candidate
with that success was evaluated; the agent's `run` episodes included), all rollouts, and the
proposer's prompt and completion tokens.
"""
import dataclasses
import json
import os
import argparse
import re
import shutil
import tempfile
import time

from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import SamplingParams
from whale_jax.search import agent_tools
from whale_jax.search import agentic_proposer
from whale_jax.search import context as context_lib
from whale_jax.search import edit_library
from whale_jax.search import evaluation
from whale_jax.search import meta_harness
from whale_jax.search import proposal as proposal_lib
from whale_jax.search.tool_calls import ToolCall
from whale_jax.tokenization import load_tokenizer


def reader(instances):
  gold = {i.public["question"]: i.reference["golden_answers"][0] for i in instances}

  def reply(prompt):
    question = re.findall(r"Question: (.*?)\n", prompt)[-1]
    if "<tool_response>" in prompt or "Passages retrieved" in prompt:
      helped = (len(set(re.findall(r"Doc (\d+) \(Title", prompt))) >= 3 or
                "only the short entity" in prompt)
      return f"<answer>{gold[question] if helped else 'unknown'}</answer>"
    return ("<tool_call><function=search><parameter=query_list>"
            f"[\"{question}\"]</parameter></function></tool_call>")
  return reply


class OneShot:
  """The edit library, charged what a one-shot model proposer would read and write."""
  name = "one_shot"

  def __init__(self, seed):
    self.library = edit_library.EditLibraryProposer(seed=seed)

  def propose(self, context, n):
    return [dataclasses.replace(
        p, prompt_tokens=context.num_tokens, proposer=self.name,
        completion_tokens=context_lib.count_tokens(
            p.raw_output or proposal_lib.format_reply(p.hypothesis, p.text)))
            for p in self.library.propose(context, n)]


class ScriptedAgent:
  """A tool-calling policy (see the module docstring); set_context before each session."""

  def __init__(self, seed, num_ideas, run_tasks):
    self.library = edit_library.EditLibraryProposer(seed=seed)
    self.num_ideas, self.run_tasks = num_ideas, run_tasks

  def start(self, context, index, count):
    """Session index of count in this iteration: each prototypes its own share of ideas."""
    self.context, self.plan, self.scores = context, None, []
    ideas = self.library.propose(context, self.num_ideas * count)
    self.ideas = ideas[index::count][:self.num_ideas]

  def complete(self, messages, tools, **sampling):
    incumbent = self.context.incumbent_id
    last = messages[-1]["content"]
    if self.plan is None:
      self.plan = [("read", {"path": "scores.md"}),
                   ("grep", {"pattern": "<answer>unknown", "path":
                             f"candidates/{incumbent}/traces"}),
                   ("read", {"path": f"candidates/{incumbent}/harness.py"})]
      self.failing = []
    elif self.plan and self.plan[0][0] == "read" and "harness.py" in self.plan[0][1]["path"]:
      self.failing = list(dict.fromkeys(re.findall(r"traces/(\S+?)\.txt:\d+:", last)))
    elif self.plan == [] and "mean score" in last:
      self.scores.append(float(re.search(r"mean score ([\d.]+)", last).group(1)))
    if not self.plan:
      tried = len(self.scores)
      if tried < len(self.ideas) and tried < self.num_ideas and "budget is spent" not in last:
        idea = self.ideas[tried]
        arguments = {idea.kind: idea.text}
        if self.failing:
          arguments["task_ids"] = self.failing[:self.run_tasks]
        else:
          arguments["num_tasks"] = self.run_tasks
        return self._reply("run", arguments)
      if not self.ideas:
        return self._reply("submit", {"hypothesis": "nothing left to try"})
      best = max(range(len(self.scores)), key=lambda i: (self.scores[i], -i)) if self.scores \
          else 0
      idea = self.ideas[best]
      return self._reply("submit", {idea.kind: idea.text, "hypothesis": idea.hypothesis})
    name, arguments = self.plan.pop(0)
    if not self.plan:
      self.plan = []
    return self._reply(name, arguments)

  def _reply(self, name, arguments):
    text = json.dumps({"name": name, "arguments": arguments})
    return agentic_proposer.AgentReply({"role": "assistant", "content": text},
                                       (ToolCall(name, arguments),), text)


class BenchAgenticProposer(agentic_proposer.AgenticProposer):
  def propose(self, context, n):
    proposals = []
    for index in range(n):
      self.client.start(context, index, n)
      proposals.append(self._session(context, index))
    return proposals


def rollouts_to_best(archive_dir, candidates, level=None):
  """(best success, episodes until the first candidate with it (or with success >= level),
  all episodes)."""
  sessions = {}
  root = os.path.join(archive_dir, "agent_sessions")
  for folder in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    for name in sorted(os.listdir(os.path.join(root, folder))):
      with open(os.path.join(root, folder, name), encoding="utf-8") as file:
        session = json.load(file)
      sessions[(session["iteration"], session["index"])] = session["rollouts"]
  best = max(c.success for c in candidates if c.evaluated) if level is None else level
  spent, to_best = 0, None
  for candidate in candidates:
    spent += candidate.rollouts + sessions.get((candidate.iteration, candidate.index), 0)
    if to_best is None and candidate.evaluated and candidate.success >= best:
      to_best = spent
  return best, to_best, spent + sum(v for k, v in sessions.items() if k not in {
      (c.iteration, c.index) for c in candidates})


def compare(args, domain, splits, runtime):
  """Runs each proposer once per seed and prints a row each, then the medians."""
  import statistics  # pylint: disable=import-outside-toplevel
  table = {}
  for seed in [int(s) for s in args.seeds.split(",")]:
    for row in compare_once(args, domain, splits, runtime, seed):
      print(f"seed {seed} | " + " | ".join(str(v) for v in row))
      table.setdefault(row[0], []).append(row)
  print("median over seeds:")
  for name, rows in table.items():
    columns = list(zip(*rows))
    print(f"{name} | " + " | ".join(f"{statistics.median(c):g}" for c in columns[1:]))


def compare_once(args, domain, splits, runtime, seed):
  rows = []
  for name in args.proposers.split(","):
    archive_dir = tempfile.mkdtemp(prefix=f"meta_harness_bench_{name}_")
    evaluate = evaluation.make_evaluate(runtime, domain, SamplingParams(max_tokens=512),
                                        weights_id=f"scripted-{name}-{seed}")
    if name == "one_shot":
      proposer = OneShot(seed=seed)
    elif name == "agentic":
      proposer = BenchAgenticProposer(
          ScriptedAgent(seed=seed, num_ideas=args.agent_runs, run_tasks=args.agent_run_tasks),
          archive_dir, domain, splits["harness"],
          runner=agentic_proposer.SandboxRunner(evaluate, splits["harness"]),
          budgets=agent_tools.AgentBudgets(max_steps=4 + args.agent_runs + 2,
                                           max_runs=args.agent_runs,
                                           max_run_tasks=args.agent_run_tasks,
                                           max_run_episodes=args.agent_runs *
                                           args.agent_run_tasks),
          search_answers="answers")
    else:
      raise ValueError(f"--proposers names {name!r}; use one_shot and/or agentic.")
    started = time.perf_counter()
    result = meta_harness.search(
        Harness(domain.seed_harness, origin="seed"), evaluate, proposer, archive_dir,
        domain=domain, instances=splits["harness"], weights_id=f"scripted-{name}-{seed}",
        iterations=args.iterations, candidates_per_iteration=args.candidates_per_iteration)
    wall = time.perf_counter() - started
    best, to_best, total = rollouts_to_best(archive_dir, result.archive.candidates)
    rows.append([name, best, to_best, total, result.proposer_prompt_tokens,
                 result.proposer_completion_tokens, len(result.archive.candidates), wall,
                 archive_dir, result.archive.candidates])
  common = min(row[1] for row in rows)
  print("proposer | best success | rollouts to best | rollouts to the lower best "
        f"({common:.3f}) | rollouts | proposer prompt tokens | proposer completion tokens | "
        "candidates | wall s")
  results = []
  for name, best, to_best, total, prompt, completion, count, wall, directory, candidates in rows:
    _, to_common, _ = rollouts_to_best(directory, candidates, common)
    results.append((name, round(best, 3), to_best, to_common, total, prompt, completion, count,
                    round(wall, 1)))
    shutil.rmtree(directory, ignore_errors=True)
  return results


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--num_tasks", type=int, default=64)
  parser.add_argument("--iterations", type=int, default=6)
  parser.add_argument("--candidates_per_iteration", type=int, default=3)
  parser.add_argument("--num_workers", type=int, default=2)
  parser.add_argument("--proposers", default="",
                      help="compare these proposers (one_shot,agentic) instead of timing the "
                      "edit library's search")
  parser.add_argument("--seeds", default="0", help="edit-library seeds, comma-separated")
  parser.add_argument("--agent_runs", type=int, default=3)
  parser.add_argument("--agent_run_tasks", type=int, default=4)
  args = parser.parse_args()
  domain = tasks.get_domain("synthetic_qa", seed=0, split_sizes={
      "weight": -1, "harness": args.num_tasks, "validation": 8, "test": 8})
  splits = domain.splits()
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, reader(sum(splits.values(), [])))
  if args.proposers:
    with HarnessRuntime(backend, tokenizer, num_workers=args.num_workers,
                        timeout_seconds=60) as runtime:
      compare(args, domain, splits, runtime)
    return
  archive_dir = tempfile.mkdtemp(prefix="meta_harness_bench_")
  evaluation_seconds = [0.0]
  with HarnessRuntime(backend, tokenizer, num_workers=args.num_workers,
                      timeout_seconds=60) as runtime:
    evaluate_on_runtime = evaluation.make_evaluate(
        runtime, domain, SamplingParams(max_tokens=512), weights_id="scripted")

    def evaluate(harness, instances, keys):
      started = time.perf_counter()
      result = evaluate_on_runtime(harness, instances, keys)
      evaluation_seconds[0] += time.perf_counter() - started
      return result

    def run():
      return meta_harness.search(
          Harness(domain.seed_harness, origin="seed"), evaluate,
          edit_library.EditLibraryProposer(seed=0), archive_dir, domain=domain,
          instances=splits["harness"], weights_id="scripted", iterations=args.iterations,
          candidates_per_iteration=args.candidates_per_iteration)

    started = time.perf_counter()
    result = run()
    wall = time.perf_counter() - started
    replay_started = time.perf_counter()
    replay = run()
    replay_wall = time.perf_counter() - replay_started
  candidates = result.archive.candidates
  first, accepted = candidates[0], result.archive.get(result.accepted_id)
  evaluated = sum(c.evaluated for c in candidates)
  print(f"tasks={args.num_tasks} iterations={result.iterations} candidates={len(candidates)} "
        f"evaluated={evaluated} rollouts={result.rollouts}")
  print(f"h0 success={first.success:.3f} turns={first.mean_turns:.2f}; accepted "
        f"{accepted.id} ({accepted.mechanism}) success={accepted.success:.3f} "
        f"turns={accepted.mean_turns:.2f}")
  overhead = wall - evaluation_seconds[0]
  print(f"wall={wall:.2f}s evaluation={evaluation_seconds[0]:.2f}s "
        f"({1000 * evaluation_seconds[0] / max(result.rollouts, 1):.1f} ms/episode) "
        f"search overhead={overhead:.2f}s ({1000 * overhead / len(candidates):.0f} ms/candidate)")
  print(f"resume of the finished archive: {replay_wall:.2f}s, rollouts unchanged: "
        f"{replay.rollouts == result.rollouts}, same accepted: "
        f"{replay.accepted_id == result.accepted_id}")
  shutil.rmtree(archive_dir, ignore_errors=True)


if __name__ == "__main__":
  main()
