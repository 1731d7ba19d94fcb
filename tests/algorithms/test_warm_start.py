"""Warm start's teacher episodes: an answer the teacher was not shown is left out."""
from whale_jax import tasks
from whale_jax.algorithms import warm_start
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import SamplingParams
from whale_jax.tasks import synthetic_qa
from whale_jax.tasks import synthetic_qa_teacher
from whale_jax.tokenization import load_tokenizer

SIZES = {"weight": 0, "harness": 0, "validation": 0, "test": 80}


def _teacher_trajectories(harness_source, domain, world):
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, replies=synthetic_qa_teacher.teacher_replies(
      world[1], world[0]))
  instances = domain.splits()["test"]
  episodes = [tasks.make_episode(domain, i, SamplingParams(max_tokens=64)) for i in instances]
  with HarnessRuntime(backend, tokenizer, num_workers=2) as runtime:
    return instances, runtime.run_episodes(Harness(harness_source), episodes)


def test_grounded_leaves_out_answers_past_the_passage_cut_only():
  domain = tasks.get_domain("synthetic_qa", seed=3, split_sizes=SIZES,
                            seed_harness="searchqa_compact")
  world = synthetic_qa.generate_world(seed=3)
  questions = {q["id"]: q for q in world[1]}
  texts = {p["id"]: p["text"] for p in world[0]}
  instances, trajectories = _teacher_trajectories(domain.seed_harness, domain, world)
  # Under h0 (two turns, 12 words) the teacher searches the question's entity, then answers
  # a one-hop question or searches a two-hop question's bridge entity (and the episode ends).
  # What it answers or searches second is shown when it is among the first 12 words of the
  # first passage.
  titles = {p["id"]: p["title"] for p in world[0]}
  expected = []
  for instance in instances:
    question = questions[instance.id]
    words = [w.strip(".") for w in texts[question["supporting_ids"][0]].split()[:12]]
    second = (titles[question["supporting_ids"][1]] if question["hops"] == 2 else
              question["golden_answers"][0])
    expected.append(second in words)
  assert [warm_start.grounded(t) for t in trajectories] == expected
  assert not all(expected) and any(expected)
  # With enough turns and passage every teacher episode is grounded.
  _, trajectories = _teacher_trajectories(synthetic_qa_teacher.teacher_harness_source(),
                                          domain, world)
  assert all(warm_start.grounded(t) for t in trajectories)
