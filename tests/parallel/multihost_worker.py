"""One process of a jax.distributed run on localhost (see test_distributed.py).

  python tests/parallel/multihost_worker.py PORT PROCESS_ID NUM_PROCESSES OUT_JSON [EXTRA]

The processes share 4 CPU devices (4 / NUM_PROCESSES each). Each runs the preflight checks,
broadcasts host 0's text, takes one sharded RSFT train step of a tiny model on a
(data=2, fsdp=2) mesh spanning all processes, and samples greedily from the updated weights
for its share of the prompts (every host serves its own episodes with its own sampler).
Results go to OUT_JSON; NUM_PROCESSES=1 gives the single-process reference. With EXTRA (a
fingerprint text for the preflight check) only the preflight and broadcast run. With EXTRA
"recipe=WORKDIR" the process runs the tiny WHALE recipe (tests/algorithms/tiny.py) through
experiment.run on a mesh over all processes' devices instead, and reports its summary and how
many episodes this host ran; "vace=WORKDIR" the tiny VACE recipe, "hl=WORKDIR" Harness
Learning's smoke config (configs/harness_learning.py:smoke), likewise.
"""
import hashlib
import json
import os
import pathlib
import re
import sys

NUM_DEVICES = 4
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = ("--xla_force_host_platform_device_count="
                           f"{NUM_DEVICES // int(sys.argv[3])}")

import jax  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
import numpy as np  # noqa: E402

from whale_jax.models import ModelConfig  # noqa: E402
from whale_jax.models import decoder  # noqa: E402
from whale_jax.parallel import distributed  # noqa: E402
from whale_jax.parallel import mesh as mesh_lib  # noqa: E402
from whale_jax.parallel import rules  # noqa: E402
from whale_jax.sampling import Sampler  # noqa: E402
from whale_jax.sampling import SamplingParams  # noqa: E402
from whale_jax.train import optimizer as optimizer_lib  # noqa: E402
from whale_jax.train import packing  # noqa: E402
from whale_jax.train import rsft  # noqa: E402
from whale_jax.train import step as step_lib  # noqa: E402
from whale_jax.train import train_state  # noqa: E402

CONFIG = ModelConfig(vocab_size=64, num_layers=2, embed_dim=32, mlp_dim=64, num_heads=4,
                     num_kv_heads=2, head_dim=8, rope_theta=10_000.0)
NUM_PROMPTS = 4


def main():
  port, process_id, num_processes, out_path = sys.argv[1:5]
  extra = sys.argv[5] if len(sys.argv) > 5 else ""
  num_processes = int(num_processes)
  if num_processes > 1:
    distributed.initialize(f"127.0.0.1:{port}", num_processes, int(process_id),
                           timeout_seconds=60)
  result = {"process_index": jax.process_index(), "process_count": jax.process_count(),
            "device_count": jax.device_count()}
  try:
    distributed.preflight(mesh_shape={"data": NUM_DEVICES}, expected_processes=num_processes,
                          extra_fingerprint=extra)
    result["preflight"] = "ok"
  except RuntimeError as error:
    result["preflight"] = str(error)
  if extra.split("=")[0] in ("recipe", "vace", "hl"):
    recipe, workdir = extra.split("=", 1)
    result.update(run_recipe(workdir, {"recipe": "whale", "vace": "vace",
                                       "hl": "harness_learning"}[recipe]))
    _finish(result, out_path, num_processes)
    return
  if extra == "policy":
    result.update(run_policy())
    _finish(result, out_path, num_processes)
    return
  if extra == "handoff":
    result.update(run_handoff())
    _finish(result, out_path, num_processes)
    return
  result["broadcast"] = distributed.broadcast_text(f"harness from host {jax.process_index()}")
  if extra:  # a preflight-only run
    _finish(result, out_path, num_processes)
    return

  # A sharded train step over all processes' devices, on the same global batch everywhere.
  params = jax.tree.map(np.asarray, decoder.init_params(CONFIG, jax.random.key(0)))
  mesh = mesh_lib.make_mesh(data=2, fsdp=2)
  optimizer = optimizer_lib.make(optimizer_lib.OptimizerConfig(learning_rate=1e-2))
  state = train_state.create(CONFIG, params, optimizer, mesh, rules.TRAIN_RULES)
  rng = np.random.default_rng(0)
  samples = [packing.Sample(rng.integers(0, CONFIG.vocab_size, 12),
                            np.r_[np.zeros(6), np.ones(6)]) for _ in range(8)]
  batch, _ = packing.pack(samples, 24, num_rows=4)
  step = step_lib.make_train_step(CONFIG, rsft.loss, optimizer, mesh)
  state, metrics = step(state, batch)
  result["loss"] = float(metrics["loss"])
  updated = jax.tree.map(lambda x: np.asarray(multihost_utils.process_allgather(x, tiled=True)),
                         state["params"])
  result["updated_params"] = {"/".join(str(k.key) for k in path): value.tolist()
                              for path, value in jax.tree_util.tree_leaves_with_path(updated)}

  # Each host samples for its share of the prompts from the updated weights (local devices).
  prompts = [list(rng.integers(0, CONFIG.vocab_size, 5 + i)) for i in range(NUM_PROMPTS)]
  mine = list(range(jax.process_index(), NUM_PROMPTS, jax.process_count()))
  sampler = Sampler(CONFIG, updated)
  completions = sampler.generate([prompts[i] for i in mine],
                                 SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True),
                                 request_keys=mine)
  sampler.close()
  result["generated"] = {str(i): [int(t) for t in c.token_ids]
                         for i, c in zip(mine, completions)}
  _finish(result, out_path, num_processes)


NUM_EPISODES = 10


def run_policy():
  """Policy.train on a (data=2, fsdp=2) mesh, each host holding the samples of its own
  episodes (episode g on host g % 3 % P: uneven shares, one host with none of some
  minibatches): two RSFT epochs of 3-episode minibatches, then a GRPO update (2 PPO epochs,
  2 minibatches, a KL to the kept reference). One process holds every sample."""
  from whale_jax.algorithms import options  # pylint: disable=g-import-not-at-top
  from whale_jax.algorithms import policy as policy_lib  # pylint: disable=g-import-not-at-top
  from whale_jax.algorithms import samples as samples_lib  # pylint: disable=g-import-not-at-top
  params = jax.tree.map(np.asarray, decoder.init_params(CONFIG, jax.random.key(0)))
  mesh = mesh_lib.make_mesh(data=2, fsdp=2)
  policy = policy_lib.Policy(CONFIG, params, None, mesh, options.PolicyConfig(
      optimizer=dict(learning_rate=1e-2), row_length=32, samples_per_step=3,
      minibatch_unit="trajectory", grpo=dict(ppo_epochs=2, num_minibatches=2, kl_weight=0.1),
      sampler=dict(max_slots=2, max_cache_length=64)))
  rng = np.random.default_rng(1)
  samples, groups = [], []
  for episode in range(NUM_EPISODES):
    for _ in range(1 + episode % 3):
      prompt = rng.integers(1, CONFIG.vocab_size, int(rng.integers(3, 9))).tolist()
      length = 30 if episode == 4 else int(rng.integers(2, 12))  # episode 4: too long
      completion = rng.integers(1, CONFIG.vocab_size, length).tolist()
      samples.append(samples_lib.completion_sample(
          prompt, completion, (-rng.random(length)).tolist(), float(rng.normal())))
      groups.append(episode)
  mine = [i for i, group in enumerate(groups)
          if group % 3 % jax.process_count() == jax.process_index()]
  results = {}
  for loss, epochs in (("rsft", 2), ("grpo", 1)):
    result = policy.train([samples[i] for i in mine], loss, epochs=epochs,
                          groups=[groups[i] for i in mine])
    results[loss] = {"losses": [h["loss"] for h in result.history],
                     "num_samples": result.num_samples, "num_dropped": result.num_dropped}
  updated = jax.tree.map(lambda x: np.asarray(multihost_utils.process_allgather(x, tiled=True)),
                         policy.state["params"])
  policy.close()
  return {"train": results, "policy_params": {
      "/".join(str(k.key) for k in path): value.tolist()
      for path, value in jax.tree_util.tree_leaves_with_path(updated)}}


def run_handoff():
  """Trainer-to-sampler weights under a transfer guard that refuses copies between devices and
  host memory: the handoff (parallel/handoff.py) must pass, gathering through host memory must
  not."""
  from whale_jax.parallel import handoff  # pylint: disable=g-import-not-at-top
  params = jax.tree.map(np.asarray, decoder.init_params(CONFIG, jax.random.key(0)))
  mesh = mesh_lib.make_mesh(data=2, fsdp=2)
  placed = mesh_lib.place(params, decoder.logical_axes(CONFIG), mesh, rules.TRAIN_RULES)
  expected = jax.tree.map(lambda x: np.asarray(multihost_utils.process_allgather(x, tiled=True)),
                          placed)
  to_sampler = handoff.make_handoff(decoder.logical_axes(CONFIG), mesh, rules.SAMPLE_RULES)
  local_mesh = mesh_lib.host_local_mesh(mesh)
  # On CPU, reading a device array into numpy is zero-copy and not counted as a device-to-host
  # transfer; placing numpy on devices is a host-to-device one. Both directions are refused,
  # explicit transfers included; device-to-device ones stay allowed.
  with jax.transfer_guard_device_to_host("disallow_explicit"), \
       jax.transfer_guard_host_to_device("disallow_explicit"):
    local = jax.block_until_ready(to_sampler(placed))
    try:  # the old way: all-gather into host numpy, then place on the local mesh
      gathered = jax.tree.map(
          lambda x: np.asarray(multihost_utils.process_allgather(x, tiled=True)), placed)
      mesh_lib.place(gathered, decoder.logical_axes(CONFIG), local_mesh, rules.SAMPLE_RULES)
      gather_error = ""
    except Exception as error:  # pylint: disable=broad-except
      gather_error = f"{type(error).__name__}: {error}"[:300]
  shardings = jax.tree.leaves(jax.tree.map(lambda x: x.sharding, local))
  held, before = handoff.handoff_bytes_per_chip(
      jax.eval_shape(lambda: params), decoder.logical_axes(CONFIG), mesh, rules.TRAIN_RULES,
      rules.SAMPLE_RULES)
  return {"handoff_equal": all(np.array_equal(np.asarray(a), b) for a, b in zip(
              jax.tree.leaves(local), jax.tree.leaves(expected))),
          "on_local_mesh": all(s.mesh.devices.tolist() == local_mesh.devices.tolist()
                               for s in shardings),
          "local_devices_only": all(d.process_index == jax.process_index()
                                    for x in jax.tree.leaves(local) for d in x.devices()),
          "gather_error": gather_error, "bytes_held": held, "bytes_before": before}


def run_recipe(workdir, recipe="whale"):
  """A tiny recipe (WHALE, VACE or Harness Learning) on a (data=2, fsdp=2) mesh; its summary,
  this host's episodes and verify calls, the bytes it passed to all-gathers, and, on host 0,
  how many of the markers host 1 planted in its episodes' stdout host 0 reads back: in its
  archive view and the folder a CLI agent is given (WHALE: the harness search's traces;
  Harness Learning: every revision's archive) or in the VACE block files (all from the
  shards); for Harness Learning also the markers in the proposer contexts each host built."""
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
  from configs import harness_learning as harness_learning_configs  # pylint: disable=g-import-not-at-top
  from tests.algorithms import tiny  # pylint: disable=g-import-not-at-top
  from whale_jax.algorithms import experiment  # pylint: disable=g-import-not-at-top
  from whale_jax.algorithms import hosts  # pylint: disable=g-import-not-at-top
  from whale_jax.harness import trajectory as trajectory_lib  # pylint: disable=g-import-not-at-top
  from whale_jax.search import archive as archive_lib  # pylint: disable=g-import-not-at-top
  from whale_jax.search import archive_view  # pylint: disable=g-import-not-at-top
  from whale_jax.search import revision as revision_lib  # pylint: disable=g-import-not-at-top
  from whale_jax.tasks import domain as domain_lib  # pylint: disable=g-import-not-at-top

  counters = {"verified": 0, "gathers": 0, "gathered_bytes": 0, "episode_gathers": 0,
              "episode_bytes": 0, "planted": 0, "context_markers": [], "contexts": [], "planted_markers": []}
  revision_context = revision_lib.revision_context

  def watched_context(*args, **kwargs):
    context, archive, report = revision_context(*args, **kwargs)
    text = "".join(str(m["content"]) for m in context.messages)
    counters["context_markers"] += re.findall(r"MARKER-[0-9a-f]+-\d+", text)
    counters["contexts"].append(hashlib.sha256(text.encode()).hexdigest()[:12])
    return context, archive, report

  revision_lib.revision_context = watched_context
  verify_episodes = domain_lib.verify_episodes

  def counting_verify(domain, instances, answers, trajectories):
    instances = list(instances)
    counters["verified"] += len(instances)
    return verify_episodes(domain, instances, answers, trajectories)

  domain_lib.verify_episodes = counting_verify
  allgather_texts = distributed.allgather_texts

  def counting_allgather(text):
    counters["gathers"] += 1
    counters["gathered_bytes"] += len(text.encode("utf-8"))
    if text.startswith('{"digest"'):  # the collector's numbers (rollouts/collector.py)
      counters["episode_gathers"] += 1
      counters["episode_bytes"] += len(text.encode("utf-8"))
    return allgather_texts(text)

  distributed.allgather_texts = counting_allgather
  runs = []
  build_run = experiment.build_run

  def build_and_watch(*args, **kwargs):
    run = build_run(*args, **kwargs)
    runs.append(run)
    # WHALE, VACE: a marker in the stdout of every episode host 1 runs. Harness Learning:
    # every host (one process too) marks the replies of every episode it runs with the
    # episode's harness and seed, which the execution reports show: the same text whichever
    # host ran it, so 1 and 2 processes build the same proposer contexts.
    if jax.process_index() == 1 or recipe == "harness_learning":
      inner = hosts.local_runtime(run.runtime)
      run_many = inner.run_many

      def planted(batches):
        batches = [(harness, list(episodes)) for harness, episodes in batches]
        results = run_many(batches)
        for (harness, episodes), batch in zip(batches, results):
          for episode, trajectory in zip(episodes, batch):
            if recipe == "harness_learning":
              marker = f"MARKER-{harness.hash[:8]}-{episode.sampling.seed}"
              counters["planted_markers"].append(marker)
              for call in trajectory.calls:
                for completion in call.completions:
                  completion.text += f" {marker}"
            else:
              trajectory.stdout += f" MARKER-host1-{trajectory.task_id}"
            counters["planted"] += 1
        return results

      inner.run_many = planted
    return run

  experiment.build_run = build_and_watch
  if recipe == "harness_learning":
    config = harness_learning_configs.get_config("smoke")
    # room in the proposer's context for the execution report's episodes (smoke's budget
    # leaves none for them; byte tokens)
    config.harness_learning.context_budget_tokens = 5000
    config.harness_learning.proposer_training.row_length = 6144
    config.harness_learning.proposer_training.sampler.max_cache_length = 6144
  else:
    config = tiny.tiny_config(recipe)
  config.mesh = dict(data=2, fsdp=2)
  summary = experiment.run(config, workdir, show_progress=False)
  (run,) = runs
  sharded = isinstance(run.runtime, hosts.ShardedRuntime)
  found = folder_found = 0
  folder_markers = set()
  archives = sorted(pathlib.Path(workdir, "archive").glob("*"))
  if recipe == "harness_learning":
    archives = sorted(path.parent for path in  # the adaptation rounds' (run.domain's tasks)
                      pathlib.Path(workdir, "harness_learning").glob("adapt_*/*/candidates"))
  if jax.process_index() == 0 and recipe == "vace":
    steps = {str(path).split(".host_")[0] + ".jsonl.gz"
             for path in pathlib.Path(workdir, "vace").glob("cycle_*/step_*.jsonl.gz")}
    for path in sorted(steps):
      found += sum("MARKER-host1" in record["trajectory"].stdout
                   for record in trajectory_lib.read_shards(path))
  elif jax.process_index() == 0:
    for directory in archives:
      view = archive_view.build_view(archive_lib.Archive(directory), "d", "description",
                                     run.splits["harness"] + run.splits["validation"])
      found += len(view.grep("MARKER-host1"))
      folder = pathlib.Path(workdir, "cli_folder", *directory.relative_to(workdir).parts)
      view.write_to(str(folder))  # what a CLI coding agent is given
      for path in folder.rglob("*"):
        if path.is_file():
          folder_markers.update(re.findall(r"MARKER-[0-9a-f]+-\d+",
                                           path.read_text(errors="replace")))
      folder_found += sum(path.read_text(errors="replace").count("MARKER-host1")
                          for path in folder.rglob("*") if path.is_file())
  return {"summary": summary, "sharded": sharded, "archives": len(archives),
          "local_episodes": run.runtime.local_episodes if sharded else None,
          "marker_found": found, "folder_marker_found": folder_found,
          "folder_markers": sorted(folder_markers), **counters}


def _finish(result, out_path, num_processes):
  with open(out_path, "w") as f:
    json.dump(result, f)
  if num_processes > 1:
    jax.distributed.shutdown()


if __name__ == "__main__":
  main()
