"""Warm start: train a tiny solver from scratch on teacher trajectories (the embedded solver).

  python -m whale_jax.main --config=configs/embedded_solver.py --workdir=runs/solver

  1. Worlds: synthetic-QA worlds with the seeds in config.warm_start.world_seeds; held-out
     worlds (eval_world_seeds) measure progress. The demo's world is neither.
  2. Tokenizer: byte-level BPE (vocab_size) trained on the worlds' passages and questions,
     the entity names of name_worlds more worlds (so most names are two tokens), and the
     seed harness text.
  3. Teacher trajectories: the compact seed harness with enough turns and passage to finish,
     run through the harness runtime with the scripted teacher
     (whale_jax.tasks.qa.teacher); each episode becomes one SFT sample, its last
     prompt and reply, trained on every reply in it (episode_sequences checks that the
     earlier replies appear token for token). An episode with a search query or answer that
     its prompt did not show (a name or fact past the teacher harness's passage cut) is left
     out, so the solver is never taught to use what it cannot see (grounded); under a teacher
     harness with enough turns and passage none is. With config.warm_start.teachers, several
     teacher harnesses (turns, passage words) each give their share of every batch. Each
     teacher's samples are cached in workdir/teacher_samples_<turns>x<words>.npz.
  4. SFT from random weights (or from init_solver's weights, with its tokenizer, when set) for
     `steps` optimizer steps, step s on samples_per_step teacher samples drawn with
     seeds.derive_seed(config.warm_start.seed, "warm_start_batch", s) (a restarted run draws
     what an uninterrupted one would). Every eval_every steps the solver is scored with its
     own sampler on held-out worlds, under the seed harness h0 and under each teacher's
     harness (what it could do with enough turns and passage); rows go to metrics.jsonl and
     the train state to checkpoints/ (a restarted run resumes).
  5. Export: workdir/solver holds config.json, model.safetensors and the tokenizer files, the
     layout of whale_jax/assets/demo_solver.
"""
import os
import re
import shutil

from absl import logging
import jax
import numpy as np
import tqdm

from whale_jax import atomic_files
from whale_jax import seeds as seeds_lib
from whale_jax import tasks
from whale_jax.algorithms import policy as policy_lib
from whale_jax.algorithms import run_log
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.models import ModelConfig
from whale_jax.models import hf
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.rollouts import grouped
from whale_jax.sampling import SamplingParams
from whale_jax.tasks import seed_harnesses
from whale_jax.tasks.qa import generator as synthetic_qa
from whale_jax.tasks.qa import teacher as synthetic_qa_teacher
from whale_jax.tokenization import bpe_training
from whale_jax.tokenization import byte
from whale_jax.tokenization import load_tokenizer
from whale_jax.train import checkpoint as checkpoint_lib
from whale_jax.train import packing
from whale_jax.train import train_state

EXTRA_SPECIAL_TOKENS = ("<search>", "</search>", "<answer>", "</answer>")


def _seeds(pair):
  first, count = pair
  return range(first, first + count)


def train_tokenizer(warm_config, directory):
  texts = []
  for seed in range(50_000, 50_000 + warm_config.name_worlds):
    corpus, _ = synthetic_qa.generate_world(seed=seed)
    texts.append(" ".join(passage["title"] for passage in corpus))
  for seed in _seeds(warm_config.world_seeds):
    corpus, questions = synthetic_qa.generate_world(seed=seed)
    texts += [passage["text"] for passage in corpus] + [q["question"] for q in questions]
  texts += [seed_harnesses.source("searchqa_compact")] * 20
  bpe_training.train_bpe(texts, directory, vocab_size=warm_config.vocab_size,
                         special_tokens=byte.SPECIAL_TOKENS + EXTRA_SPECIAL_TOKENS)
  return load_tokenizer(directory)


def _world_domain(seed, test_size=0):
  sizes = {"weight": -1, "harness": 0, "validation": 0, "test": test_size}
  return tasks.get_domain("synthetic_qa", seed=seed, split_sizes=sizes,
                          seed_harness="searchqa_compact")


def episode_sequences(trajectory):
  """[(token ids, loss mask)] of one episode: a single sequence when every call's prompt
  starts with the previous call's prompt and completion (then every reply in it is trained
  on), else one sequence per call."""
  calls = trajectory.calls
  whole = list(calls[-1].prompt_token_ids) + list(calls[-1].completions[0].token_ids)
  mask = np.zeros(len(whole), np.float32)
  for call in calls:
    prompt, completion = list(call.prompt_token_ids), list(call.completions[0].token_ids)
    if whole[:len(prompt) + len(completion)] != prompt + completion:
      break
    mask[len(prompt):len(prompt) + len(completion)] = 1
  else:
    return [(np.asarray(whole, np.int32), mask)]
  pieces = []
  for call in calls:
    prompt, completion = list(call.prompt_token_ids), list(call.completions[0].token_ids)
    call_mask = np.r_[np.zeros(len(prompt)), np.ones(len(completion))].astype(np.float32)
    pieces.append((np.asarray(prompt + completion, np.int32), call_mask))
  return pieces


TAGS = re.compile(r"<(?:search|answer)>(.*?)</(?:search|answer)>", re.DOTALL)


def grounded(trajectory):
  """Whether every search query and answer of the episode's replies is a whole word sequence
  of what that call was shown (its user and tool messages): the question's entity, a name in
  a passage, an answer in a passage."""
  for call in trajectory.calls:
    shown = " ".join(str(message.get("content", "")) for message in call.messages or ()
                     if message.get("role") in ("user", "tool"))
    for value in TAGS.findall(call.completions[0].text if call.completions else ""):
      value = value.strip()
      if not value or re.search(rf"(?<!\w){re.escape(value)}(?!\w)", shown) is None:
        return False
  return True


def teacher_samples(warm_config, tokenizer, path, max_turns, max_doc_tokens):
  """(token id arrays, loss mask arrays) of the teacher episodes under the teacher harness
  with max_turns and max_doc_tokens, cached at path."""
  if os.path.exists(path):
    with np.load(path) as data:  # each data[name] reads the whole array again: read once
      tokens, masks, offsets = data["tokens"], data["masks"], data["offsets"]
    return np.split(tokens, offsets[1:-1]), np.split(masks, offsets[1:-1])
  harness = Harness(synthetic_qa_teacher.teacher_harness_source(max_turns, max_doc_tokens))
  sequences, masks, ungrounded = [], [], 0
  for seed in tqdm.tqdm(list(_seeds(warm_config.world_seeds)), desc="teacher worlds"):
    corpus, questions = synthetic_qa.generate_world(seed=seed)
    domain = _world_domain(seed)
    backend = ScriptedBackend(tokenizer, synthetic_qa_teacher.teacher_replies(questions, corpus))
    instances = domain.splits()["weight"]
    with HarnessRuntime(backend, tokenizer, num_workers=2) as runtime:
      trajectories = runtime.run_episodes(harness, [
          tasks.make_episode(domain, instance, SamplingParams(max_tokens=32))
          for instance in instances])
    for trajectory in trajectories:
      if trajectory.ok and not grounded(trajectory):
        ungrounded += 1
      elif trajectory.ok:
        for tokens, mask in episode_sequences(trajectory):
          sequences.append(tokens)
          masks.append(mask)
  logging.info("Teacher episodes (%d turns, %d-word passages) left out as ungrounded (a query "
               "or answer not shown): %d.", max_turns, max_doc_tokens, ungrounded)
  offsets = np.cumsum([0] + [len(s) for s in sequences])
  atomic_files.write_with(path, lambda temporary: np.savez(
      temporary, tokens=np.concatenate(sequences), offsets=offsets, masks=np.concatenate(masks)),
                          suffix=".npz")
  return sequences, masks


def evaluate(policy, tokenizer, warm_config, harness_sources):
  """{name: accuracy} of the solver under each harness on the held-out worlds' questions
  (harnesses with the same source, e.g. a teacher harness equal to h0, are run once)."""
  distinct = list(dict.fromkeys(harness_sources.values()))
  accuracies = {source: [] for source in distinct}
  sampling = SamplingParams(max_tokens=24, temperature=0.0)
  for seed in _seeds(warm_config.eval_world_seeds):
    domain = _world_domain(seed, warm_config.eval_questions)
    with HarnessRuntime(policy.sampler, tokenizer, num_workers=4) as runtime:
      for source in distinct:
        batch = grouped.collect(runtime, domain, Harness(source), domain.splits()["test"],
                                sampling, 1, ("warm_start_eval",), warm_config.seed)
        accuracies[source].append(batch.mean_score())
  return {name: float(np.mean(accuracies[source])) for name, source in harness_sources.items()}


def batch_counts(mix, batch_size):
  """How many of a batch's samples each teacher of mix ((turns, words, share), ...) gives: its
  share of batch_size rounded, the last teacher taking the rest."""
  counts = [int(round(share * batch_size)) for _, _, share in mix[:-1]]
  counts.append(batch_size - sum(counts))
  if min(counts) < 0:
    raise ValueError(f"config.warm_start.teachers: shares {[t[2] for t in mix]} cannot split a "
                     f"batch of {batch_size}; change the shares or config.training."
                     "samples_per_step.")
  return counts


def _teacher_name(mix, turns, words):
  return "teacher_harness" if len(mix) == 1 else f"teacher_harness_{turns}x{words}"


def _model_from_solver(path, model_section, mesh):
  """(ModelConfig, params) of a solver directory, refusing a config.model whose shape differs."""
  model_config, params = hf.load_hf(path, mesh=mesh, rules=rules.TRAIN_RULES)
  for name, value in model_section.model_fields.items():
    if getattr(model_config, name, value) != value:
      raise ValueError(f"config.model.{name}={value!r} differs from the init_solver {path}'s "
                       f"{getattr(model_config, name)!r}; make them equal or drop the key.")
  return model_config, params


def run(warm_config, model_section, policy_config, workdir, show_progress=True):
  """Trains and exports the solver; returns the last evaluation.

  Args:
    warm_config: options.WarmStartConfig (config.warm_start).
    model_section: config.model (an sections.ModelSection: source "random", seed, ModelConfig
      fields); the vocabulary size is the trained tokenizer's. With warm_config.init_solver
      the model is that solver's, and a field given here must equal it.
    policy_config: options.PolicyConfig (config.training).
  """
  os.makedirs(workdir, exist_ok=True)
  solver_dir = os.path.join(workdir, "solver")
  tokenizer_dir = os.path.join(workdir, "tokenizer")
  if not os.path.exists(os.path.join(tokenizer_dir, "tokenizer.json")):
    if warm_config.init_solver:  # the starting weights' own tokenizer
      os.makedirs(tokenizer_dir, exist_ok=True)
      for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(warm_config.init_solver, name), tokenizer_dir)
    else:
      train_tokenizer(warm_config, tokenizer_dir)
  tokenizer = load_tokenizer(tokenizer_dir)
  mesh = mesh_lib.make_mesh(data=1, devices=jax.devices()[:1])
  if warm_config.init_solver:
    model_config, params = _model_from_solver(warm_config.init_solver, model_section, mesh)
  else:
    model_fields = dict(model_section.model_fields)
    model_fields["vocab_size"] = -(-tokenizer.vocab_size // 64) * 64
    model_fields.setdefault("eos_token_ids", tuple(tokenizer.eos_ids))
    model_config = ModelConfig(**model_fields)
    params = train_state.init_params(model_config,
                                     jax.random.key(model_section.seed), mesh,
                                     rules.TRAIN_RULES)
  mix = warm_config.teacher_mix
  counts = batch_counts(mix, policy_config.samples_per_step)
  pools = []
  for turns, words, _ in mix:
    sequences, masks = teacher_samples(
        warm_config, tokenizer, os.path.join(workdir, f"teacher_samples_{turns}x{words}.npz"),
        turns, words)
    logging.info("Teacher %dx%d: %d samples, %d tokens.", turns, words, len(sequences),
                 sum(map(len, sequences)))
    pools.append([packing.Sample(tokens, mask) for tokens, mask in zip(sequences, masks)])
  policy = policy_lib.Policy(model_config, params, tokenizer, mesh, policy_config, "solver")
  manager = checkpoint_lib.make_manager(os.path.join(workdir, "checkpoints"), max_to_keep=2)
  if checkpoint_lib.latest_step(manager) is not None:
    state, _ = checkpoint_lib.restore(manager, train_state.abstract(
        model_config, policy.optimizer, mesh, rules.TRAIN_RULES))
    policy.set_state(state)
  log = run_log.RunLog(workdir)
  harnesses = {"h0": seed_harnesses.source("searchqa_compact")}
  for turns, words, _ in mix:
    harnesses[_teacher_name(mix, turns, words)] = synthetic_qa_teacher.teacher_harness_source(
        turns, words)
  progress = tqdm.tqdm(total=warm_config.steps, initial=policy.num_updates, desc="warm start",
                       disable=not show_progress)
  result = {}
  try:
    while policy.num_updates < warm_config.steps:
      rng = np.random.default_rng(seeds_lib.derive_seed(warm_config.seed, "warm_start_batch",
                                                        policy.num_updates))
      chunk = [pool[i] for pool, count in zip(pools, counts)
               for i in rng.choice(len(pool), count, replace=False)]
      history = policy.train(chunk, "rsft").history
      progress.update(1)
      step = policy.num_updates
      if step % 25 == 0:
        logging.info("step %d: loss %.3f", step, history[-1]["loss"])
      if step % warm_config.eval_every == 0 or step == warm_config.steps:
        checkpoint_lib.save(manager, step, policy.state)  # before evaluating: a failed
        checkpoint_lib.wait_until_finished(manager)       # evaluation loses no training
        result = evaluate(policy, tokenizer, warm_config, harnesses)
        log.log("warm_start", step, loss=history[-1]["loss"], **result)
        logging.info("step %d: loss %.3f, %s", step, history[-1]["loss"], result)
  finally:
    progress.close()
    checkpoint_lib.wait_until_finished(manager)
    log.close()
  hf.save_hf(solver_dir, model_config, policy.state["params"])
  for name in os.listdir(tokenizer_dir):
    shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(solver_dir, name))
  policy.close()
  atomic_files.write_json(os.path.join(workdir, "summary.json"),
                                {"steps": warm_config.steps, **result})
  return result
