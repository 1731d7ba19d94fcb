"""whale_jax.aot: the over-HBM advice (fast, CPU mesh) and real TPU compiles (slow: they need
the aot extra's libtpu, `pip install -e '.[aot]'`)."""
import os
import pathlib
import subprocess
import sys

import jax
import pytest

from tests.train import aot_tiny_config
from whale_jax import aot
from whale_jax.algorithms import options
from whale_jax.parallel import mesh as mesh_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "train" / "aot_tiny_config.py"
GIB = 2**30


def _setup(config, mesh_sizes):
  mesh = mesh_lib.make_mesh(devices=jax.devices()[:4], **mesh_sizes)
  return aot.Setup("", aot.model_config_from(config.model),
                   options.PolicyConfig(**config.training.to_dict()), mesh,
                   16 * GIB)


def _over(name, setup, temp_gib, state_gib=1.0):
  return aot.Result(name, params_bytes=int(state_gib * GIB / 3),
                    optimizer_bytes=int(state_gib * GIB * 2 / 3), temp_bytes=int(temp_gib * GIB),
                    peak_bytes=int((temp_gib + state_gib) * GIB), hbm_bytes=setup.hbm_bytes)


def test_advice_names_the_cheapest_fix_in_order():
  config = aot_tiny_config.get_config()
  setup = _setup(config, dict(data=2, fsdp=2, tensor=1))
  result = _over("rsft", setup, temp_gib=40)
  assert not result.fits
  assert "config.model.remat='dots_with_no_batch_dims'" in aot.advice(setup, result)
  assert "needs 41.0 GiB of 16.0 GiB" in aot.advice(setup, result)
  config.model.remat = "full"
  # 32 samples -> 32 rows over 4 batch devices x 2 micro-batches: 4 rows per chip
  config.training.samples_per_step = 32
  setup = _setup(config, dict(data=2, fsdp=2, tensor=1))
  weights_bound = _over("rsft", setup, temp_gib=1, state_gib=20)
  assert "--mesh=data=1,fsdp=4,tensor=1" in aot.advice(setup, weights_bound)
  assert "num_microbatches to 8" in aot.advice(setup, _over("rsft", setup, temp_gib=40))
  config.training.samples_per_step = 8  # one row per chip per micro-batch: a shorter row
  setup = _setup(config, dict(data=2, fsdp=2, tensor=1))
  assert "row_length to 512" in aot.advice(setup, _over("rsft", setup, temp_gib=40))
  decode = _over("decode", setup, temp_gib=40)
  assert "config.training.sampler.max_slots to 4" in aot.advice(setup, decode)
  # A KV cache 40 GiB at 64 slots beside 1 GiB of weights: 20 slots (12.5 + 1 GiB) keep 10% of
  # 16 GiB free, 24 (15 + 1 GiB) would not; slots come in multiples of the 4 batch shards.
  config.training.sampler.max_slots = 64
  setup = _setup(config, dict(data=2, fsdp=2, tensor=1))
  decode = aot.Result("decode", params_bytes=GIB, cache_bytes=40 * GIB, peak_bytes=41 * GIB,
                      hbm_bytes=setup.hbm_bytes)
  assert "config.training.sampler.max_slots to 20 " in aot.advice(setup, decode)


def test_default_programs_follow_the_recipe():
  config = aot_tiny_config.get_config()
  setup = _setup(config, dict(data=1, fsdp=4, tensor=1))
  assert aot.default_programs(config, setup) == ["rsft", "prefill", "decode"]  # whale: RSFT
  config.recipe = "vace"  # GRPO, and the tiny config keeps a reference (kl_weight > 0)
  assert aot.default_programs(config, setup) == ["grpo", "reference", "prefill", "decode"]


def test_harness_learning_compiles_its_proposer_even_as_a_copy_of_the_solver():
  """A Harness Learning config whose proposer is the solver's copy (no proposer_model, no
  proposer_training: the paper configs) still trains a proposer: its train steps, sampler
  and weight handoff are compiled; the frozen solver gets only its sampler."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  config = aot_tiny_config.get_config()
  config.recipe = "harness_learning"
  config.harness_learning = ml_collections.ConfigDict()
  solver, proposer = aot.setups(config, jax.devices()[:4], hbm_bytes=GIB)
  assert (solver.name, proposer.name) == ("", "proposer_")
  assert aot.default_programs(config, solver) == ["prefill", "decode"]
  assert aot.default_programs(config, proposer)[:2] == ["rsft", "grpo"]


def test_resource_exhausted_compile_is_a_failed_result():
  class OutOfMemory:
    def trace(self, *args):
      raise RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory "
                         "required for HLO temporaries (157.08G) exceeds available HBM "
                         "(95.74G).")

  result = aot._compile(aot.Result("rsft", hbm_bytes=96 * GIB), OutOfMemory())
  assert not result.fits and "RESOURCE_EXHAUSTED" in result.error
  assert abs(result.temp_bytes / GIB - 157.08) < 0.01


def test_sizes_only_counts_the_arguments_without_compiling():
  """--sizes_only: no XLA compile; the peak's lower bound is the train state plus the batch,
  and the decode call's KV cache is the hand-computed bytes over the batch shards."""
  config = aot_tiny_config.get_config()  # 8 samples, 2 micro-batches, rows of 1024
  results = dict((result.name, result) for _, result in aot.check(
      config, None, programs=["rsft", "decode"], devices=jax.devices()[:4],
      hbm_bytes=16 * GIB, log=lambda line: None, sizes_only=True))
  rsft, decode = results["rsft"], results["decode"]
  assert not rsft.compiled and rsft.compile_seconds == 0 and not rsft.collectives
  # 8 rows (8 = 4 batch devices x 2 micro-batches) x 1024 positions x 4 keys x 4 bytes,
  # over the 4 batch shards; + the step counter
  batch_bytes = 8 * 1024 * 4 * 4 // 4
  assert abs(rsft.peak_bytes - rsft.params_bytes - rsft.optimizer_bytes - batch_bytes) <= 16
  # 2 layers x (key, value) x 8 slots x 1024 positions x 2 KV heads x 128 x bfloat16,
  # slots over the 4 batch shards; + each slot's length
  cache_bytes = 2 * 2 * 8 * 1024 * 2 * 128 * 2 // 4
  assert 0 <= decode.cache_bytes - cache_bytes <= 64
  assert decode.peak_bytes >= decode.params_bytes + decode.cache_bytes
  assert decode.resident_bytes == rsft.optimizer_bytes  # the optimizer state waits on chip
  table = aot.format_table(aot.setups(config, jax.devices()[:4], hbm_bytes=GIB)[0], [rsft])
  assert ">=" in table and "<=" in table  # a lower bound on the peak, an upper on headroom



def test_whale_config_decode_cache_fits_v6e_8():
  """configs/whale.py:searchqa's decode call (Qwen3.5-2B shapes, 256 slots) on 8 chips of
  32 GiB over fsdp (v6e-8): its KV cache of max_cache_length 32,768 positions is the hand
  count and, with the weights and the waiting optimizer state, leaves 10% of the chip free;
  with the model's own 262,144 positions it would not fit (sizes only: no compile)."""
  from configs import whale  # pylint: disable=import-outside-toplevel
  config = whale.get_config("searchqa")
  assert config.training.sampler.max_cache_length == 32_768
  decode = aot.check(config, None, programs=["decode"], devices=jax.devices()[:8],
                     hbm_bytes=32 * GIB, log=lambda line: None, sizes_only=True)[0][1]
  # 6 full-attention layers (1 in 4 of 24) x (key, value) x 256 / 8 slots per chip x 32,768
  # positions x 2 KV heads x head dim 256 x bfloat16 = 12 GiB; the 18 linear-attention
  # layers' recurrent state per chip: 32 slots x 16 heads x 128 x 128 float32 each, < 1 GiB
  attention_bytes = 6 * 2 * 32 * 32_768 * 2 * 256 * 2
  recurrent_bytes = 18 * 32 * 16 * 128 * 128 * 4
  assert attention_bytes <= decode.cache_bytes <= attention_bytes + 1.25 * recurrent_bytes
  assert decode.fits, aot.format_table(
      aot.setups(config, jax.devices()[:8], hbm_bytes=32 * GIB)[0], [decode])
  config.training.sampler.max_cache_length = None  # the model's 262,144 positions
  decode = aot.check(config, None, programs=["decode"], devices=jax.devices()[:8],
                     hbm_bytes=32 * GIB, log=lambda line: None, sizes_only=True)[0][1]
  assert decode.cache_bytes >= 8 * attention_bytes and not decode.fits

def test_gpu_topology_names_h100_hosts_or_the_extra_to_install():
  """h100:8 is one host of 8 H100s, compiled for by jax's CUDA plugin; where the plugin is not
  installed (the TPU venv, the test venv) the error names the extra that installs it."""
  try:
    import jax_cuda12_plugin  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    with pytest.raises(RuntimeError, match=r"pip install -e '\.\[aot_cuda\]'"):
      aot.topology_devices("h100:8")
  else:
    devices = aot.topology_devices("h100:2x8")
    assert len(devices) == 16 and devices[0].device_kind == "NVIDIA H100 80GB HBM3"
  with pytest.raises(ValueError, match="h100:8"):
    aot.topology_devices("a100:8")


def _run_aot(*args):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  return subprocess.run([sys.executable, "-m", "whale_jax.aot", f"--config={CONFIG}", *args],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def _libtpu():
  try:
    import libtpu  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError as error:
    raise AssertionError("The AOT tests need the TPU compiler: pip install -e '.[aot]'.") from error


@pytest.mark.slow
def test_tiny_config_compiles_for_v5e_2x2():
  """Every program of the tiny config compiles for 4 v5e chips and fits; the parameter bytes
  per chip are the model's size over the 4 fsdp shards (norms are replicated)."""
  _libtpu()
  config = aot_tiny_config.get_config()
  results = aot.check(config, "v5e:2x2", programs=list(aot.PROGRAMS), log=lambda line: None)
  names = [result.name for _, result in results]
  assert names == ["rsft", "grpo", "reference", "prefill", "decode", "handoff"]
  setup = results[0][0]
  expected_param_bytes = setup.model_config.num_params() * 2 / 4  # bfloat16 over fsdp=4
  for _, result in results:
    assert result.fits and result.peak_bytes > 0, aot.format_table(setup, [result])
  rsft = results[0][1]
  assert abs(rsft.params_bytes / expected_param_bytes - 1) < 0.02
  # float32 mu, nu and master weights: 6x the bfloat16 params
  assert abs(rsft.optimizer_bytes / rsft.params_bytes - 6) < 0.1
  assert "all-gather" in rsft.collectives  # fsdp gathers the weights
  assert results[2][1].resident_bytes > 0  # the train state stays while the reference runs


@pytest.mark.slow
def test_weight_handoff_compiles_for_two_v5p_hosts():
  """On a topology of two hosts (8 v5p chips) the programs a run uses end with the trainer-
  to-sampler weight handoff: it compiles with the others, and a chip goes from its fsdp=4
  trainer shard to the sampler's whole bfloat16 copy (the sampler shards nothing over fsdp
  and tensor=1), gathered by all-gathers."""
  _libtpu()
  config = aot_tiny_config.get_config()
  results = aot.check(config, "v5p:2x2x2", mesh_sizes=dict(data=2, fsdp=4, tensor=1),
                      log=lambda line: None)
  assert [result.name for _, result in results] == ["rsft", "prefill", "decode", "handoff"]
  setup, handoff = results[-1]
  assert aot.num_hosts(setup.mesh) == 2
  assert handoff.fits and "all-gather" in handoff.collectives, aot.format_table(setup, [handoff])
  whole = setup.model_config.num_params() * 2  # bfloat16
  assert handoff.params_bytes == whole
  assert "over 2 hosts" in handoff.note and f"({aot._gib(whole)} GiB)" in handoff.note


@pytest.mark.slow
def test_over_hbm_exits_nonzero_naming_the_fix():
  """With remat off the tiny config's train step does not fit 0.05 GiB chips: the command
  exits 1 and names the remat policy that would help."""
  _libtpu()
  process = _run_aot("--topology=v5e:2x2", "--programs=rsft", "--hbm_gib=0.05")
  assert process.returncode == 1, process.stdout + process.stderr
  assert "config.model.remat='dots_with_no_batch_dims'" in process.stdout, process.stdout
