"""Two local processes with jax.distributed: preflight, broadcast, a sharded train step and
sampling give the same results as one process."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

WORKER = pathlib.Path(__file__).with_name("multihost_worker.py")


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run_processes(tmp_path, num_processes, extras=None, timeout=300):
  port = _free_port()
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
  procs, outputs = [], []
  for process_id in range(num_processes):
    out = tmp_path / f"out{num_processes}_{process_id}.json"
    outputs.append(out)
    extra = extras[process_id] if extras else ""
    procs.append(subprocess.Popen(
        [sys.executable, str(WORKER), str(port), str(process_id), str(num_processes), str(out),
         extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
  try:
    logs = [p.communicate(timeout=timeout)[0].decode(errors="replace") for p in procs]
  finally:
    for p in procs:  # a process still running here timed out: do not leave it behind
      if p.poll() is None:
        p.kill()
  for p, log in zip(procs, logs):
    assert p.returncode == 0, log[-3000:]
  return [json.loads(out.read_text()) for out in outputs]


@pytest.mark.slow  # two processes compile the train step and sampler: ~2 min on 2 cores
def test_two_processes_compute_like_one(tmp_path):
  (single,) = run_processes(tmp_path, 1)
  results = run_processes(tmp_path, 2)
  generated = {}
  for index, result in enumerate(results):
    assert result["process_index"] == index
    assert result["process_count"] == 2 and result["device_count"] == 4
    assert result["preflight"] == "ok"
    assert result["broadcast"] == "harness from host 0"
    np.testing.assert_allclose(result["loss"], single["loss"], rtol=1e-6)
    for name, value in single["updated_params"].items():
      # Cross-process reductions may sum in another order: allow float32 rounding.
      np.testing.assert_allclose(result["updated_params"][name], value, rtol=1e-5, atol=1e-7,
                                 err_msg=name)
    generated.update(result["generated"])
  assert generated == single["generated"]  # each host sampled its share; together: the same


def test_the_weight_handoff_stays_on_the_devices(tmp_path):
  """Two processes: the trainer-to-sampler handoff runs under a transfer guard that refuses
  transfers between devices and host memory (explicit ones included) and gives each host the
  gathered weights on its own devices; the old way (all-gather into host numpy, then place)
  fails under the same guard."""
  results = run_processes(tmp_path, 2, extras=("handoff", "handoff"))
  for result in results:
    assert result["handoff_equal"] and result["on_local_mesh"] and result["local_devices_only"]
    assert "Disallowed" in result["gather_error"], result["gather_error"]
    # SAMPLE_RULES shard nothing over fsdp and the local mesh has no tensor split here, so a
    # chip holds the whole model for its sampler, against a quarter of it as a trainer shard
    # (data=2 x fsdp=2 over 4 chips, embed split over fsdp only: half of each embed weight).
    assert result["bytes_held"] > result["bytes_before"] > 0


@pytest.mark.slow  # two processes build a policy and compile its steps: ~1-2 min on 2 cores
def test_each_host_trains_on_its_own_samples_like_one_process(tmp_path):
  """Policy.train with every host holding only its own episodes' samples (uneven shares)
  takes the same optimizer steps on the same sets of samples as one process holding all:
  RSFT (two epochs, minibatches of episodes) and GRPO (old and reference log-probs, two PPO
  epochs). Packing puts samples in other rows, so losses and weights agree up to float
  summation order (rtol 1e-5)."""
  (single,) = run_processes(tmp_path, 1, extras=("policy",))
  results = run_processes(tmp_path, 2, extras=("policy", "policy"))
  for result in results:
    for loss in ("rsft", "grpo"):
      got, want = result["train"][loss], single["train"][loss]
      assert (got["num_samples"], got["num_dropped"]) == (want["num_samples"],
                                                          want["num_dropped"]), loss
      assert len(got["losses"]) == len(want["losses"]) > 1, loss
      np.testing.assert_allclose(got["losses"], want["losses"], rtol=1e-5, err_msg=loss)
    assert single["train"]["rsft"]["num_dropped"] == 2  # episode 4's two samples
    for name, value in single["policy_params"].items():
      np.testing.assert_allclose(result["policy_params"][name], value, rtol=1e-5, atol=1e-6,
                                 err_msg=name)


def test_preflight_names_hosts_with_other_versions(tmp_path):
  results = run_processes(tmp_path, 2, extras=("config=a", "config=b"))
  for result in results:
    assert result["preflight"].startswith("Hosts [1] run different package versions")


def _one_and_two_processes(tmp_path, mode):
  """(one process's result, host 0's and host 1's) of the worker's MODE=WORKDIR run, in
  tmp_path/one and tmp_path/two."""
  (single,) = run_processes(tmp_path, 1, extras=(f"{mode}={tmp_path / 'one'}",), timeout=1200)
  first, second = run_processes(tmp_path, 2, extras=(f"{mode}={tmp_path / 'two'}",) * 2,
                                timeout=1200)
  return single, first, second


def _assert_each_host_did_its_own_work(single, first, second):
  """Each host verified only the episodes it ran (together, what one process verified), and
  what crossed for episodes was numbers: at most 48 bytes each plus a header per gather."""
  assert first["verified"] + second["verified"] == single["verified"] > 0
  for result in (first, second):
    assert 0 < result["verified"] <= result["local_episodes"]
    assert result["episode_bytes"] <= (48 * result["local_episodes"] +
                                       160 * result["episode_gathers"]), result


@pytest.mark.slow
def test_two_processes_run_a_recipe_like_one(tmp_path):
  """The tiny WHALE recipe on a mesh over two processes: each host runs about half of the
  episodes and verifies only those, the hosts exchange numbers (a few dozen bytes per
  episode), never trajectories, both hosts end with the same run, it makes the choices one
  process makes, and host 0's archive view shows the episodes host 1 ran (from its shards)."""
  single, first, second = _one_and_two_processes(tmp_path, "recipe")
  assert not single["sharded"] and first["sharded"] and second["sharded"]
  assert first["summary"] == second["summary"]
  summary, reference = first["summary"], single["summary"]
  counts = summary["counts"]
  episodes = counts["weight"] + counts["harness"] + counts["evaluation"]
  assert first["local_episodes"] + second["local_episodes"] == episodes
  assert 0.3 * episodes <= first["local_episodes"] <= 0.7 * episodes
  assert counts["weight"] > 0 and counts["harness"] > 0
  for key in ("counts", "incumbent_hash", "weight_steps", "cycles", "training_rollouts"):
    assert summary[key] == reference[key], key
  np.testing.assert_allclose([value for _, value in summary["curve"]],
                             [value for _, value in reference["curve"]], atol=1e-9)
  _assert_each_host_did_its_own_work(single, first, second)
  assert second["planted"] > 0 and first["marker_found"] > 0 and first["archives"] > 0
  assert first["folder_marker_found"] >= first["marker_found"]  # the CLI agent's folder too
  # The archives and the gate log exist once, in the workdir (no per-host copies).
  assert not (tmp_path / "two" / "hosts").exists()


@pytest.mark.slow
def test_two_processes_run_vace_like_one(tmp_path):
  """The tiny VACE recipe (GRPO blocks, one gated candidate per cycle) on two processes:
  the same choices and counts as one process, each host verifying its own episodes, and host
  0 reading host 1's block episodes back from the shard files."""
  single, first, second = _one_and_two_processes(tmp_path, "vace")
  assert first["summary"] == second["summary"]
  summary, reference = first["summary"], single["summary"]
  for key in ("counts", "incumbent_hash", "weight_steps", "cycles", "training_rollouts",
              "gate_decisions"):
    assert summary[key] == reference[key], key
  np.testing.assert_allclose([value for _, value in summary["curve"]],
                             [value for _, value in reference["curve"]], atol=1e-9)
  _assert_each_host_did_its_own_work(single, first, second)
  assert second["planted"] > 0 and first["marker_found"] > 0
  assert not (tmp_path / "two" / "hosts").exists()


@pytest.mark.slow
def test_two_processes_run_harness_learning_like_one(tmp_path):
  """Harness Learning's smoke run (demonstrations, SFT, one proposer GRPO step, two
  adaptation rounds) on two processes: its revision evaluations are split like every other
  evaluation (each host verifies its own episodes, numbers cross), the same proposer
  contexts, choices and counts as one process, the archives and demonstrations written once
  in the workdir, and the episodes host 1 ran read back from its trace shards into every
  host's proposer contexts and into host 0's archive view and CLI folder."""
  single, first, second = _one_and_two_processes(tmp_path, "hl")
  assert first["summary"] == second["summary"]
  summary, reference = first["summary"], single["summary"]
  for key in ("counts", "adaptation", "final_test_mean", "incumbent_hash", "demonstrations",
              "proposer_updates", "proposer_prompt_tokens", "proposer_completion_tokens"):
    assert summary[key] == reference[key], key
  counts = summary["counts"]
  episodes = counts["weight"] + counts["harness"] + counts["evaluation"]
  assert first["local_episodes"] + second["local_episodes"] == episodes
  _assert_each_host_did_its_own_work(single, first, second)
  # The same contexts on every host and in one process (each episode carries a marker of its
  # harness and seed, whichever host ran it), showing episodes of host 1 on both hosts.
  assert first["contexts"] == second["contexts"] == single["contexts"] != []
  assert first["context_markers"] == second["context_markers"] == single["context_markers"]
  assert sorted(first["planted_markers"] + second["planted_markers"]) == sorted(
      single["planted_markers"]) and len(single["planted_markers"]) == episodes
  mine, theirs = set(first["planted_markers"]), set(second["planted_markers"])
  assert set(first["context_markers"]) - mine and set(first["context_markers"]) - mine <= theirs
  assert set(first["folder_markers"]) - mine and set(first["folder_markers"]) - mine <= theirs
  assert first["archives"] > 0
  assert (tmp_path / "two" / "harness_learning" / "demonstrations.jsonl").exists()
  assert not (tmp_path / "two" / "hosts").exists()
