"""Harness Learning with tools: a tiny Reasoning Gym adaptation whose proposer writes an
interpreter loop (emit code, run it with tools.python in the real sandbox, read the traceback,
retry), the reports that show it, the search_answers setting (with canaries: validation and
test gold never reach a report, whatever the setting), and the QA variant's seed."""
import concurrent.futures
import re
import types

import pytest

from configs import harness_learning as harness_learning_configs
from whale_jax import tasks
from whale_jax.algorithms import harness_learning
from whale_jax.algorithms import loop
from whale_jax.algorithms import options
from whale_jax.algorithms import run_log
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.harness import static_checks
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import collector
from whale_jax.sampling import SamplingParams
from whale_jax.search import archive_view
from whale_jax.search import evaluation as evaluation_lib
from whale_jax.search import revision as revision_lib
from whale_jax.tasks import seed_harnesses
from whale_jax.tasks.domain import Instance
from whale_jax.tokenization import load_tokenizer

TOKENIZER = load_tokenizer("byte")
SPLIT_SIZES = {"weight": 2, "harness": 2, "validation": 2, "test": 2}
CODE_REQUEST = "Write a Python program that prints only the final answer"
FAILED = "Running it failed:"
INTERPRETER_LOOP = '''FENCE = re.compile(r"```(?:python)?\\n(.*?)```", re.DOTALL)
CODE_PROMPT = ("{question}\\n\\nWrite a Python program that prints only the final answer, in "
               "one ```python block.")
MAX_ATTEMPTS = 3


def run(task, llm, tools):
  messages = [{"role": "user", "content": CODE_PROMPT.format(question=task["question"])}]
  output = ""
  for attempt in range(MAX_ATTEMPTS):
    reply = THINKING.sub("", llm.chat(messages))
    fence = FENCE.search(reply)
    output = tools.python(fence.group(1) if fence else reply)
    if "Traceback (most recent call last)" not in output:
      lines = output.strip().splitlines()
      return lines[-1] if lines else ""
    messages += [{"role": "assistant", "content": reply},
                 {"role": "user", "content": "Running it failed:\\n" + output + "\\nFix it."}]
  return output.strip()
'''


def interpreter_loop_reply(seed_source):
  """The scripted proposer's reply: one SEARCH/REPLACE block that swaps the seed's single
  direct call for INTERPRETER_LOOP."""
  seed_run = seed_source[seed_source.index("def run("):].rstrip("\n")
  return ("HYPOTHESIS: Arithmetic is more reliable when computed by Python; run the model's "
          "code, and on a traceback show it to the model and retry.\n"
          f"<<<<<<< SEARCH\n{seed_run}\n=======\n{INTERPRETER_LOOP.rstrip()}\n"
          ">>>>>>> REPLACE\n")


def solver(prompt_text):
  """A scripted solver: guesses when asked directly; asked for code, it first writes a
  program with a NameError, and after reading that traceback a correct one."""
  if CODE_REQUEST not in prompt_text:
    return "I think 7"
  if FAILED in prompt_text and "NameError" in prompt_text:
    expression = re.findall(r"problem: (.*?) =", prompt_text)[-1]
    return f"Fixed:\n```python\nprint({expression})\n```"
  return "```python\ntotal = 0\nprint(totl)\n```"


class ScriptedProposerSampler:
  """Stands in for the proposer's sampler: records each prompt, answers with one reply."""

  def __init__(self, reply):
    self.reply, self.prompts = reply, []

  def submit(self, prompt_ids, sampling):
    self.prompts.append(TOKENIZER.decode(prompt_ids))
    completion = types.SimpleNamespace(text=self.reply,
                                       token_ids=TOKENIZER.encode(self.reply))
    future = concurrent.futures.Future()
    future.set_result([completion] * sampling.n)
    return future


def _tiny_run(workdir, domain):
  runtime = HarnessRuntime(ScriptedBackend(TOKENIZER, solver), TOKENIZER, num_workers=2,
                           timeout_seconds=60.0, allowed_imports=domain.allowed_imports)
  sampling = SamplingParams(max_tokens=256)
  return loop.Run(
      workdir=str(workdir), loop=options.LoopConfig(seed=0, eval_num_samples=1),
      policy=types.SimpleNamespace(weights_id="solver@0"), runtime=runtime, domain=domain,
      sampling=sampling, eval_sampling=sampling, proposer=None,
      log=run_log.RunLog(str(workdir)), counts=run_log.RolloutCounts(),
      state=loop.LoopState(incumbent=domain.seed_harness), tokenizer=TOKENIZER,
      show_progress=False)


def _python_calls(trajectory):
  return [event for event in trajectory.tool_events if event.name == "python"]


def test_adaptation_writes_an_interpreter_loop_that_reads_tracebacks_and_retries(tmp_path):
  domain = tasks.get_domain("reasoning_gym:chain_sum", seed=0, split_sizes=SPLIT_SIZES)
  sampler = ScriptedProposerSampler(interpreter_loop_reply(domain.seed_harness))
  proposer = harness_learning.Proposer(
      types.SimpleNamespace(sampler=sampler, weights_id="proposer@0"), TOKENIZER,
      SamplingParams(max_tokens=64))
  hl_config = options.HarnessLearningConfig(
      teachers=(), grpo_steps=0, adapt_stages=("base",), selection_rules=("strict",),
      strict_rounds=2, context_budget_tokens=8000)
  run = _tiny_run(tmp_path, domain)
  try:
    state = harness_learning.adapt(run, hl_config, proposer, "base", "strict")
  finally:
    run.runtime.close()
    run.log.close()

  # Round 0: the seed guesses (score 0); the interpreter loop scores 1 and is kept. Round 1:
  # the same patch no longer applies to the kept program, which stays.
  assert [entry.kept for entry in state.history] == ["c0001", None]
  assert state.current_score == 1.0 and state.test_mean == 1.0
  assert "tools.python(" in state.current and "Traceback" in state.current

  round_0 = tmp_path / "harness_learning" / "adapt_base_strict" / "round_000"
  evaluation = revision_lib.archived_evaluation(str(round_0), "c0001")
  harness_tasks = {instance.id: instance for instance in domain.splits()["harness"]}
  assert sorted(evaluation.task_ids) == sorted(harness_tasks)
  for trajectory in evaluation.trajectories:
    instance = harness_tasks[trajectory.task_id]
    first, *_, last = _python_calls(trajectory)   # ran in the real sandbox, in order
    assert first.arguments == {"code": "total = 0\nprint(totl)\n"} and not first.error
    assert first.result.startswith("Traceback (most recent call last)")
    assert "NameError: name 'totl' is not defined" in first.result
    assert "Traceback" not in last.result and not last.error
    assert last.result.strip() == str(instance.reference["answer"]) == trajectory.answer
    assert len(_python_calls(trajectory)) == 2 and trajectory.num_turns == 2
    # The harness read the traceback: it went back to the model in the second call.
    retry = trajectory.calls[1].messages[-1]["content"]
    assert retry.startswith(FAILED) and "NameError" in retry

  # Round 1's execution report (the kept program's episodes) shows those tool calls, and the
  # gold of the harness-split problems (search_answers), never validation or test ones.
  assert len(sampler.prompts) == 2
  report = sampler.prompts[1]
  assert "[tool] python(code='total = 0\\nprint(totl)\\n')" in report
  assert "NameError" in report and "[reference, not visible to the harness]" in report
  for instance in harness_tasks.values():
    assert f'"answer": "{instance.reference["answer"]}"' in report
  splits = domain.splits()
  for instance in splits["validation"] + splits["test"]:
    assert instance.public["question"] not in report
    assert instance.reference["metadata"]["expression"] not in report


def test_search_answers_none_keeps_references_out_of_the_reports(tmp_path):
  domain = tasks.get_domain("reasoning_gym:chain_sum", seed=0, split_sizes=SPLIT_SIZES)
  sampler = ScriptedProposerSampler("no change")
  proposer = harness_learning.Proposer(
      types.SimpleNamespace(sampler=sampler, weights_id="proposer@0"), TOKENIZER,
      SamplingParams(max_tokens=64))
  hl_config = options.HarnessLearningConfig(
      teachers=(), grpo_steps=0, adapt_stages=("base",), selection_rules=("strict",),
      strict_rounds=1, context_budget_tokens=8000, search_answers="none")
  run = _tiny_run(tmp_path, domain)
  try:
    harness_learning.adapt(run, hl_config, proposer, "base", "strict")
  finally:
    run.runtime.close()
    run.log.close()
  [prompt] = sampler.prompts
  assert "Failing episodes" in prompt and "[reference" not in prompt
  assert '"answer"' not in prompt


def test_search_answers_is_checked_and_defaults_to_the_papers_reports():
  assert options.HarnessLearningConfig().search_answers == "answers_and_documents"
  with pytest.raises(ValueError, match="config.harness_learning.search_answers"):
    options.HarnessLearningConfig(search_answers="all")
  for variant in ("", "qa", "smoke"):
    section = harness_learning_configs.get_config(variant).harness_learning.to_dict()
    assert options.HarnessLearningConfig(**section).search_answers == "answers_and_documents"


def test_qa_variant_starts_from_the_two_hop_seed():
  config = harness_learning_configs.get_config("qa")
  assert config.domain.seed_harness == "searchqa_two_hop"
  assert all(domain["seed_harness"] == "searchqa_two_hop"
             for domain in config.harness_learning.grpo_domains)
  assert "two-hop" in harness_learning_configs.__doc__
  assert "searchqa_two_hop" in seed_harnesses.NAMES


def test_reasoning_gym_offers_the_sandboxed_interpreter():
  domain = tasks.get_domain("reasoning_gym:chain_sum", seed=0, split_sizes=SPLIT_SIZES)
  assert "tools.python(code)" in domain.description
  assert set(domain.tools(domain.splits()["test"][0])) == {"python"}


# ---- canaries: the reports' references come from the search split only -------------------

CANARIES = ("CANARY-VALIDATION-5e1d", "CANARY-TEST-93ac", "CANARY-VALDOC-2b7f")


def _qa_instances(prefix, count, gold, documents):
  return [Instance(f"{prefix}{i}", {"question": f"{prefix} question {i}?"},
                   reference={"golden_answers": [f"{gold}-{i}"],
                              "supporting_ids": [f"{documents}-{i}"]}) for i in range(count)]


SEARCH = _qa_instances("s", 3, "GOLD-SEARCH", "DOC-SEARCH")
VALIDATION = _qa_instances("v", 2, CANARIES[0], CANARIES[2])
TEST = _qa_instances("t", 2, CANARIES[1], CANARIES[1])


def knowing_evaluate(harness, instances, keys):
  """A solver that knows the held-out gold: on a validation or test task it answers it and
  its search tool returns it (what a report must still not show); elsewhere it fails."""
  scores, trajectories = [], []
  for instance in instances:
    held_out = instance.id[0] in "vt"
    gold = instance.reference["golden_answers"][0] if held_out else "unknown"
    event = trajectory_lib.ToolEvent("search", {"query": instance.public["question"]},
                                     f"Doc 1 (Title: \"{gold}\") {gold}", "", 0.0, 0.1)
    trajectories.append(trajectory_lib.Trajectory(
        f"{instance.id}#0", instance.id, harness.hash, "ok", answer=f"<answer>{gold}</answer>",
        tool_events=[event]))
    scores.append(1.0 if held_out else 0.0)
  return collector.Evaluation(tuple(i.id for i in instances), tuple(keys), tuple(scores),
                              tuple(trajectories), rollouts=len(instances))


@pytest.mark.parametrize("search_answers", archive_view.SEARCH_ANSWER_MODES)
def test_reports_show_search_gold_as_set_and_never_held_out_gold(tmp_path, search_answers):
  domain = types.SimpleNamespace(name="qa", description="Answer with one entity.",
                                 allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS)
  source = seed_harnesses.source("searchqa_two_hop")
  # Diagnostics from the search split and, as in adaptation_diagnostic_size > 0, from
  # validation: the validation episodes are shown, their gold is not.
  context, _, report = revision_lib.revision_context(
      str(tmp_path / "revision"), domain, source, SEARCH + VALIDATION, knowing_evaluate, 0, 2,
      8000, kind="program", search_answers=search_answers, held_out=VALIDATION + TEST)
  assert report.scores == (0.0,) * len(SEARCH) + (1.0,) * len(VALIDATION)
  text = "\n".join(message["content"] for message in context.messages)
  assert not any(canary in text for canary in CANARIES)
  assert all(f"### task {instance.id}:" in text for instance in SEARCH + VALIDATION)
  assert text.count(f"<answer>{archive_view.WITHHELD_MARK}</answer>") == len(VALIDATION)
  for index in range(len(SEARCH)):
    assert (f"GOLD-SEARCH-{index}" in text) == (search_answers != "none")
    assert (f"DOC-SEARCH-{index}" in text) == (search_answers == "answers_and_documents")
  assert text.count("[reference, not visible to the harness]") == (
      0 if search_answers == "none" else len(SEARCH))
  with pytest.raises(ValueError, match="search_answers='all'"):
    revision_lib.revision_context(str(tmp_path / "bad"), domain, source, SEARCH,
                                  knowing_evaluate, 0, 2, 8000, search_answers="all")


class ScriptedRepliesSampler(ScriptedProposerSampler):
  """Answers a request for n candidates with the first n of the given replies."""

  def __init__(self, replies):
    super().__init__(replies[0])
    self.replies = replies

  def submit(self, prompt_ids, sampling):
    self.prompts.append(TOKENIZER.decode(prompt_ids))
    future = concurrent.futures.Future()
    future.set_result([types.SimpleNamespace(text=reply, token_ids=TOKENIZER.encode(reply))
                       for reply in self.replies[:sampling.n]])
    return future


@pytest.mark.parametrize("rule", ["oracle", "single_step"])
def test_test_read_protocols_oracle_best_of_and_single_step_candidates(tmp_path, rule):
  domain = tasks.get_domain("reasoning_gym:chain_sum", seed=0, split_sizes=SPLIT_SIZES)
  # Three candidates from the seed: the interpreter loop (test mean 1), a reply that does not
  # parse (not runnable: 0 for single_step), and a runnable wording change that answers as the
  # seed does (the seed's test mean).
  template = 'PROMPT_TEMPLATE = "{question}\\n\\nGive only the final answer'
  same_as_seed = (f"HYPOTHESIS: Ask more briefly.\n<<<<<<< SEARCH\n{template}, with no "
                  f'explanation."\n=======\n{template}."\n>>>>>>> REPLACE\n')
  sampler = ScriptedRepliesSampler([interpreter_loop_reply(domain.seed_harness),
                                    "no patch here", same_as_seed])
  proposer = harness_learning.Proposer(
      types.SimpleNamespace(sampler=sampler, weights_id="proposer@0"), TOKENIZER,
      SamplingParams(max_tokens=64))
  hl_config = options.HarnessLearningConfig(
      teachers=(), grpo_steps=0, adapt_stages=("base",), selection_rules=(rule,),
      best_of_candidates=3, single_step_candidates=3, context_budget_tokens=8000)
  run = _tiny_run(tmp_path, domain)
  try:
    seed_mean = loop.evaluate_test(run, harness_learning.Harness(domain.seed_harness),
                                   label="seed")["test_mean"]
    state = harness_learning.adapt(run, hl_config, proposer, "base", rule)
  finally:
    run.runtime.close()
    run.log.close()
  assert seed_mean < 1.0 and len(sampler.prompts) == 1       # one round
  assert [c for c, _ in state.test_candidates] == ["c0001", "c0003"]   # the runnable ones
  assert state.candidate_test_means == {"c0001": 1.0, "c0003": seed_mean}
  labels = [r["label"] for r in run.state.evaluations]
  assert labels[:3] == ["seed", f"base_{rule}_c0001", f"base_{rule}_c0003"]
  if rule == "oracle":   # the best by test mean, reported as such, not evaluated again
    assert state.test_mean == 1.0 and "tools.python(" in state.current
    assert len(labels) == 3
  else:                  # the mean over all 3 candidates, the unparseable one counting 0
    assert state.test_mean == pytest.approx((1.0 + seed_mean + 0.0) / 3)
    assert state.current == domain.seed_harness and len(labels) == 3
    rows = [r for r in run_log.read_metrics(str(tmp_path)) if r.get("kind") == "single_step"]
    assert rows[0]["beat_seed"] == pytest.approx(1 / 3) and rows[0]["runnable"] == 2


def test_the_fixed_python_tool_loop_is_evaluated_on_test_beside_the_seed(tmp_path):
  domain = tasks.get_domain("reasoning_gym:chain_sum", seed=0, split_sizes=SPLIT_SIZES)
  hl_config = options.HarnessLearningConfig(
      teachers=(), grpo_steps=0, adapt_stages=(), fixed_harnesses=("reasoning_gym_tool_loop",))
  run = _tiny_run(tmp_path, domain)
  try:
    means = harness_learning.evaluate_fixed_harnesses(run, hl_config)
  finally:
    run.runtime.close()
    run.log.close()
  # The scripted solver's first program raises a NameError; the loop shows the traceback and
  # the second program prints the answer: every test problem right.
  assert means == {"reasoning_gym_tool_loop": 1.0}
  assert [r["label"] for r in run.state.evaluations] == ["fixed_reasoning_gym_tool_loop"]
  source = seed_harnesses.source("reasoning_gym_tool_loop")
  assert not static_checks.check_harness(source, domain.allowed_imports)
  assert "MAX_ROUNDS = 5" in source
  assert harness_learning_configs.get_config("").harness_learning.fixed_harnesses == (
      "reasoning_gym_tool_loop",)
