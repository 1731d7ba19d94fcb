r"""Agentic rollout throughput: multi-turn episodes through the harness runtime, four backends.

  python bench/agentic_throughput.py                         # ~100M model, 2 questions x G=8
  python bench/agentic_throughput.py --model=small --questions=1 --turns=3
  python bench/agentic_throughput.py --sampler_settings=explicit --warmup_max_length=2048 \
      --questions=1 --turns=6 --torch_threads=1     # docs/benchmarks.md's settings

Episodes of the synthetic multi-hop QA domain (whale_jax/tasks/qa/generator.py) run in the
real harness runtime (sandboxed workers, one per episode in flight) with a harness that
searches the corpus (local BM25, top passages of a few hundred tokens) after each reply and
asks again, for --turns model calls per episode; every call sends the whole conversation so
far. G = --group episodes share each question (as GRPO's group does), with different seeds.
The same episodes are served, one backend after the other in one process, by:
  whale_jax with prefix sharing (the engine's prefix cache, default settings: prefilled
    blocks only, bitwise the uncached engine's results),
  whale_jax with prefix sharing that also caches completion blocks (backend
    cached_completions: prefix_cache_completions=True, within ~2e-6 of uncached),
  whale_jax without it (prefix_cache_bytes=0, share_identical_prompts=False: every call
    prefills its whole prompt), and
  transformers `generate` (a backend that batches the calls waiting at that moment into one
    left-padded generate call; torch threads: the faster of --torch_threads on a probe).
Reported per backend: episodes/s, generated tokens/s, prompt positions computed vs served
from the cache, slot occupancy (whale_jax) or mean rows per generate call (transformers), and
the load average. Each whale_jax engine is built with --sampler_settings:
  defaults  Sampler(config, params, tokenizer=...) plus only what defines the backend
            (cached_completions, uncached: above); warmed up by one untimed pass of as many
            episodes on the next --questions questions (other prompts; the prefix cache is
            emptied after it), so it compiles what that pass meets;
  explicit  the older settings (docs/benchmarks.md): max_slots = min_slots = the episodes
            (one slot batch shape), steps_per_call=--steps_per_call, max_cache_length=4096,
            and Engine.warm_up over that slot batch and every cache length bucket from the
            shortest first prompt to --warmup_max_length.
The timed part then counts XLA backend compilations (jax.monitoring events, independent of
the engine's own counter), ideally zero. Each call generates exactly --max_tokens tokens
(ignore_eos), so every backend does the same decode work; the model is a random Qwen3
checkpoint (bench/sampler_throughput.py builds them the same way) with the byte tokenizer's
vocabulary.
"""
import concurrent.futures
import json
import os

if "--xla_single_thread" in os.sys.argv or "--xla_single_thread=true" in os.sys.argv:
  # Before jax starts: XLA's CPU ops on one thread (an oversubscribed machine punishes
  # multi-threaded ops, as it does torch's: see the thread probe).
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_cpu_multi_thread_eigen=false"
                             " intra_op_parallelism_threads=1").strip()
import queue
import statistics
import sys
import tempfile
import threading
import time

from absl import app
from absl import flags
import jax
import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
# pylint: disable=g-import-not-at-top,wrong-import-position
from whale_jax.harness import program
from whale_jax.harness import runtime as runtime_lib
from whale_jax.models import hf
from whale_jax.sampling import Sampler
from whale_jax.sampling import SamplingParams
from whale_jax.sampling import api
from whale_jax.tasks.qa import generator as synthetic_qa
from whale_jax.tasks.qa import retrieval
from whale_jax.tokenization import load_tokenizer

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "large", ["small", "large"], "small (~3M) or large (~100M).")
flags.DEFINE_integer("questions", 2, "Questions; each is run by --group episodes.")
flags.DEFINE_integer("group", 8, "Episodes per question (G).")
flags.DEFINE_integer("turns", 4, "Model calls per episode (a search between two calls).")
flags.DEFINE_integer("max_tokens", 24, "Tokens generated per call.")
flags.DEFINE_integer("topk", 2, "Passages per search.")
flags.DEFINE_list("backends", ["cached", "uncached", "transformers"], "Backends to run: "
                  "cached, cached_completions, uncached, transformers.")
flags.DEFINE_enum("sampler_settings", "defaults", ["defaults", "explicit"], "defaults: "
                  "the Sampler's own settings, warmed up by an untimed pass on other "
                  "questions; explicit: the older fixed slot batch, --steps_per_call and "
                  "Engine.warm_up (see the module docstring).")
flags.DEFINE_integer("steps_per_call", 4, "--sampler_settings=explicit: the engine's decode "
                     "steps per device call (a call arriving during a decode call waits for "
                     "it to end).")
flags.DEFINE_list("torch_threads", ["1", "2"], "Thread counts probed for transformers.")
flags.DEFINE_string("dtype", "float32", "whale_jax weights and compute dtype.")
flags.DEFINE_string("json_out", "", "Optional path for the results as JSON.")
flags.DEFINE_bool("xla_single_thread", False, "Run XLA's CPU ops on one thread (read before "
                  "jax starts).")
flags.DEFINE_integer("warmup_max_length", 0, "--sampler_settings=explicit: longest cache "
                     "length the engine warm-up "
                     "compiles for (0: estimated from the first prompts, --turns, "
                     "--max_tokens and 600 tokens per tool output).")

CONFIGS = {  # Qwen3 shapes over the byte tokenizer's 267 ids.
    "small": dict(vocab_size=267, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64),
    "large": dict(vocab_size=267, hidden_size=768, intermediate_size=3072,
                  num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                  head_dim=64),
}

HARNESS = '''
import json

def run(task, llm, tools):
  messages = [{"role": "system", "content": "Answer factual questions. Search the corpus "
               "first, read the passages, and search again if they do not settle it."},
              {"role": "user", "content": "Question: " + task["question"]}]
  queries = [task["question"], task["question"] + " city country founded",
             task["question"] + " company born works"]
  reply = ""
  for turn in range(task["turns"]):
    reply = llm.chat(messages)
    messages.append({"role": "assistant", "content": reply})
    if turn == task["turns"] - 1:
      break
    result = tools.search(queries[turn % len(queries)])
    messages.append({"role": "user",
                     "content": "<tool_response>" + json.dumps(result) + "</tool_response>"})
  return reply
'''


class TransformersBackend:
  """An LLM backend over transformers `generate`: the calls waiting when a generate call starts
  are batched (left-padded) into it, up to max_batch."""

  def __init__(self, model, max_batch=64):
    self.model, self.max_batch = model, max_batch
    self._queue = queue.SimpleQueue()
    self.calls = self.rows = self.generated_tokens = self.prompt_tokens = 0
    self._thread = threading.Thread(target=self._serve, daemon=True)
    self._thread.start()

  def submit(self, prompt_ids, params):
    future = concurrent.futures.Future()
    self._queue.put((list(prompt_ids), params, future))
    return future

  def generate(self, prompts, params):
    futures = [self.submit(p, params) for p in prompts]
    return [c for f in futures for c in f.result()]

  def close(self):
    self._queue.put(None)
    self._thread.join()

  def _serve(self):
    while True:
      batch = [self._queue.get()]
      time.sleep(0.005)  # let calls sent together arrive
      while len(batch) < self.max_batch:
        try:
          batch.append(self._queue.get_nowait())
        except queue.Empty:
          break
      if any(item is None for item in batch):
        return
      try:
        self._generate(batch)
      except Exception as error:  # pylint: disable=broad-except
        for _, _, future in batch:
          future.set_exception(error)

  def _generate(self, batch):
    rows = [(prompt, params, future) for prompt, params, future in batch
            for _ in range(params.n)]
    width = max(len(prompt) for prompt, _, _ in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, (prompt, _, _) in enumerate(rows):
      ids[row, width - len(prompt):] = torch.tensor(prompt)
      mask[row, width - len(prompt):] = 1
    new_tokens = max(params.max_tokens for _, params, _ in rows)
    with torch.no_grad():
      out = self.model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                temperature=1.0, top_k=0, top_p=1.0,
                                max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                eos_token_id=None, pad_token_id=0, output_scores=True,
                                return_dict_in_generate=True)
    tokens = out.sequences[:, width:]
    logprobs = torch.stack([torch.log_softmax(s.float(), -1) for s in out.scores], 1)
    picked = torch.gather(logprobs, 2, tokens[:, :, None])[:, :, 0]
    self.calls += 1
    self.rows += len(rows)
    self.generated_tokens += tokens.numel()
    self.prompt_tokens += sum(len(prompt) for prompt, _, _ in rows)
    results = {}
    for row, (prompt, params, future) in enumerate(rows):
      count = params.max_tokens
      results.setdefault(id(future), (future, []))[1].append(api.Completion(
          tokens[row, :count].tolist(), picked[row, :count].tolist(), "", "length", prompt))
    for future, completions in results.values():
      future.set_result(completions)


def build_checkpoint(directory):
  config = transformers.Qwen3Config(**CONFIGS[FLAGS.model], tie_word_embeddings=True,
                                    rms_norm_eps=1e-6, max_position_embeddings=4096,
                                    bos_token_id=1, eos_token_id=2, pad_token_id=0)
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
  model.save_pretrained(directory, safe_serialization=True)
  return model


def make_episodes(first_question=0, seed_offset=0):
  corpus, questions = synthetic_qa.generate_world(seed=0)
  retriever = retrieval.BM25Retriever(corpus)

  def search(query):
    return retrieval.format_passages(retriever([query], topk=FLAGS.topk)[0])

  two_hop = [q for q in questions if q["hops"] == 2][first_question:][:FLAGS.questions]
  return [runtime_lib.Episode(
      task_id=question["id"], task={"question": question["question"], "turns": FLAGS.turns},
      tools={"search": search},
      sampling=SamplingParams(max_tokens=FLAGS.max_tokens, temperature=1.0,
                              seed=seed_offset + g, ignore_eos=True))
          for question in two_hop for g in range(FLAGS.group)]


def run_episodes(backend, tokenizer, episodes):
  harness = program.Harness(HARNESS, origin="bench")
  with runtime_lib.HarnessRuntime(backend, tokenizer, num_workers=len(episodes),
                                  timeout_seconds=600.0, backend_timeout_seconds=1200.0,
                                  allow_weak_sandbox=True) as runtime:
    start = time.perf_counter()
    trajectories = runtime.run_episodes(harness, episodes)
    elapsed = time.perf_counter() - start
  bad = [t.outcome for t in trajectories if t.outcome != "ok"]
  if bad:
    raise RuntimeError(f"{len(bad)} episodes did not finish ok: {bad[:3]} "
                       f"{[t.error for t in trajectories if t.outcome != 'ok'][:1]}")
  calls = [call for t in trajectories for call in t.calls]
  return elapsed, calls


BACKENDS = ("cached", "cached_completions", "uncached", "transformers")


def main(_):
  unknown = [name for name in FLAGS.backends if name not in BACKENDS]
  if unknown:
    raise app.UsageError(f"--backends: unknown {unknown}; choose from {', '.join(BACKENDS)}.")
  tokenizer = load_tokenizer("byte")
  episodes = make_episodes()
  warmup_episodes = make_episodes(first_question=FLAGS.questions, seed_offset=FLAGS.group)
  rows = []

  def emit(row):
    rows.append(row)
    print(json.dumps(row), flush=True)
    if FLAGS.json_out:
      with open(FLAGS.json_out + ".tmp", "w") as f:
        json.dump(rows, f, indent=2)
      os.replace(FLAGS.json_out + ".tmp", FLAGS.json_out)

  emit(dict(model=FLAGS.model, xla_single_thread=FLAGS.xla_single_thread,
            sampler_settings=FLAGS.sampler_settings,
            episodes=len(episodes), questions=FLAGS.questions,
            group=FLAGS.group, turns=FLAGS.turns, max_tokens=FLAGS.max_tokens,
            topk=FLAGS.topk, cpus=len(os.sched_getaffinity(0))))
  with tempfile.TemporaryDirectory() as directory:
    model = build_checkpoint(directory)
    config, params = hf.load_hf(directory, dtype=FLAGS.dtype)
  first_prompts = [len(tokenizer.apply_chat_template(
      [{"role": "system", "content": "Answer factual questions. Search the corpus first, read "
        "the passages, and search again if they do not settle it."},
       {"role": "user", "content": "Question: " + e.task["question"]}],
      add_generation_prompt=True)) for e in episodes]
  warmup_max = FLAGS.warmup_max_length or min(4096, max(first_prompts) + FLAGS.turns * (
      FLAGS.max_tokens + 16) + (FLAGS.turns - 1) * 600)
  compiles = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, duration, **kwargs: compiles.append(kwargs.get("fun_name"))
      if event == "/jax/core/compile/backend_compile_duration" else None)
  for name in FLAGS.backends:
    if name == "transformers":
      probe = {}
      for threads in (int(t) for t in FLAGS.torch_threads):
        torch.set_num_threads(threads)
        backend = TransformersBackend(model)
        start = time.perf_counter()
        backend.generate([list(range(3, 200))] * FLAGS.group,
                         SamplingParams(max_tokens=FLAGS.max_tokens))
        probe[threads] = time.perf_counter() - start
        backend.close()
      threads = min(probe, key=probe.get)
      torch.set_num_threads(threads)
      backend = TransformersBackend(model)
      elapsed, calls = run_episodes(backend, tokenizer, episodes)
      backend.close()
      computed = backend.prompt_tokens
      extra = dict(torch_threads=threads, probe_seconds={t: round(s, 2) for t, s in probe.items()},
                   mean_rows_per_generate=round(backend.rows / backend.calls, 1),
                   generate_calls=backend.calls)
      saved = 0
    else:
      options = {"cached": {}, "cached_completions": {"prefix_cache_completions": True},
                 "uncached": {"prefix_cache_bytes": 0, "share_identical_prompts": False}}[name]
      slots = len(episodes)  # one slot per episode in flight: one slot batch shape
      if FLAGS.sampler_settings == "explicit":
        options.update(max_slots=slots, min_slots=slots, steps_per_call=FLAGS.steps_per_call,
                       max_cache_length=4096)
      with Sampler(config, params, tokenizer=tokenizer, **options) as sampler:
        start = time.perf_counter()
        if FLAGS.sampler_settings == "explicit":
          warmup_compiles = sampler.warm_up(
              batch_sizes=[slots], min_cache_length=min(first_prompts) - 16,
              max_cache_length=warmup_max)
        else:
          run_episodes(sampler, tokenizer, warmup_episodes)
          warmup_compiles = sampler.metrics()["compilations"]
          # New weights empty the prefix cache (the same arrays in a new tree count as new):
          # the timed pass starts cold, as after warm_up().
          sampler.update_params(jax.tree.map(lambda x: x, params))
        warmup_seconds = time.perf_counter() - start
        before = sampler.metrics()
        del compiles[:]
        elapsed, calls = run_episodes(sampler, tokenizer, episodes)
        timed_compiles = list(compiles)
        after = sampler.metrics()
      computed = after["prefill_tokens"] - before["prefill_tokens"]
      saved = after["prefill_tokens_saved"] - before["prefill_tokens_saved"]
      busy = after["busy_seconds"] - before["busy_seconds"]
      wait = after["device_wait_seconds"] - before["device_wait_seconds"]
      calls_made = after["decode_calls"] - before["decode_calls"]
      extra = dict(sampler_settings=FLAGS.sampler_settings,
                   engine=dict(max_slots=sampler.max_slots, min_slots=sampler.min_slots,
                               steps_per_call=sampler.steps_per_call,
                               max_cache_length=sampler.max_cache_length, **{
                                   k: v for k, v in options.items()
                                   if k not in ("max_slots", "min_slots", "steps_per_call",
                                                "max_cache_length")}),
                   slot_occupancy=round(after["slot_occupancy"], 3),
                   engine_busy_seconds=round(busy, 1),
                   engine_device_wait_seconds=round(wait, 1),
                   engine_host_ms_per_decode_call=round(1000 * (busy - wait) / calls_made, 1),
                   decode_calls=calls_made,
                   warmup_seconds=round(warmup_seconds, 1), warmup_compiles=warmup_compiles,
                   warmup_cache_lengths=([min(first_prompts) - 16, warmup_max]
                                         if FLAGS.sampler_settings == "explicit" else None),
                   backend_compiles_while_timed=len(timed_compiles),
                   backend_compiled_while_timed=sorted(set(timed_compiles)),
                   prefix_cache_evictions=after["prefix_cache_evictions"],
                   compilations_while_timed=after["compilations"] - before["compilations"],
                   compiled_while_timed={
                       k: v - before["compilations_by_function"].get(k, 0)
                       for k, v in after["compilations_by_function"].items()
                       if v != before["compilations_by_function"].get(k, 0)})
    generated = sum(len(c.token_ids) for call in calls for c in call.completions)
    prompts = [len(call.prompt_token_ids) for call in calls]
    emit(dict(backend=name, dtype="float32" if name == "transformers" else FLAGS.dtype,
              seconds=round(elapsed, 1), episodes_per_second=round(len(episodes) / elapsed, 3),
              generated_tokens_per_second=round(generated / elapsed, 1), calls=len(calls),
              generated_tokens=generated, mean_prompt_tokens=round(statistics.mean(prompts)),
              max_prompt_tokens=max(prompts), prefill_tokens_computed=computed,
              prefill_tokens_from_cache=saved, load_average=round(os.getloadavg()[0], 1),
              **extra))
  by_name = {row["backend"]: row for row in rows if "backend" in row}
  ratios = {}
  if "cached" in by_name:
    for other in ("cached_completions", "uncached", "transformers"):
      if other in by_name:
        ratios[f"cached_over_{other}"] = round(by_name["cached"]["episodes_per_second"] /
                                               by_name[other]["episodes_per_second"], 2)
  emit(dict(ratios=ratios))


if __name__ == "__main__":
  app.run(main)
