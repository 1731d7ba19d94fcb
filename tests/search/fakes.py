"""Fakes for search tests: a QA model whose success depends on harness features, and a
runtime-free evaluate function that scores harness sources by the same features."""
import ast
import hashlib
import re

from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import collector

QA_SPLIT_SIZES = {"weight": -1, "harness": 8, "validation": 8, "test": 8}
REMINDER = "only the short entity"   # in the edit library's first QA format reminder


def qa_model(instances):
  """A scripted QA model (prompt text -> reply) that needs the harness's help to succeed.

  It searches with the question, then answers correctly only when the prompt shows at least
  three passages or carries the short-answer reminder; otherwise it answers "unknown".
  """
  gold = {i.public["question"]: i.reference["golden_answers"][0] for i in instances}

  def reply(prompt):
    question = re.findall(r"Question: (.*?)\n", prompt)[-1]
    if "<tool_response>" in prompt or "Passages retrieved" in prompt:
      num_passages = len(set(re.findall(r"Doc (\d+) \(Title", prompt)))
      helped = num_passages >= 3 or REMINDER in prompt
      return f"<answer>{gold[question] if helped else 'unknown'}</answer>"
    return ("<tool_call><function=search><parameter=query_list>"
            f"[\"{question}\"]</parameter></function></tool_call>")
  return reply


def _constant(source, name, default):
  try:
    tree = ast.parse(source)
  except SyntaxError:
    return default
  for node in tree.body:
    if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and
        node.targets[0].id == name):
      return ast.literal_eval(node.value)
  return default


def feature_score(source, task_id, sample_key):
  """1 or 0: TOPK >= 3 succeeds on three tasks in four, a reminder on one in two, else 0."""
  noise = int(hashlib.sha256(f"{task_id}/{sample_key}".encode()).hexdigest()[:4], 16)
  if _constant(source, "TOPK", 1) >= 3:
    return float(noise % 4 != 0)
  if REMINDER in source:
    return float(noise % 2 == 0)
  return 0.0


def fake_trajectory(harness, task_id, num_turns, answer="<answer>x</answer>"):
  calls = [trajectory_lib.LLMCall(
      method="chat", messages=[{"role": "user", "content": f"Question: {task_id}"}],
      prompt=None, prompt_token_ids=[1, 2], sampling={"seed": 0},
      completions=[trajectory_lib.RecordedCompletion([3], [-0.5], "reply", "stop")],
      started_seconds=0.0, duration_seconds=0.0) for _ in range(num_turns)]
  return trajectory_lib.Trajectory(f"{task_id}#0", task_id, harness.hash, "ok", answer=answer,
                                   calls=calls)


class FakeEvaluate:
  """evaluate(harness, instances, keys) scored by feature_score, without a runtime.

  Records every call as (harness hash, task ids, keys); raises RuntimeError on call number
  fail_on_call (1-based) to simulate an interruption. Turns: MAX_TURNS of the source.
  """

  def __init__(self, fail_on_call=None):
    self.calls, self.fail_on_call = [], fail_on_call

  def __call__(self, harness, instances, keys):
    self.calls.append((harness.hash, [i.id for i in instances], list(keys)))
    if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
      raise RuntimeError("interrupted")
    turns = _constant(harness.source, "MAX_TURNS", 2)
    return collector.Evaluation(
        tuple(i.id for i in instances), tuple(keys),
        tuple(feature_score(harness.source, i.id, k) for i, k in zip(instances, keys)),
        tuple(fake_trajectory(harness, i.id, turns) for i in instances),
        rollouts=len(instances))

  @property
  def episodes(self):
    return sum(len(ids) for _, ids, _ in self.calls)
