"""Harness search: proposers, the candidate archive, Meta-Harness search, the validation gate.

  from whale_jax.search import meta_harness, evaluation, edit_library, validation_gate
  evaluate = evaluation.make_evaluate(runtime, domain, sampling, weights_id="step_1200")
  result = meta_harness.search(incoming, evaluate, edit_library.EditLibraryProposer(seed=0),
                               archive_dir, domain=domain, instances=splits["harness"],
                               iterations=6, candidates_per_iteration=3)
  gated = validation_gate.gate_candidate(incumbent, result.accepted, evaluate,
                                         splits["validation"], rule="strict")

Modules: proposal (Proposal, the reply format), edit_library (the offline proposer),
model_proposer (in-process and OpenAI-compatible proposers), context (what a proposer sees,
within a token budget), candidate_check (apply a proposal and check the result), archive (the
candidate directory), evaluation (evaluate functions, sample keys), evaluation_cache,
prompt_only (the FST check), meta_harness (the search), gate (decision rules),
validation_gate (common-random-number evaluation + decision + log).
"""
