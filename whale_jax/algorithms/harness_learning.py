"""Harness Learning (SPEC 3): a trained proposer revises the harness of a frozen solver.

  summary = run_harness_learning(run, config)     # experiment.run_recipe("harness_learning")

The solver (run.policy) is never trained; it serves every harness episode through
run.runtime. The proposer is a second Policy named "proposer", built from
config.harness_learning.proposer_model (the layout of config.model; empty: a copy of the
solver's weights) with its own tokenizer (proposer_tokenizer; empty: the model directory's,
or the solver's for a copy) and training options (proposer_training: PolicyConfig fields;
empty: config.training). One revision step (context, judging) is search/revision.py, its
reward search/reward.py, the samples the proposer trains on algorithms/samples.py.

Phases, in order (run.state.phase); "adapt_<stage>" follows each stage in adapt_stages:
  adapt_base      (optional) test-time adaptation with the untrained proposer.
  demonstrations  on demonstration_contexts contexts from the SFT domains every teacher
                  (teachers: proposer sections as in config.search, i.e. the edit library
                  and/or an OpenAI-compatible model) proposes teacher_candidates revisions;
                  each is judged, and those whose scoring mean is strictly above the current
                  harness's become (context prompt -> teacher reply) pairs, kept in
                  workdir/harness_learning/demonstrations.jsonl.
  sft             proposer.train(pairs, "rsft", sft_epochs): NLL on the reply tokens only.
  grpo            grpo_steps steps; each takes contexts_per_step contexts from the GRPO
                  domains, samples K = num_candidates replies per context (one request, one
                  shared prefill), rewards each (search/reward.py), forms
                  group-relative advantages (run.loop.advantage_normalization; groups whose
                  rewards are all equal are dropped when run.loop.filter_zero_advantage)
                  and trains proposer.train(samples, "grpo"): clipped against the log-probs
                  of the weights that sampled the replies (algorithms/policy.py).
  adapt_<stage>   test-time adaptation on run.domain with the proposer frozen, once per
                  selection rule, each from the seed harness:
                    strict   strict_rounds rounds of 1 candidate, kept only when its scoring
                             mean is strictly above the current harness's (Reasoning Gym);
                    best_of  best_of_rounds rounds of best_of_candidates candidates; the
                             highest-scoring runnable one is kept even when worse, the current
                             harness only when none is runnable (multi-hop QA).
                  and two protocols that read the test split, one round each:
                    oracle   best_of_candidates candidates from the seed, each runnable one
                             evaluated on test, the best test mean reported (the paper's
                             test-selected "oracle best-of-8"; the seed's when none runs);
                    single_step  single_step_candidates independent candidates from the
                             seed, the mean of their test means reported, an unrunnable
                             candidate counting 0 (a guess), with the share that beat the
                             seed's test mean (the paper's 80 single-step candidates).
                  Each adapted harness gets its test mean@k (loop.evaluate_test); the seed
                  harness's is measured before the first phase, and so are those of the
                  fixed_harnesses (e.g. the paper's hand-written Python tool loop), labelled
                  fixed_<name>.

Execution reports (search_answers): the diagnostic episodes, and for each diagnostic task
outside the validation and test splits what search_answers shows of its reference ("none",
"answers", or "answers_and_documents", the default: the gold answers and supporting
documents, as the paper's QA reports). The validation and test splits' gold answers are
replaced by a mark wherever they would appear in a report (strings of 6 characters or more),
so validation diagnostics (adaptation_diagnostic_size > 0) show their episodes, not their gold.

Tasks: a training context draws diagnostic_size diagnostic and scoring_size scoring tasks
(disjoint; diagnostic_size 0 lets the scoring tasks serve as diagnostics) from the weight
split of one training domain, the domains taken in turn (sft_domains, grpo_domains: domain
names built with config.domain's seed and split_sizes, or whole domain sections; empty =
run.domain), seeded by (seed, phase, context index). Its current harness is the domain's
seed harness or, with multi_step, the best candidate of the domain's latest context that
beat that context's current harness in this phase. Test-time adaptation scores candidates
on run.domain's harness split; its diagnostics are those same tasks
(adaptation_diagnostic_size 0) or adaptation_diagnostic_size tasks drawn per round from the
validation split. Only loop.evaluate_test reads the test split.

Accounting: every solver episode of the demonstrations, GRPO and adaptation (diagnostics,
the current harness's scoring, candidates) counts as "harness"; test evaluations count as
"evaluation". Proposer tokens are logged apart (proposer_prompt_tokens,
proposer_completion_tokens) and are no rollouts. Metrics rows: phase "proposer" for
demonstrations, SFT and GRPO, "harness" for adaptation rounds.

Resuming: save() writes the proposer's train state with orbax under
workdir/proposer_checkpoints, at the step number the loop checkpoint is about to take, then
calls loop.checkpoint(run); a restart restores the proposer at the loop checkpoint's step.
Checkpoints follow every phase, every run.loop.checkpoint_every_steps GRPO steps and every
adaptation round. A killed run redoes what followed its last checkpoint: the demonstrations
phase from its start; GRPO steps and adaptation rounds with the same seeds (proposer samples
are seeded by (seed, phase, step, context)), so the replay makes the same choices.

Departures from the paper:
  - A run adapts on one held-out domain (run.domain); the paper averages 21 unseen Reasoning
    Gym categories (one run per category here).
  - The proposer prompt is whale_jax's (search/revision.py's INSTRUCTIONS and search/context.py's
    rendering of the current code and its episodes); the paper's prompt and execution-report
    format are unknown.
  - The default teacher is the edit library; the paper's 432 demonstrations came from
    Qwen3.6-35B-A3B (configure an OpenAI-compatible teacher for that).
  - Patch mode: "parses" = at least one SEARCH/REPLACE block and every block closed; a patch
    that changes nothing does not count as applied; the completion bonus counts scoring
    episodes that ended "ok" (infra errors are retried once first).
  - Program mode: "completes the evaluation run" = every scoring episode ended "ok"
    (reward.min_completed_fraction); an unchanged program earns nothing.
  - multi_step carries improving candidates forward per domain within a phase, a simple
    form of the paper's multi-step data; both regimes reward only the immediate revision,
    as the paper does.
  - GRPO hyper-parameters (learning rate, KL, clipping, batch, steps) and the training task
    lists are not in the paper; the configs' values are choices.
  - Reports show gold only for diagnostics outside the validation and test splits. With
    adaptation_diagnostic_size > 0 (the QA variant) the feedback problems come from the
    validation split, so their reports carry episodes without gold, where the paper's six
    feedback problems show gold answers and supporting documents. SearchQA's "supporting
    documents" are the reference's supporting_ids (passage ids), not passage text.
"""
import dataclasses
import json
import os

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from whale_jax import atomic_files
from whale_jax import seeds as seeds_lib
from whale_jax.algorithms import builders
from whale_jax.algorithms import hosts
from whale_jax.algorithms import loop
from whale_jax.algorithms import options
from whale_jax.algorithms import policy as policy_lib
from whale_jax.algorithms import samples as samples_lib
from whale_jax.harness import Harness
from whale_jax.parallel import rules
from whale_jax.rollouts import sharding
from whale_jax.search import revision as revision_lib
from whale_jax.sampling import SamplingParams
from whale_jax.tasks import registry
from whale_jax.tasks import seed_harnesses
from whale_jax.search import evaluation as search_evaluation
from whale_jax.tokenization import load_tokenizer
from whale_jax.train import checkpoint as checkpoint_lib
from whale_jax.train import train_state

STAGES = options.STAGES
CHAT_TEMPLATE_MARGIN_TOKENS = 64
DEMONSTRATIONS_FILE = "demonstrations.jsonl"


def phases(hl_config):
  """The phase sequence of a run (see the module docstring)."""
  sequence = []
  if "base" in hl_config.adapt_stages:
    sequence.append("adapt_base")
  if hl_config.sft_enabled:
    sequence += ["demonstrations", "sft"] + (["adapt_sft"] if "sft" in hl_config.adapt_stages
                                             else [])
  if hl_config.grpo_steps:
    sequence += ["grpo"] + (["adapt_grpo"] if "grpo" in hl_config.adapt_stages else [])
  return sequence


# ---- The proposer model -------------------------------------------------------------------

@dataclasses.dataclass
class Proposer:
  """The proposer under training: its Policy, tokenizer, sampling and checkpoints."""
  policy: object
  tokenizer: object
  sampling: SamplingParams
  manager: object = None

  def close(self):
    if self.manager is not None:
      checkpoint_lib.close(self.manager)
    self.policy.close()


def build_proposer(run, hl_config, solver_training):
  """The proposer Policy of config.harness_learning, beside the solver on its mesh.

  solver_training: config.training (a PolicyConfig), used when proposer_training is
  empty.
  """
  mesh = run.policy.mesh
  training = hl_config.proposer_training or solver_training
  if hl_config.proposer_model is not None:
    model_config, params, model_dir = builders.load_model(
        hl_config.proposer_model, mesh, key_path="config.harness_learning.proposer_model")
    tokenizer = builders.load_run_tokenizer(
        hl_config.proposer_tokenizer, model_dir,
        key_path="config.harness_learning.proposer_tokenizer")
  else:
    model_config = run.policy.model_config
    params = jax.tree.map(jnp.copy, run.policy.params)  # the train step donates its state
    tokenizer = (load_tokenizer(hl_config.proposer_tokenizer) if hl_config.proposer_tokenizer
                 else run.tokenizer)
  policy = policy_lib.Policy(model_config, params, tokenizer, mesh,
                             training, name="proposer")
  manager = None
  if run.manager is not None:
    manager = checkpoint_lib.make_manager(os.path.join(run.workdir, "proposer_checkpoints"),
                                          max_to_keep=2)
  proposer = Proposer(policy, tokenizer, hl_config.proposer_sampling,
                      manager)
  _check_capacity(hl_config, proposer)
  return proposer


def _check_capacity(hl_config, proposer):
  needed = (hl_config.context_budget_tokens + proposer.sampling.max_tokens +
            CHAT_TEMPLATE_MARGIN_TOKENS)
  limits = (("sampler max_cache_length", proposer.policy.sampler.max_cache_length,
             "proposer_training.sampler.max_cache_length"),
            ("row_length", proposer.policy.config.row_length, "proposer_training.row_length"))
  for what, limit, key in limits:
    if needed > limit:
      raise ValueError(
          f"config.harness_learning.context_budget_tokens={hl_config.context_budget_tokens} "
          f"plus proposer_sampling.max_tokens={proposer.sampling.max_tokens} (and "
          f"{CHAT_TEMPLATE_MARGIN_TOKENS} for the chat template) needs {needed} tokens, but "
          f"the proposer's {what} is {limit}. Lower those two, or raise "
          f"config.harness_learning.{key} to at least {needed}.")


def save(run, proposer):
  """Saves the proposer at the step the loop checkpoint takes next, then the loop checkpoint."""
  if run.manager is None:
    return
  step = run.state.saves + 1
  if proposer.manager is not None:
    if step in checkpoint_lib.all_steps(proposer.manager):  # written before a kill
      proposer.manager.delete(step)
    checkpoint_lib.save(proposer.manager, step, proposer.policy.state)
  loop.checkpoint(run)


def restore_proposer(run, proposer):
  """Restores the proposer saved with the loop's checkpoint; False when there is none."""
  step = run.state.saves
  if proposer.manager is None or not step:
    return False
  if step not in checkpoint_lib.all_steps(proposer.manager):
    raise FileNotFoundError(
        f"The loop checkpoint of {run.workdir} is save {step}, but "
        f"{proposer.manager.directory} has proposer steps "
        f"{checkpoint_lib.all_steps(proposer.manager)}; restore that directory or start the "
        "run in a new workdir.")
  abstract = train_state.abstract(proposer.policy.model_config, proposer.policy.optimizer,
                                  proposer.policy.mesh, rules.TRAIN_RULES)
  state, _ = checkpoint_lib.restore(proposer.manager, abstract, step)
  proposer.policy.set_state(state)
  logging.info("Restored the proposer at save %d (%d updates).", step,
               proposer.policy.num_updates)
  return True


def _submit(run, proposer, context, n, key):
  """(prompt ids, future of n Completions) sampled from the proposer for one context,
  seeded by (run seed, key)."""
  prompt = revision_lib.prompt_ids(proposer.tokenizer, context.messages)
  seed = seeds_lib.derive_seed(run.loop.seed, "proposer_sample", *key)
  return prompt, proposer.policy.sampler.submit(prompt,
                                                proposer.sampling.replace(n=n, seed=seed))


# ---- Tasks and contexts -------------------------------------------------------------------

def training_domains(run, domain_section, entries):
  """The Domains named by sft_domains / grpo_domains (empty: [run.domain]); a name is built
  with the seed and split_sizes of domain_section (config.domain, a DomainSection)."""
  if not entries:
    return [run.domain]
  domains = []
  for entry in entries:
    if isinstance(entry, str):
      domains.append(run.domain if entry == run.domain.name else builders.build_domain(
          registry.DomainSection(name=entry, seed=domain_section.seed,
                                 split_sizes=domain_section.split_sizes)))
    else:
      domains.append(builders.build_domain(entry))
  return domains


def training_tasks(run, hl_config, domain, phase, index):
  """(diagnostic, scoring) instances of training context `index` of a phase."""
  pool = domain.splits()["weight"]
  needed = hl_config.diagnostic_size + hl_config.scoring_size
  if len(pool) < needed:
    raise ValueError(f"Domain {domain.name} has {len(pool)} weight-split instances; a "
                     f"training context needs diagnostic_size + scoring_size = {needed}. "
                     "Lower config.harness_learning.diagnostic_size/scoring_size or raise the "
                     "domain's split_sizes['weight'].")
  seed = seeds_lib.derive_seed(run.loop.seed, "training_tasks", phase, domain.name, index)
  order = np.random.default_rng(seed).permutation(len(pool))
  scoring = [pool[i] for i in order[:hl_config.scoring_size]]
  diagnostic = [pool[i] for i in order[hl_config.scoring_size:needed]] or scoring
  return diagnostic, scoring


def held_out(domain):
  """The validation and test instances of domain: an execution report never shows their
  references (revision_context's held_out)."""
  splits = domain.splits()
  return [*splits.get("validation", ()), *splits.get("test", ())]


def _evaluate(run, domain):
  """The evaluate function of the revision steps, on run.runtime: on a multi-host run the
  collector splits every evaluation over the hosts (each runs and verifies its own episodes)
  and the execution reports are read from the trace shards (search/revision.py)."""
  return search_evaluation.make_evaluate(run.runtime, domain, run.sampling,
                                         weights_id=run.policy.weights_id)


def _directory(run, *parts):
  """workdir/harness_learning/...: one folder for every host (host 0 writes the archives and
  demonstrations, each host its trace shards)."""
  return os.path.join(run.workdir, "harness_learning", *parts)


def _notes(run):
  """run.state.harness_learning (a loop.HarnessLearningNotes), made on first use."""
  if run.state.harness_learning is None:
    run.state.harness_learning = loop.HarnessLearningNotes()
  return run.state.harness_learning


def _training_context(run, hl_config, proposer, domain, current, diagnostic, scoring,
                      directory, iteration, need_baseline):
  """(context, archive, baseline scoring mean or None, rollouts) of one training context."""
  evaluate = _evaluate(run, domain)
  context, archive, report = revision_lib.revision_context(
      directory, domain, current, diagnostic, evaluate, run.loop.seed, iteration,
      hl_config.context_budget_tokens, proposer.tokenizer, hl_config.kind, hl_config.rewards,
      search_answers=hl_config.search_answers, held_out=held_out(domain),
      hosts=loop.hosts_of(run))
  rollouts, baseline = report.rollouts, None
  if need_baseline and scoring is diagnostic:
    baseline = report.success_rate
  elif need_baseline:
    keys = search_evaluation.sample_keys(scoring, run.loop.seed)
    evaluation = search_evaluation.as_evaluation(
        evaluate(Harness(current), scoring, keys), scoring, keys)
    rollouts += evaluation.rollouts
    baseline = evaluation.success_rate
  return context, archive, baseline, rollouts


def _carry(hl_config, carried, domain, revisions, baseline):
  """multi_step: the best candidate above the baseline becomes the domain's current harness."""
  better = [r for r in revisions if r.ran and baseline is not None and r.score > baseline]
  if hl_config.multi_step and better:
    carried[domain.name] = max(better, key=lambda r: r.score).source


# ---- Demonstrations and SFT ---------------------------------------------------------------

def collect_demonstrations(run, hl_config, proposer, teachers, domains):
  """The demonstrations phase; writes and returns the demonstration rows."""
  rows, carried = [], {}
  progress = tqdm.tqdm(range(hl_config.demonstration_contexts), desc="demonstrations",
                       disable=not run.show_progress, leave=False)
  for index in progress:
    domain = domains[index % len(domains)]
    current = carried.get(domain.name, domain.seed_harness)
    diagnostic, scoring = training_tasks(run, hl_config, domain, "demonstrations", index)
    context, archive, baseline, rollouts = _training_context(
        run, hl_config, proposer, domain, current, diagnostic, scoring,
        _directory(run, "demonstrations", f"context_{index:04d}"), index + 2, True)
    new_rows, revisions, more = revision_lib.teacher_demonstrations(
        context, teachers, hl_config.teacher_candidates, hl_config.kind, domain, scoring,
        _evaluate(run, domain), run.loop.seed, baseline, archive, hl_config.rewards,
        loop.hosts_of(run))
    run.counts.add("harness", rollouts + more)
    rows += new_rows
    _carry(hl_config, carried, domain, revisions, baseline)
    run.log.log("proposer", run.counts.training, kind="demonstrations", context=index,
                domain=domain.name, baseline=baseline, teacher_proposals=len(revisions),
                demonstrations=len(new_rows),
                best_score=max((r.score for r in revisions), default=0.0))
  if jax.process_index() == 0:
    atomic_files.write_text(_directory(run, DEMONSTRATIONS_FILE),
                            "".join(json.dumps(row) + "\n" for row in rows))
  sharding.barrier(loop.hosts_of(run))  # written before any host reads it
  _notes(run).demonstrations = len(rows)
  return rows


def read_demonstrations(run):
  path = _directory(run, DEMONSTRATIONS_FILE)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def sft(run, hl_config, proposer, rows):
  """SFT of the proposer on the demonstration pairs (loss on the reply tokens only)."""
  samples = [samples_lib.demonstration_sample(proposer.tokenizer, row["messages"],
                                                   row["reply"]) for row in rows]
  result = proposer.policy.train(samples, "rsft", epochs=hl_config.sft_epochs)
  history = result.history
  if result.num_dropped:
    logging.warning("%d of %d demonstrations are longer than the proposer's row_length=%d "
                    "and were left out of SFT; raise config.harness_learning.proposer_training"
                    ".row_length to train on them.", result.num_dropped, len(samples),
                    proposer.policy.config.row_length)
  metrics = {"samples": result.num_samples, "dropped_samples": result.num_dropped,
             "optimizer_steps": len(history), "proposer_updates": proposer.policy.num_updates}
  if history:
    metrics["loss"] = float(np.mean([h["loss"] for h in history]))
    metrics["final_loss"] = history[-1]["loss"]
  run.log.log("proposer", run.counts.training, kind="sft", **metrics)
  return metrics


# ---- GRPO ---------------------------------------------------------------------------------

def grpo_step(run, hl_config, proposer, domains, step):
  """One GRPO step of the proposer; returns its metrics."""
  carried = _notes(run).carried
  contexts = []
  rollouts = 0
  for index in range(hl_config.contexts_per_step):
    context_index = step * hl_config.contexts_per_step + index
    domain = domains[context_index % len(domains)]
    current = carried.get(domain.name, domain.seed_harness)
    diagnostic, scoring = training_tasks(run, hl_config, domain, "grpo", context_index)
    context, archive, baseline, used = _training_context(
        run, hl_config, proposer, domain, current, diagnostic, scoring,
        _directory(run, "grpo", f"step_{step:05d}", f"context_{index:02d}"), step + 2,
        hl_config.multi_step)
    rollouts += used
    contexts.append((context, archive, domain, scoring, baseline))
  requests = [_submit(run, proposer, context, hl_config.num_candidates, ("grpo", step, index))
              for index, (context, *_) in enumerate(contexts)]  # all in flight together
  prompts = [prompt for prompt, _ in requests]
  completions = [future.result() for _, future in requests]
  all_revisions = []
  for (context, archive, domain, scoring, baseline), group in zip(contexts, completions):
    revisions, used = revision_lib.judge_replies(
        [completion.text for completion in group], hl_config.kind, context.incumbent.source,
        domain, scoring, _evaluate(run, domain), run.loop.seed, archive, hl_config.rewards,
        [proposer.policy.weights_id] * len(group), loop.hosts_of(run))
    rollouts += used
    all_revisions.append(revisions)
    _carry(hl_config, carried, domain, revisions, baseline)
  run.counts.add("harness", rollouts)
  rewards = [[revision.reward for revision in revisions] for revisions in all_revisions]
  samples, kept_groups = samples_lib.group_samples(prompts, completions, rewards,
                                      run.loop.advantage_normalization,
                                      run.loop.filter_zero_advantage)
  result = proposer.policy.train(samples, "grpo")
  history = result.history
  flat = [revision for revisions in all_revisions for revision in revisions]
  prompt_tokens = sum(len(prompt) for prompt in prompts)
  completion_tokens = sum(len(c.token_ids) for group in completions for c in group)
  notes = _notes(run)
  notes.proposer_prompt_tokens += prompt_tokens
  notes.proposer_completion_tokens += completion_tokens
  metrics = {"grpo_step": step, "reward": float(np.mean(rewards)),
             "score": float(np.mean([r.score for r in flat])),
             "parse_rate": float(np.mean([r.parsed for r in flat])),
             "apply_rate": float(np.mean([r.applied for r in flat])),
             "runnable_rate": float(np.mean([r.runnable for r in flat])),
             "kept_groups": kept_groups, "samples": result.num_samples,
             "dropped_samples": result.num_dropped, "optimizer_steps": len(history),
             "proposer_updates": proposer.policy.num_updates,
             "proposer_prompt_tokens": prompt_tokens,
             "proposer_completion_tokens": completion_tokens}
  if history:
    metrics["loss"] = float(np.mean([h["loss"] for h in history]))
  run.log.log("proposer", run.counts.training, kind="grpo", **metrics)
  return metrics


# ---- Test-time adaptation -----------------------------------------------------------------

def adapt(run, hl_config, proposer, stage, rule):
  """Test-time adaptation of run.domain's seed harness under one selection rule; returns its
  loop.AdaptationState in run.state (current harness, its scoring mean, rounds, test mean)."""
  label = f"{stage}_{rule}"
  state = _notes(run).adaptation.setdefault(
      label, loop.AdaptationState(current=run.domain.seed_harness))
  rounds, num_candidates = {
      "strict": (hl_config.strict_rounds, 1),
      "best_of": (hl_config.best_of_rounds, hl_config.best_of_candidates),
      "oracle": (1, hl_config.best_of_candidates),
      "single_step": (1, hl_config.single_step_candidates)}[rule]
  on_test = rule in ("oracle", "single_step")
  scoring = run.splits["harness"]
  evaluate = _evaluate(run, run.domain)
  seed = run.loop.seed
  shared = hl_config.adaptation_diagnostic_size == 0
  while state.round < rounds:
    index = state.round
    diagnostic = scoring
    if not shared:
      pool = run.splits["validation"]
      draw = seeds_lib.derive_seed(seed, "diagnostic_draw", label, index)
      order = np.random.default_rng(draw).permutation(len(pool))
      diagnostic = [pool[i] for i in order[:hl_config.adaptation_diagnostic_size]]
    directory = _directory(run, f"adapt_{label}", f"round_{index:03d}")
    report = None
    if shared and state.report is not None:
      report = revision_lib.archived_evaluation(
          os.path.join(run.workdir, state.report[0]), state.report[1], loop.hosts_of(run))
    context, archive, report = revision_lib.revision_context(
        directory, run.domain, state.current, diagnostic, evaluate, seed, index + 2,
        hl_config.context_budget_tokens, proposer.tokenizer, hl_config.kind,
        hl_config.rewards, report=report, search_answers=hl_config.search_answers,
        held_out=held_out(run.domain), hosts=loop.hosts_of(run))
    rollouts = report.rollouts
    if state.current_score is None:
      if shared:
        state.current_score = report.success_rate
      else:
        keys = search_evaluation.sample_keys(scoring, seed)
        baseline = search_evaluation.as_evaluation(
            evaluate(Harness(state.current), scoring, keys), scoring, keys)
        rollouts += baseline.rollouts
        state.current_score = baseline.success_rate
    prompt, future = _submit(run, proposer, context, num_candidates, ("adapt", label, index))
    completions = future.result()
    revisions, used = revision_lib.judge_replies(
        [c.text for c in completions], hl_config.kind, state.current, run.domain, scoring,
        evaluate, seed, archive, hl_config.rewards,
        [proposer.policy.weights_id] * len(completions), loop.hosts_of(run))
    run.counts.add("harness", rollouts + used)
    chosen = None if on_test else revision_lib.select(rule, revisions, state.current_score)
    if on_test:
      state.test_candidates = [(r.candidate_id, r.source) for r in revisions if r.runnable]
    relative = os.path.relpath(directory, run.workdir)
    previous_score = state.current_score
    if chosen is not None:
      state.current, state.current_score = chosen.source, chosen.score
      state.report = (relative, chosen.candidate_id)
    else:
      state.report = (relative, "c0000")
    state.history.append(loop.AdaptationRound(
        round=index, kept=chosen.candidate_id if chosen else None,
        scores=[r.score for r in revisions], current_score=state.current_score))
    completion_tokens = sum(len(c.token_ids) for c in completions)
    _notes(run).proposer_prompt_tokens += len(prompt)
    _notes(run).proposer_completion_tokens += completion_tokens
    run.log.log("harness", run.counts.training, kind="adaptation", label=label, round=index,
                previous_score=previous_score, current_score=state.current_score,
                changed=chosen is not None, candidates=len(revisions),
                runnable=sum(r.runnable for r in revisions),
                best_candidate_score=max((r.score for r in revisions), default=0.0),
                proposer_prompt_tokens=len(prompt), proposer_completion_tokens=completion_tokens)
    state.round += 1
    save(run, proposer)
  if on_test and state.harness_hash is None:
    _evaluate_candidates_on_test(run, proposer, state, label, rule)
  if state.harness_hash is None:  # not yet evaluated
    harness = Harness(state.current, origin="adapted")
    record = loop.evaluate_test(run, harness, label=f"adapted_{label}")
    state.test_mean, state.harness_hash = record["test_mean"], harness.hash
    save(run, proposer)
  return state


def evaluate_fixed_harnesses(run, hl_config):
  """{name: test mean} of the fixed_harnesses, each evaluated on test as it is."""
  return {name: loop.evaluate_test(run, Harness(seed_harnesses.source(name), origin="fixed"),
                                   label=f"fixed_{name}")["test_mean"]
          for name in hl_config.fixed_harnesses}


def _evaluate_candidates_on_test(run, proposer, state, label, rule):
  """The oracle and single_step protocols' test evaluations (adapt's docstring): each
  runnable candidate's test mean (resumable: saved after each), then the protocol's number."""
  for candidate_id, source in state.test_candidates:
    if candidate_id not in state.candidate_test_means:
      record = loop.evaluate_test(run, Harness(source, origin="adapted"),
                                  label=f"{label}_{candidate_id}")
      state.candidate_test_means[candidate_id] = record["test_mean"]
      save(run, proposer)
  means = state.candidate_test_means
  seed = next((r["test_mean"] for r in run.state.evaluations if r["label"] == "seed"), None)
  num_candidates = len(state.history[0].scores) if state.history else 0
  if rule == "single_step":
    state.test_mean = sum(means.values()) / max(num_candidates, 1)
    state.harness_hash = ""
    run.log.log("harness", run.counts.training, kind="single_step", label=label,
                candidates=num_candidates, runnable=len(means), single_step_mean=state.test_mean,
                beat_seed=(sum(mean > seed for mean in means.values()) / max(num_candidates, 1)
                           if seed is not None else -1.0))
  elif means:  # oracle: the best by test mean, the first of equals
    best = max(state.test_candidates, key=lambda item: means[item[0]])
    state.current, state.test_mean = best[1], means[best[0]]
    state.harness_hash = Harness(best[1]).hash
  save(run, proposer)


# ---- The recipe ---------------------------------------------------------------------------

def run_harness_learning(run, hl_config, solver_training, domain_section):
  """Runs (or resumes) Harness Learning; returns the run summary.

  Args:
    run: the Run (its policy is the frozen solver).
    hl_config: options.HarnessLearningConfig (config.harness_learning).
    solver_training: config.training, the proposer's training options when
      hl_config.proposer_training is empty.
    domain_section: config.domain (a tasks/registry.DomainSection), whose seed and
      split_sizes build the training domains given by name.
  """
  proposer = build_proposer(run, hl_config, solver_training)
  try:
    restore_proposer(run, proposer)
    return _run_phases(run, hl_config, proposer, domain_section)
  finally:
    proposer.close()


def _run_phases(run, hl_config, proposer, domain_section):
  state = run.state
  sequence = phases(hl_config)
  if state.phase == "start":
    loop.evaluate_test(run, Harness(run.domain.seed_harness, origin="seed"), label="seed")
    evaluate_fixed_harnesses(run, hl_config)
    loop.start_phase(run, sequence[0] if sequence else "done")
    save(run, proposer)
  while state.phase != "done":
    phase = state.phase
    if phase == "demonstrations":
      teachers = [hosts.on_host_zero(builders.build_proposer(section, run.policy,
                                                             run.tokenizer))
                  for section in hl_config.teachers]
      collect_demonstrations(run, hl_config, proposer, teachers,
                             training_domains(run, domain_section, hl_config.sft_domains))
    elif phase == "sft":
      sft(run, hl_config, proposer, read_demonstrations(run))
    elif phase == "grpo":
      domains = training_domains(run, domain_section, hl_config.grpo_domains)
      progress = tqdm.tqdm(total=hl_config.grpo_steps, initial=state.phase_steps,
                           desc="proposer GRPO", disable=not run.show_progress, leave=False)
      while state.phase_steps < hl_config.grpo_steps:
        grpo_step(run, hl_config, proposer, domains, state.phase_steps)
        state.phase_steps += 1
        progress.update(1)
        if state.phase_steps % run.loop.checkpoint_every_steps == 0:
          save(run, proposer)
      progress.close()
    elif phase.startswith("adapt_"):
      for rule in hl_config.selection_rules:
        adapt(run, hl_config, proposer, phase[len("adapt_"):], rule)
    else:
      raise ValueError(f"run.state.phase={phase!r} is not a Harness Learning phase "
                       f"({sequence}); was this workdir written by another recipe?")
    following = sequence.index(phase) + 1
    loop.start_phase(run, sequence[following] if following < len(sequence) else "done")
    save(run, proposer)
  return finish(run, hl_config, proposer)


def finish(run, hl_config, proposer):
  """Marks the run done; the incumbent is the harness adapted after the last stage under the
  first selection rule. Returns the summary (with every adaptation's record)."""
  adaptation = _notes(run).adaptation
  primary = None
  if hl_config.adapt_stages and hl_config.selection_rules:
    last_stage = max(hl_config.adapt_stages, key=STAGES.index)
    primary = f"{last_stage}_{hl_config.selection_rules[0]}"
  if primary in adaptation:
    loop.set_incumbent(run, Harness(adaptation[primary].current))
  run.state.done = True
  run.state.phase = "done"
  save(run, proposer)
  result = loop.summary(run, "harness_learning")
  notes = _notes(run)
  result["adaptation"] = {
      label: {"test_mean": record.test_mean, "scoring_mean": record.current_score,
              "harness_hash": record.harness_hash, "rounds": len(record.history),
              "changes": sum(entry.kept is not None for entry in record.history)}
      for label, record in adaptation.items()}
  if primary in adaptation:
    result["final_test_mean"] = adaptation[primary].test_mean
  result["fixed_harnesses"] = {
      record["label"][len("fixed_"):]: record["test_mean"]
      for record in run.state.evaluations if record["label"].startswith("fixed_")}
  result.update(demonstrations=notes.demonstrations,
                proposer_updates=proposer.policy.num_updates,
                proposer_prompt_tokens=notes.proposer_prompt_tokens,
                proposer_completion_tokens=notes.proposer_completion_tokens)
  run.log.write_summary(result)
  return result
