"""The compact seed harness end to end with the scripted teacher: its knobs have real effects."""
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import SamplingParams
from whale_jax.tasks.qa import generator as synthetic_qa
from whale_jax.tasks.qa import teacher as synthetic_qa_teacher
from whale_jax.tokenization import load_tokenizer

SIZES = {"weight": 0, "harness": 0, "validation": 0, "test": 60}


def _scores(harness_source, instances, domain, world):
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, replies=synthetic_qa_teacher.teacher_replies(
      world[1], world[0]))
  episodes = [tasks.make_episode(domain, i, SamplingParams(max_tokens=64)) for i in instances]
  with HarnessRuntime(backend, tokenizer, num_workers=2) as runtime:
    trajectories = runtime.run_episodes(Harness(harness_source), episodes)
  return [domain.verify(i, t.answer, t) for i, t in zip(instances, trajectories)], trajectories


def test_teacher_solves_everything_with_enough_turns_and_passage():
  domain = tasks.get_domain("synthetic_qa", seed=3, split_sizes=SIZES,
                            seed_harness="searchqa_compact")
  world = synthetic_qa.generate_world(seed=3)
  instances = domain.splits()["test"]
  scores, trajectories = _scores(synthetic_qa_teacher.teacher_harness_source(), instances,
                                 domain, world)
  assert scores == [1.0] * len(instances)
  hops = {q["id"]: q["hops"] for q in world[1]}
  assert [t.num_turns for t in trajectories] == [hops[i.id] + 1 for i in instances]


def test_seed_harness_turn_budget_and_passage_length_limit_what_the_model_sees():
  domain = tasks.get_domain("synthetic_qa", seed=3, split_sizes=SIZES,
                            seed_harness="searchqa_compact")
  world = synthetic_qa.generate_world(seed=3)
  by_id = {q["id"]: q for q in world[1]}
  instances = domain.splits()["test"]
  scores, trajectories = _scores(domain.seed_harness, instances, domain, world)
  # Two turns: a two-hop question's second search never happens, so it cannot be answered.
  assert scores == [float(by_id[i.id]["hops"] == 1) for i in instances]
  # Passages are cut to 12 words: "Doc 1 (Title: "X") " then 12 words of text.
  for trajectory in trajectories:
    for event in trajectory.tool_events:
      text = event.result.split(") ", 1)[1]
      assert len(text.split()) <= 12
  assert any(len(e.result.split(") ", 1)[1].split()) == 12
             for t in trajectories for e in t.tool_events)
