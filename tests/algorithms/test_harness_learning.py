"""Harness Learning: the reward against hand-computed values for each executability case,
replies judged end to end, demonstrations keep only teacher proposals that raised the score,
GRPO samples and advantages, the selection rules, and the recipe end to end."""
import collections
import json
import os
import types

import numpy as np
import pytest

from configs import harness_learning as harness_learning_configs
from whale_jax.algorithms import experiment
from whale_jax.algorithms import harness_learning
from whale_jax.algorithms import samples as samples_lib
from whale_jax.algorithms import options
from whale_jax.harness import runtime as runtime_lib
from whale_jax.harness import static_checks
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import collector
from whale_jax.search import archive as archive_lib
from whale_jax.search import proposal as proposal_lib
from whale_jax.search import reward as reward_lib
from whale_jax.search import revision as revision_lib
from whale_jax.tasks import domain as domain_lib
from whale_jax.tokenization import load_tokenizer

SEED_HARNESS = '''PROMPT = "Answer: {question}"


def run(task, llm, tools):
  return llm.chat([{"role": "user", "content": PROMPT.format(question=task["question"])}])
'''
PROMPT_LINE = 'PROMPT = "Answer: {question}"'
NUM_TASKS = 4


def _block(search, replace):
  return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def _patch_reply(new_prompt_line, hypothesis="The prompt is unclear."):
  return f"HYPOTHESIS: {hypothesis}\n" + _block(PROMPT_LINE, new_prompt_line)


def _program_reply(source):
  return f"HYPOTHESIS: Rewrite.\n```python\n{source}```\n"


def _instances(prefix, count):
  return [domain_lib.Instance(f"{prefix}{i}", {"question": f"q{prefix}{i}"}, reference="a")
          for i in range(count)]


def _domain():
  instances = {"weight": _instances("w", 8), "harness": _instances("h", NUM_TASKS),
               "validation": _instances("v", 4), "test": _instances("t", 4)}
  return domain_lib.Domain(
      name="toy", description="Answer the question with one word.",
      seed_harness=SEED_HARNESS, splits=lambda: instances,
      verify=lambda instance, answer, trajectory=None: float(answer == "a"),
      tools=lambda instance: {}, metrics=lambda *args: {},
      allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS)


def task_score(source, task_index):
  """The fake solver's score of a harness on task i: BETTER 1, WORSE 0, otherwise 0.5."""
  if "BETTER" in source:
    return 1.0
  return 0.0 if "WORSE" in source else 0.5


class FakeEvaluate:
  """evaluate(harness, instances, keys) scoring sources by task_score, without a runtime.

  FLAKY in the source makes every odd-numbered task end in a harness error (score 0).
  """

  def __init__(self):
    self.calls = []
    self.weights_id = "solver@0"

  def __call__(self, harness, instances, keys):
    self.calls.append((harness.source, [instance.id for instance in instances]))
    scores, trajectories = [], []
    for index, instance in enumerate(instances):
      failed = "FLAKY" in harness.source and index % 2 == 1
      trajectories.append(trajectory_lib.Trajectory(
          f"{instance.id}#0", instance.id, harness.hash,
          "harness_error" if failed else "ok", answer=None if failed else "x",
          error="ValueError: flaky" if failed else ""))
      scores.append(0.0 if failed else task_score(harness.source, index))
    return collector.Evaluation(tuple(i.id for i in instances), tuple(keys),
                                tuple(scores), tuple(trajectories),
                                rollouts=len(instances))

  @property
  def episodes(self):
    return sum(len(ids) for _, ids in self.calls)


def _context(tmp_path, kind="patch", evaluate=None, name="revision"):
  domain = _domain()
  evaluate = evaluate or FakeEvaluate()
  scoring = domain.splits()["harness"]
  context, archive, report = revision_lib.revision_context(
      str(tmp_path / name), domain, SEED_HARNESS, scoring, evaluate, seed=0, iteration=2,
      budget_tokens=4000, kind=kind)
  return domain, scoring, evaluate, context, archive, report


# ---- reward(): hand-computed values --------------------------------------------------------

@pytest.mark.parametrize("case, arguments, expected", [
    ("patch: nothing parses", dict(parsed=False, applied=False, completed_fraction=0.0,
                                   score=0.0), 0.0),
    ("patch: parses, does not apply", dict(parsed=True, applied=False,
                                           completed_fraction=0.0, score=0.0), 0.05),
    ("patch: applies, no run completes", dict(parsed=True, applied=True,
                                              completed_fraction=0.0, score=0.0), 0.15),
    ("patch: applies, half the runs complete", dict(parsed=True, applied=True,
                                                    completed_fraction=0.5, score=0.4), 0.625),
    ("patch: everything, full score", dict(parsed=True, applied=True, completed_fraction=1.0,
                                           score=1.0), 1.30),
    ("patch: applied without parsing earns nothing", dict(parsed=False, applied=True,
                                                         completed_fraction=1.0, score=0.0),
     0.0),
    ("program: executable", dict(parsed=True, applied=True, completed_fraction=1.0, score=0.6,
                                 defines_run=True, num_lines=150), 0.70),
    ("program: executable, all wrong", dict(parsed=True, applied=True, completed_fraction=1.0,
                                            score=0.0, defines_run=True, num_lines=12), 0.10),
    ("program: exactly 200 lines", dict(parsed=True, applied=True, completed_fraction=1.0,
                                        score=0.25, defines_run=True, num_lines=200), 0.35),
    ("program: 201 lines", dict(parsed=True, applied=True, completed_fraction=1.0, score=0.6,
                                defines_run=True, num_lines=201), 0.0),
    ("program: no run", dict(parsed=True, applied=True, completed_fraction=1.0, score=0.6,
                             defines_run=False, num_lines=20), 0.0),
    ("program: does not parse", dict(parsed=False, applied=False, completed_fraction=0.0,
                                     score=0.0, defines_run=False, num_lines=20), 0.0),
    ("program: one run of ten fails", dict(parsed=True, applied=True, completed_fraction=0.9,
                                           score=0.5, defines_run=True, num_lines=20), 0.0),
])
def test_reward_matches_hand_computed_values(case, arguments, expected):
  kind = case.split(":")[0]
  assert reward_lib.reward(kind, **arguments) == pytest.approx(expected, abs=1e-12), case


def test_patch_bonus_is_capped():
  config = reward_lib.RewardConfig(parsed=0.1, applied=0.2, completed=0.3, cap=0.3)
  # 0.1 + 0.2 + 0.3 * 0.5 = 0.45, capped at 0.3, on top of the score 0.2.
  value = reward_lib.reward("patch", True, True, 0.5, 0.2, config=config)
  assert value == pytest.approx(0.5)
  assert reward_lib.reward("patch", True, False, 0.0, 0.0, config=config) == (
      pytest.approx(0.1))


def test_reward_rejects_bad_input():
  with pytest.raises(ValueError, match="kind"):
    reward_lib.reward("diff", True, True, 1.0, 1.0)
  with pytest.raises(ValueError, match="score"):
    reward_lib.reward("patch", True, True, 1.0, 1.5)
  with pytest.raises(ValueError, match="negative"):
    reward_lib.RewardConfig(parsed=-0.05)


# ---- judging replies ------------------------------------------------------------------------

def test_patch_replies_are_judged_and_rewarded_per_executability_case(tmp_path):
  domain, scoring, evaluate, context, archive, report = _context(tmp_path)
  assert report.rollouts == NUM_TASKS and evaluate.episodes == NUM_TASKS
  replies = {
      "improves": _patch_reply('PROMPT = "BETTER Answer: {question}"'),
      "improves, half the runs fail": _patch_reply('PROMPT = "BETTER FLAKY {question}"'),
      "same program again": _patch_reply('PROMPT = "BETTER Answer: {question}"'),
      "search text not found": "HYPOTHESIS: x\n" + _block('PROMPT = "Hi"', 'PROMPT = "Ho"'),
      "block not closed": f"HYPOTHESIS: x\n<<<<<<< SEARCH\n{PROMPT_LINE}\n=======\nPROMPT = 1\n",
      "no blocks": "I would make the prompt better.",
      "changes nothing": _patch_reply(PROMPT_LINE),
      "fails the static checks": "HYPOTHESIS: x\n" + _block(PROMPT_LINE,
                                                             "import os\n" + PROMPT_LINE),
      "a whole program": _program_reply(SEED_HARNESS.replace("Answer", "BETTER")),
  }
  expected = {  # (parsed, applied, completed fraction, score, reward)
      "improves": (True, True, 1.0, 1.0, 1.0 + 0.05 + 0.10 + 0.15),
      "improves, half the runs fail": (True, True, 0.5, 0.5, 0.5 + 0.05 + 0.10 + 0.075),
      "same program again": (True, True, 1.0, 1.0, 1.30),
      "search text not found": (True, False, 0.0, 0.0, 0.05),
      "block not closed": (False, False, 0.0, 0.0, 0.0),
      "no blocks": (False, False, 0.0, 0.0, 0.0),
      "changes nothing": (True, False, 0.0, 0.0, 0.05),
      "fails the static checks": (True, True, 0.0, 0.0, 0.15),
      "a whole program": (False, False, 0.0, 0.0, 0.0),
  }
  revisions, rollouts = revision_lib.judge_replies(
      list(replies.values()), "patch", SEED_HARNESS, domain, scoring, evaluate, 0, archive)
  for name, revision in zip(replies, revisions):
    actual = (revision.parsed, revision.applied, revision.completed_fraction, revision.score)
    assert actual == expected[name][:4], name
    assert revision.reward == pytest.approx(expected[name][4]), name
  # Two distinct programs ran (the repeated one is evaluated once), on every scoring task.
  assert rollouts == 2 * NUM_TASKS and evaluate.episodes == 3 * NUM_TASKS
  statuses = [c.status for c in archive_lib.Archive(archive.directory).candidates]
  assert statuses == ["evaluated"] * 4 + ["rejected"] * 6
  assert [r.runnable for r in revisions][:3] == [True, False, True]


def test_program_replies_get_the_flat_bonus_only_when_executable(tmp_path):
  domain, scoring, evaluate, context, archive, _ = _context(tmp_path, kind="program")
  better = SEED_HARNESS.replace("Answer", "BETTER")
  long_program = better + "".join(f"X{i} = {i}\n" for i in range(200 - 5 + 1))  # 201 lines
  assert len(long_program.splitlines()) == 201
  replies = {
      "executable": (_program_reply(better), 1.0 + 0.10),
      "executable, no better": (_program_reply(SEED_HARNESS.replace("Answer", "Reply")), 0.6),
      "one run fails": (_program_reply(better.replace("BETTER", "BETTER FLAKY")), 0.0),
      "201 lines": (_program_reply(long_program), 0.0),
      "wrong run signature": (_program_reply("def run(task):\n  return 'a'\n"), 0.0),
      "no run": (_program_reply("def main(task, llm, tools):\n  return 'a'\n"), 0.0),
      "syntax error": (_program_reply("def run(task, llm, tools):\n  return (\n"), 0.0),
      "blocks instead": (_patch_reply('PROMPT = "BETTER {question}"'), 0.0),
  }
  revisions, _ = revision_lib.judge_replies(
      [reply for reply, _ in replies.values()], "program", SEED_HARNESS, domain, scoring,
      evaluate, 0, archive)
  for (name, (_, expected)), revision in zip(replies.items(), revisions):
    assert revision.reward == pytest.approx(expected), name
  assert [r.runnable for r in revisions] == [True, True] + [False] * 6
  assert revisions[4].parsed and not revisions[4].defines_run
  assert not revisions[5].parsed  # a fenced program is recognized by its def run(
  assert revisions[3].num_lines == 201


def test_context_holds_the_execution_report_and_asks_for_the_format(tmp_path):
  _, _, _, context, _, _ = _context(tmp_path)
  system, user = context.messages
  assert "SEARCH/REPLACE" in system["content"] and "```python" not in system["content"]
  assert SEED_HARNESS.strip() in user["content"]
  assert "Answer the question with one word." in user["content"]
  assert "episodes" in user["content"].lower()
  assert context.num_tokens <= 4000
  _, _, _, program_context, _, _ = _context(tmp_path, kind="program", name="program")
  assert "```python" in program_context.messages[0]["content"]


def test_reused_report_costs_no_rollouts(tmp_path):
  domain, scoring, evaluate, _, archive, report = _context(tmp_path)
  again = revision_lib.archived_evaluation(archive.directory, "c0000")
  assert again.scores == report.scores and again.task_ids == report.task_ids
  before = evaluate.episodes
  _, _, reused = revision_lib.revision_context(
      str(tmp_path / "next"), domain, SEED_HARNESS, scoring, evaluate, 0, 3, 4000,
      report=again)
  assert reused.rollouts == 0 and evaluate.episodes == before


# ---- demonstrations ------------------------------------------------------------------------

class ScriptedTeacher:
  """A teacher proposing fixed replies (as a model proposer would, parsed from text)."""

  def __init__(self, name, replies):
    self.name, self.replies = name, replies

  def propose(self, context, n):
    return [proposal_lib.parse_reply(reply, proposer=self.name) for reply in self.replies[:n]]


def test_demonstrations_are_only_teacher_proposals_that_raised_the_score(tmp_path):
  domain, scoring, evaluate, context, archive, report = _context(tmp_path)
  baseline = report.success_rate
  assert baseline == 0.5
  raises = _patch_reply('PROMPT = "BETTER Answer: {question}"', "Be specific.")
  raises_too = "<think>Try it.</think>\n" + _patch_reply('PROMPT = "BETTER {question}"')
  teachers = [
      ScriptedTeacher("library", [raises, _patch_reply('PROMPT = "Reply: {question}"'),
                                  _patch_reply('PROMPT = "WORSE {question}"')]),
      ScriptedTeacher("model", [_patch_reply('PROMPT = "BETTER FLAKY {question}"'),
                                "HYPOTHESIS: x\n" + _block('PROMPT = "?"', 'PROMPT = "!"'),
                                raises_too, "no idea"]),
  ]
  rows, revisions, rollouts = revision_lib.teacher_demonstrations(
      context, teachers, 4, "patch", domain, scoring, evaluate, 0, baseline, archive)
  assert [row["reply"] for row in rows] == [raises, raises_too.split("</think>\n")[1]]
  assert [row["proposer"] for row in rows] == ["library", "model"]
  assert all(row["score"] == 1.0 and row["baseline"] == 0.5 for row in rows)
  assert all(row["messages"] == [dict(m) for m in context.messages] for row in rows)
  # Ties (0.5), losses (0.0, the flaky one's 0.5) and unusable replies are left out.
  assert [r.score for r in revisions] == [1.0, 0.5, 0.0, 0.5, 0.0, 1.0, 0.0]
  assert rollouts == 5 * NUM_TASKS


class UnreachableTeacher:
  name = "unreachable"

  def propose(self, context, n):
    raise ConnectionError("connection refused")


def test_a_teacher_call_without_a_reply_is_neither_judged_nor_archived(tmp_path):
  domain, scoring, evaluate, context, archive, report = _context(tmp_path)
  before = len(archive.candidates)
  good = ScriptedTeacher("library", [_patch_reply('PROMPT = "BETTER Answer: {question}"')])
  rows, revisions, rollouts = revision_lib.teacher_demonstrations(
      context, [UnreachableTeacher(), good], 2, "patch", domain, scoring, evaluate, 0,
      report.success_rate, archive)
  # Only the reply that came was judged (one candidate); the two failed calls left nothing.
  assert [r.proposer for r in revisions] == ["library"] and len(rows) == 1
  assert len(archive.candidates) == before + 1 and rollouts == NUM_TASKS


def test_program_mode_demonstrations_are_whole_programs(tmp_path):
  domain, scoring, evaluate, context, archive, report = _context(tmp_path, kind="program")
  teacher = ScriptedTeacher("library", [_patch_reply('PROMPT = "BETTER Answer: {question}"')])
  rows, _, _ = revision_lib.teacher_demonstrations(
      context, [teacher], 1, "program", domain, scoring, evaluate, 0, report.success_rate,
      archive)
  assert len(rows) == 1
  program = proposal_lib.parse_reply(rows[0]["reply"])
  assert program.kind == "program"
  assert program.text.strip() == SEED_HARNESS.replace("Answer:", "BETTER Answer:").strip()


def test_demonstration_sample_trains_on_the_reply_only():
  tokenizer = load_tokenizer("byte")
  messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"}]
  sample = samples_lib.demonstration_sample(tokenizer, messages, "HYPOTHESIS: h\nX")
  mask = sample.loss_mask.astype(bool)
  assert tokenizer.decode(sample.token_ids[mask].tolist()) == "HYPOTHESIS: h\nX<|im_end|>"
  assert sample.token_ids[~mask].tolist() == tokenizer.apply_chat_template(messages)
  assert mask.sum() == len("HYPOTHESIS: h\nX") + 1 and mask[-1]


# ---- GRPO samples --------------------------------------------------------------------------

def _completion(token_ids):
  return types.SimpleNamespace(token_ids=token_ids,
                               logprobs=[-0.5 - 0.1 * i for i in range(len(token_ids))])


def test_grpo_samples_carry_group_relative_advantages_and_drop_flat_groups():
  prompts = [[1, 2, 3], [4, 5]]
  completions = [[_completion([10, 11]), _completion([12]), _completion([13, 14, 15]),
                  _completion([16])],
                 [_completion([20]), _completion([21]), _completion([22]), _completion([23])]]
  rewards = [[1.30, 0.05, 0.0, 0.15], [0.2, 0.2, 0.2, 0.2]]
  samples, kept = samples_lib.group_samples(prompts, completions, rewards, "mean", True)
  assert kept == 1 and len(samples) == 4
  # Group mean 0.375: advantages 0.925, -0.325, -0.375, -0.225.
  np.testing.assert_allclose([s.advantage for s in samples], [0.925, -0.325, -0.375, -0.225],
                             rtol=1e-5)
  first = samples[0]
  assert first.token_ids.tolist() == [1, 2, 3, 10, 11]
  assert first.loss_mask.tolist() == [0, 0, 0, 1, 1]
  np.testing.assert_allclose(first.sampler_logprobs, [0, 0, 0, -0.5, -0.6], rtol=1e-6)
  samples, kept = samples_lib.group_samples(prompts, completions, rewards, "mean", False)
  assert kept == 2 and len(samples) == 8 and all(s.advantage == 0 for s in samples[4:])


def test_grpo_samples_mean_std_advantages():
  completions = [[_completion([7]), _completion([8])]]
  samples, _ = samples_lib.group_samples([[1]], completions, [[1.0, 0.0]], "mean_std")
  # mean 0.5, sample standard deviation sqrt(0.5): advantages +-0.5 / 0.70711.
  np.testing.assert_allclose([s.advantage for s in samples], [0.707106, -0.707106], rtol=1e-5)


# ---- selection rules -----------------------------------------------------------------------

def _revision(score, ran=True, runnable=None):
  return revision_lib.Revision(
      reply="", proposer="", parsed=ran, applied=ran, defines_run=ran, num_lines=5, ran=ran,
      completed_fraction=1.0 if ran else 0.0, score=score, reward=score,
      runnable=ran if runnable is None else runnable, source="x" if ran else None)


def test_strict_rule_keeps_only_a_strict_improvement():
  assert revision_lib.select("strict", [_revision(0.6)], 0.5).score == 0.6
  assert revision_lib.select("strict", [_revision(0.5)], 0.5) is None
  assert revision_lib.select("strict", [_revision(0.0, ran=False)], -1.0) is None


def test_best_of_rule_keeps_the_best_runnable_even_when_worse():
  revisions = [_revision(0.9, runnable=False), _revision(0.2), _revision(0.3),
               _revision(0.3), _revision(0.0, ran=False)]
  chosen = revision_lib.select("best_of", revisions, 0.8)
  assert chosen is revisions[2]
  assert revision_lib.select("best_of", [_revision(0.0, ran=False)] * 8, 0.1) is None


# ---- configuration -------------------------------------------------------------------------

def test_phases_follow_the_stages():
  config = options.HarnessLearningConfig(adapt_stages=("base", "sft", "grpo"))
  assert harness_learning.phases(config) == [
      "adapt_base", "demonstrations", "sft", "adapt_sft", "grpo", "adapt_grpo"]
  no_sft = options.HarnessLearningConfig(teachers=(), adapt_stages=("grpo",))
  assert harness_learning.phases(no_sft) == ["grpo", "adapt_grpo"]


def test_config_errors_name_the_key_to_change():
  with pytest.raises(ValueError, match="adapt_stages"):
    options.HarnessLearningConfig(teachers=(), adapt_stages=("sft",))
  with pytest.raises(ValueError, match="selection_rules"):
    options.HarnessLearningConfig(selection_rules=("greedy",))
  with pytest.raises(ValueError, match="num_candidates"):
    options.HarnessLearningConfig(num_candidates=1)


def test_paper_configs_resolve():
  config = harness_learning_configs.get_config("")
  hl_config = options.HarnessLearningConfig(**config.harness_learning.to_dict())
  assert hl_config.kind == "patch" and hl_config.num_candidates == 8
  assert hl_config.rewards == reward_lib.RewardConfig()
  assert len(hl_config.sft_domains) == 21 and len(hl_config.grpo_domains) == 5
  assert set(hl_config.grpo_domains) <= set(hl_config.sft_domains)
  held_out = config.domain.name
  assert held_out not in hl_config.sft_domains and config.domain.split_sizes["test"] == 75
  qa = options.HarnessLearningConfig(
      **harness_learning_configs.get_config("qa").harness_learning.to_dict())
  assert qa.kind == "program" and not qa.sft_enabled and qa.selection_rules[0] == "best_of"


# ---- end to end ----------------------------------------------------------------------------

@pytest.fixture
def episode_counter(monkeypatch):
  """Counts the episodes the harness runtime runs, by task id."""
  counts = collections.Counter()
  original = runtime_lib.HarnessRuntime.run_many   # run_episodes and batched evaluations

  def counting(self, batches):
    batches = [(harness, list(episodes)) for harness, episodes in batches]
    for _, episodes in batches:
      counts.update(episode.task_id for episode in episodes)
    return original(self, batches)

  monkeypatch.setattr(runtime_lib.HarnessRuntime, "run_many", counting)
  return counts


@pytest.mark.slow
def test_smoke_config_runs_end_to_end_with_exact_rollout_counts(tmp_path, episode_counter):
  config = harness_learning_configs.get_config("smoke")
  workdir = str(tmp_path / "run")
  summary = experiment.run(config, workdir, show_progress=False)
  assert summary["recipe"] == "harness_learning"
  assert set(summary["adaptation"]) == {"grpo_strict", "grpo_best_of"}
  assert summary["final_test_mean"] == summary["adaptation"]["grpo_strict"]["test_mean"]
  assert summary["proposer_updates"] >= 1
  section = config.domain.to_dict()
  from whale_jax import tasks  # pylint: disable=g-import-not-at-top
  domain = tasks.get_domain(section.pop("name"), **section)
  split_of = {i.id: split for split, items in domain.splits().items() for i in items}
  by_split = collections.Counter()
  for task_id, count in episode_counter.items():
    by_split[split_of[task_id]] += count
  counts = summary["counts"]
  test_size = len(domain.splits()["test"])
  assert counts["evaluation"] == by_split["test"] == 3 * test_size  # seed + two adapted
  assert counts["harness"] == by_split["weight"] + by_split["harness"] + by_split["validation"]
  assert counts["weight"] == 0
  rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  kinds = [row.get("kind") for row in rows if row["phase"] in ("proposer", "harness")]
  assert kinds == ["demonstrations"] * 2 + ["sft", "grpo"] + ["adaptation"] * 2
  assert os.path.isdir(os.path.join(workdir, "proposer_checkpoints"))
  assert os.path.exists(os.path.join(workdir, "harness_learning", "demonstrations.jsonl"))


# ---- a scripted solver: demonstrations exist, SFT trains, and resuming changes nothing -----

def chain_sum_solver(prompt_text):
  """A solver that adds up a chain_sum problem only when the prompt reminds it of the
  answer format (the edit library's format_reminder edits), and guesses otherwise."""
  import re  # pylint: disable=g-import-not-at-top
  if "exactly the format" not in prompt_text and "Double-check" not in prompt_text:
    return "I think 7"
  expression = re.findall(r"problem: (.*?) =", prompt_text)[-1].replace(" ", "")
  return str(sum(int(number) * (-1 if sign == "-" else 1)
                 for sign, number in re.findall(r"([+-]?)(\d+)", expression)))


def _scripted_run(config, workdir, fail_on_judge_call=None, monkeypatch=None):
  """Runs the recipe with the chain_sum solver scripted; returns (summary or None, proposer
  params at the end or None, the run's final counts)."""
  from whale_jax.harness import HarnessRuntime  # pylint: disable=g-import-not-at-top
  from whale_jax.harness import ScriptedBackend  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from whale_jax.train import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top
  captured = {}
  original_judge, original_finish = revision_lib.judge_replies, harness_learning.finish
  calls = [0]

  def judge(*args, **kwargs):
    calls[0] += 1
    if calls[0] == fail_on_judge_call:
      raise RuntimeError("interrupted")
    return original_judge(*args, **kwargs)

  def finish(run, hl_config, proposer):
    captured["params"] = jax.device_get(proposer.policy.state["params"])
    return original_finish(run, hl_config, proposer)

  monkeypatch.setattr(revision_lib, "judge_replies", judge)
  monkeypatch.setattr(harness_learning, "finish", finish)
  run = experiment.build_run(config, workdir, show_progress=False)
  run.runtime.close()
  run.runtime = HarnessRuntime(ScriptedBackend(run.tokenizer, chain_sum_solver), run.tokenizer,
                               num_workers=2, timeout_seconds=30.0,
                               allowed_imports=run.domain.allowed_imports)
  summary = None
  try:
    summary = experiment.run_recipe(run, "harness_learning", config)
  except RuntimeError as error:
    assert str(error) == "interrupted"
  finally:
    checkpoint_lib.wait_until_finished(run.manager)
    run.runtime.close()
    run.policy.close()
    run.log.close()
    monkeypatch.setattr(revision_lib, "judge_replies", original_judge)
    monkeypatch.setattr(harness_learning, "finish", original_finish)
  return summary, captured.get("params"), run.counts.to_json()


def _scripted_config():
  config = harness_learning_configs.get_config("smoke")
  config.harness_learning.teacher_candidates = 5   # every edit the library has for chain_sum
  return config


def _metrics(workdir):
  return [{k: v for k, v in json.loads(line).items() if "seconds" not in k}
          for line in open(os.path.join(workdir, "metrics.jsonl"))]


@pytest.mark.slow
def test_scripted_solver_demonstrations_train_and_an_interrupted_run_resumes_exactly(
    tmp_path, monkeypatch):
  import jax  # pylint: disable=g-import-not-at-top
  reference, interrupted = str(tmp_path / "reference"), str(tmp_path / "interrupted")
  summary, params, counts = _scripted_run(_scripted_config(), reference,
                                          monkeypatch=monkeypatch)
  rows = [json.loads(line) for line in
          open(os.path.join(reference, "harness_learning", "demonstrations.jsonl"))]
  # Both contexts start from the seed (score 0); both format reminders score 1.
  assert summary["demonstrations"] == len(rows) == 4
  assert all(row["score"] == 1.0 and row["baseline"] == 0.0 for row in rows)
  assert all("PROMPT_TEMPLATE" in row["reply"] and "SEARCH" in row["reply"] for row in rows)
  sft_row = next(row for row in _metrics(reference) if row.get("kind") == "sft")
  assert sft_row["samples"] == 4 and sft_row["optimizer_steps"] == 1

  # Judge calls: 2 demonstration contexts, 1 GRPO context, 1 strict round, 1 best-of round.
  assert _scripted_run(_scripted_config(), interrupted, 2, monkeypatch)[0] is None
  assert _scripted_run(_scripted_config(), interrupted, 5, monkeypatch)[0] is None
  resumed, resumed_params, resumed_counts = _scripted_run(_scripted_config(), interrupted,
                                                          monkeypatch=monkeypatch)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(resumed_params)):
    np.testing.assert_array_equal(a, b)
  assert resumed_counts == counts
  assert resumed["adaptation"] == summary["adaptation"]
  assert resumed["incumbent_hash"] == summary["incumbent_hash"]
  assert _metrics(interrupted) == _metrics(reference)
