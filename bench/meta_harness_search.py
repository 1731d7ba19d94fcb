r"""Meta-Harness search on synthetic QA with a scripted model: where the search's time goes.

  python bench/meta_harness_search.py                      # 64 tasks, 6 iterations x 3
  python bench/meta_harness_search.py --num_tasks=16 --iterations=3

The model is whale_jax.harness.ScriptedBackend answering like a reader that needs help: it
searches with the question and answers correctly only when its prompt shows at least three
passages, or carries a short-answer reminder. The edit library proposes; every candidate is
run on the sandboxed runtime. Prints the accepted harness's success against h0's, the rollouts,
the wall time split into evaluation (episodes on the runtime) and the search's own work
(proposer context, proposals, patch application, checks, archive writes), per candidate; then
resumes the finished archive to time a replay that runs no episode.
"""
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
from whale_jax.search import edit_library
from whale_jax.search import evaluation
from whale_jax.search import meta_harness
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


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--num_tasks", type=int, default=64)
  parser.add_argument("--iterations", type=int, default=6)
  parser.add_argument("--candidates_per_iteration", type=int, default=3)
  parser.add_argument("--num_workers", type=int, default=2)
  args = parser.parse_args()
  domain = tasks.get_domain("synthetic_qa", seed=0, split_sizes={
      "weight": -1, "harness": args.num_tasks, "validation": 8, "test": 8})
  splits = domain.splits()
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, reader(sum(splits.values(), [])))
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
