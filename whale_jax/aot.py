r"""Ahead-of-time compile of a config's jitted programs for a TPU topology or GPU hosts, from
a CPU host.

  python -m whale_jax.aot --config=configs/whale.py:searchqa --topology=v5p:2x4x4
  python -m whale_jax.aot --config=configs/whale.py:searchqa --topology=v5e:4x4 \
      --mesh=data=1,fsdp=16,tensor=1 --programs=rsft,decode
  python -m whale_jax.aot --config=configs/whale.py:searchqa --topology=h100:8   # 8 H100s

Needs the TPU compiler (`pip install -e '.[aot]'`: jax[tpu] with its pinned libtpu) or, for
GPUs, jax's CUDA plugin (`pip install -e '.[aot_cuda]'`, a virtual environment of its own;
memory analysis only: XLA does not fail a GPU program over HBM, the headroom check does); no
TPU or GPU, no weights: every input is a jax.ShapeDtypeStruct with the NamedSharding a run
would give it, on a mesh over the topology's devices (parallel/mesh.py, parallel/rules.py).
Programs:

  rsft       the RSFT train step (train/step.py make_train_step(...).jitted, rsft.loss)
  grpo       the GRPO train step (grpo.loss) on a batch with the GRPO keys; with
             reference_logprobs when config.training.grpo keeps a reference
  reference  the reference model's log-prob forward (grpo_update.make_logprobs_fn), when the
             GRPO config keeps a reference; its weights stay resident beside the train state
  prefill    the sampler's prefill (sampling/programs.py's jitted prefill) of one batch of
             max_prefill_tokens, capped at the cache length
  decode     the sampler's decode call: max_slots slots, max_cache_length cache,
             steps_per_call steps
  handoff    on a topology of several hosts: the trainer-to-sampler weight handoff after a
             weight step (parallel/handoff.py), the resharding of the train state's params
             from the training layout to the sampler's, replicated over hosts; its "params"
             column is what a chip holds for its sampler, "resident" the optimizer state that
             stays, and the line under the table what the chip receives per weight step
  proposer_* the same for config.harness_learning's proposer model, when it trains one

The batch of a train step is the worst case of algorithms/policy.py's packing:
samples_per_step rows (one sample per row) rounded up like Policy does to a power-of-two
multiple of (batch devices * num_microbatches). Per program it prints what one chip holds:
parameters, optimizer state, KV cache, temporaries, peak (XLA's memory analysis: arguments +
outputs - aliased + temporaries), what else stays resident (the optimizer state while
sampling, the reference weights while training), the chip's HBM, headroom, compile time and
the collectives in the compiled HLO. It exits 1 when a program does not fit, naming the
cheapest change that would help. --sizes_only skips the compile (seconds instead of the
minutes a large model's compile takes): per program the bytes per chip of its arguments and
what stays resident, a lower bound on the peak that already rules out a mesh whose weights,
optimizer state or KV cache alone overflow the chip.
"""
import dataclasses
import math
import os
import re
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags

from whale_jax import typed_config
from whale_jax.algorithms import options
from whale_jax.algorithms import sections
from whale_jax.models import config as model_config_lib
from whale_jax.models import presets
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules as rules_lib
from whale_jax.train import batch as batch_lib
from whale_jax.train import grpo
from whale_jax.train import optimizer as optimizer_lib
from whale_jax.train import rsft
from whale_jax.train import step as step_lib
from whale_jax.train import train_state

GIB = 2**30
# HBM per chip (bytes) by jax device_kind; a topology's devices report no memory size.
HBM_BYTES = {"TPU v5 lite": 16 * GIB, "TPU v5e": 16 * GIB, "TPU v5": int(95.74 * GIB),
             "TPU v5p": int(95.74 * GIB), "TPU v6 lite": 32 * GIB, "TPU v6e": 32 * GIB,
             "TPU v4": 32 * GIB, "NVIDIA H100 80GB HBM3": 81_559 * 2**20}
# GPU targets by --topology prefix: XLA's description of the GPU to compile for (a
# GpuTargetConfigProto in text form; values from NVIDIA's H100 SXM5 80GB data sheet).
GPU_TARGET_CONFIGS = {"h100": """
gpu_device_info {
  threads_per_block_limit: 1024  threads_per_warp: 32  threads_per_core_limit: 2048
  shared_memory_per_block: 49152  shared_memory_per_block_optin: 232448
  shared_memory_per_core: 233472  core_count: 132  fpus_per_core: 128
  block_dim_limit_x: 2147483647  block_dim_limit_y: 65535  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000  l2_cache_size: 52428800  clock_rate_ghz: 1.98
  device_memory_size: 85520809984  registers_per_core_limit: 65536
  registers_per_block_limit: 65536  cuda_compute_capability { major: 9 minor: 0 }
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 8 }
runtime_version { major: 12 minor: 9 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""}
MIN_HEADROOM = 0.10  # a program "fits" with at least this fraction of HBM free
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
PROGRAMS = ("rsft", "grpo", "reference", "prefill", "decode", "handoff")
_TRAIN_PROGRAMS = ("rsft", "grpo")


@dataclasses.dataclass
class Result:
  """One compiled (or failed) program; byte counts are per chip."""
  name: str
  params_bytes: int = 0
  optimizer_bytes: int = 0
  cache_bytes: int = 0
  temp_bytes: int = 0
  peak_bytes: int = 0
  resident_bytes: int = 0
  hbm_bytes: int = 0
  compile_seconds: float = 0.0
  collectives: dict = dataclasses.field(default_factory=dict)
  error: str = ""
  advice: str = ""
  note: str = ""  # a line printed under the table (the handoff's bytes per chip)
  compiled: bool = True  # False: --sizes_only, peak_bytes is only the arguments (a lower bound)

  @property
  def total_bytes(self):
    return self.peak_bytes + self.resident_bytes

  @property
  def headroom(self):
    return 1.0 - self.total_bytes / self.hbm_bytes if self.hbm_bytes else float("nan")

  @property
  def fits(self):
    return not self.error and self.headroom >= MIN_HEADROOM


@dataclasses.dataclass(frozen=True)
class Setup:
  """What the programs are built from: model, training options, mesh."""
  name: str
  model_config: model_config_lib.ModelConfig
  training: options.PolicyConfig   # config.training (or harness_learning.proposer_training)
  mesh: object
  hbm_bytes: int
  compile: bool = True  # False: measure the arguments only (--sizes_only), no XLA compile


# ---- topology, mesh, model ----------------------------------------------------------------


def topology_devices(topology_name):
  """The devices of a TPU topology ("v5p:2x4x4", "v5e:2x2", ...) or of GPU hosts ("h100:8":
  one host of 8 H100s, "h100:2x8": two), no TPU or GPU needed."""
  gpus = re.fullmatch(r"([a-z]\d+):(?:(\d+)x)?(\d+)", topology_name or "")
  if gpus and gpus.group(1) in GPU_TARGET_CONFIGS:
    return _gpu_devices(topology_name, gpus.group(1), int(gpus.group(2) or 1),
                        int(gpus.group(3)))
  # Compiling opens no TPU: let several checks (and tests) load libtpu at once instead of
  # failing on its single-process lock file.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  from jax.experimental import topologies
  if not re.fullmatch(r"v\d+[a-z]*:\d+(x\d+){1,2}", topology_name or ""):
    raise ValueError(f"--topology={topology_name!r}: use gen:AxB[xC], e.g. v5p:2x4x4 (v5p-64, "
                     "32 chips), v6e:2x4, v5e:4x4, v5e:2x2; or GPUs as "
                     f"{'|'.join(GPU_TARGET_CONFIGS)}:[hosts x]gpus_per_host, e.g. h100:8.")
  try:
    return list(topologies.get_topology_desc(topology_name=topology_name,
                                             platform="tpu").devices)
  except Exception as error:  # pylint: disable=broad-except
    raise RuntimeError(f"--topology={topology_name}: the TPU compiler could not describe it "
                       f"({error}). Install the aot extra: pip install -e '.[aot]'.") from error


def _gpu_devices(topology_name, kind, num_hosts, gpus_per_host):
  """Compile-only CUDA devices from jax's CUDA plugin and a target description (memory
  analysis only; there is no GPU or driver to check the CUDA libraries against)."""
  os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
  from jax.experimental import topologies
  try:
    return list(topologies.get_topology_desc(
        platform="cuda", target_config=GPU_TARGET_CONFIGS[kind],
        topology=f"1x{num_hosts}x{gpus_per_host}").devices)
  except Exception as error:  # pylint: disable=broad-except
    raise RuntimeError(f"--topology={topology_name}: jax's CUDA compiler could not describe it "
                       f"({str(error).splitlines()[0][:200]}). Install it in a virtual "
                       "environment of its own: pip install -e '.[aot_cuda]'.") from error


def parse_mesh(text):
  """"data=1,fsdp=16,tensor=2" -> {"data": 1, "fsdp": 16, "tensor": 2}."""
  sizes = {}
  for part in filter(None, (text or "").split(",")):
    name, _, value = part.partition("=")
    if name.strip() not in mesh_lib.AXIS_NAMES or not re.fullmatch(r"-?\d+", value.strip()):
      raise ValueError(f"--mesh={text!r}: write axis=size pairs over {mesh_lib.AXIS_NAMES}, "
                       "e.g. --mesh=data=1,fsdp=16,tensor=2.")
    sizes[name.strip()] = int(value)
  return sizes


def model_config_from(section, preset=None, key_path="config.model"):
  """ModelConfig of config.model (an sections.ModelSection, or its config dict, read as
  experiment_config reads it): "random" fields, or a preset for an "hf" checkpoint path (no
  weights are read: Qwen/Qwen3.5-2B -> preset qwen3_5_2b), with the section's ModelConfig
  fields (attention, remat, ...) and dtype applied."""
  section = typed_config.read(sections.ModelSection, section, key_path)
  fields = dict(section.model_fields)
  if section.source != "random":
    fields.setdefault("param_dtype", section.dtype)
    fields.setdefault("compute_dtype", section.dtype)
  if section.source == "random" and not preset:
    return model_config_lib.ModelConfig(**fields)
  path = section.path
  if not preset:
    preset = re.sub(r"[.-]", "_", path.rstrip("/").split("/")[-1].lower())
  if preset not in presets.PRESETS:
    raise ValueError(f"{key_path}.path={path!r}: no model preset {preset!r} to take its "
                     f"shapes from; pass --model_preset (one of {sorted(presets.PRESETS)}).")
  return presets.get(preset, **fields)


def _round_rows(num_rows, multiple):
  """algorithms/policy.py's row count: a power-of-two multiple of `multiple`."""
  rows = max(multiple, 1)
  while rows < num_rows:
    rows *= 2
  return rows


# ---- bytes --------------------------------------------------------------------------------


def per_chip_bytes(tree):
  """Bytes one device holds of a tree of ShapeDtypeStructs with shardings (the largest)."""
  per_device = {}
  for leaf in jax.tree.leaves(tree):
    sharding = leaf.sharding
    shard = sharding.shard_shape(leaf.shape)
    size = math.prod(shard) * jnp.dtype(leaf.dtype).itemsize
    for device in sharding.device_set:
      per_device[device] = per_device.get(device, 0) + size
  return max(per_device.values(), default=0)


def count_collectives(hlo_text):
  return {name: count for name in COLLECTIVES
          if (count := len(re.findall(rf"\b{name}(?:-start)?\(", hlo_text)))}


def _compile(result, jitted, *args, compile_it=True):
  """Compiles jitted on args; fills the memory and collective fields of result. Without
  compile_it only the arguments' bytes per chip are counted (peak_bytes, a lower bound)."""
  if not compile_it:
    result.compiled = False
    result.peak_bytes = per_chip_bytes([leaf for leaf in jax.tree.leaves(args)
                                        if isinstance(leaf, jax.ShapeDtypeStruct)])
    return result
  start = time.perf_counter()
  try:
    compiled = jitted.trace(*args).lower().compile()
  except Exception as error:  # pylint: disable=broad-except
    result.compile_seconds = time.perf_counter() - start
    message = str(error)
    if "RESOURCE_EXHAUSTED" not in message and "out of memory" not in message.lower():
      raise
    result.error = "does not fit: " + message.strip().splitlines()[0][:300]
    # "... required for HLO temporaries (157.08G) exceeds available HBM (95.74G)"
    needed = re.search(r"(\d+(?:\.\d+)?)([KMGT])\)? exceeds", message) or re.search(
        r"[Uu]sed (\d+(?:\.\d+)?)([KMGT])", message)
    if needed:
      unit = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
      result.temp_bytes = int(float(needed.group(1)) * unit[needed.group(2)])
      result.peak_bytes = result.temp_bytes + result.params_bytes + result.optimizer_bytes
    return result
  result.compile_seconds = time.perf_counter() - start
  memory = compiled.memory_analysis()
  result.temp_bytes = int(memory.temp_size_in_bytes)
  # The larger of XLA's own peak and arguments + outputs - aliased + temporaries (an upper
  # bound: every temporary live at once).
  result.peak_bytes = max(int(getattr(memory, "peak_memory_in_bytes", 0) or 0), int(
      memory.argument_size_in_bytes + memory.output_size_in_bytes - memory.alias_size_in_bytes
      + memory.temp_size_in_bytes))
  result.collectives = count_collectives(compiled.as_text())
  return result


# ---- programs -----------------------------------------------------------------------------


def _train_batch(setup, loss_name, with_reference):
  training = setup.training
  rules = rules_lib.TRAIN_RULES
  num_microbatches = training.num_microbatches
  multiple = mesh_lib.axis_size(setup.mesh, "batch", rules) * num_microbatches
  rows = _round_rows(training.samples_per_step, multiple)
  length = training.row_length
  keys = list(batch_lib.REQUIRED_KEYS)
  if loss_name == "grpo":
    keys += list(batch_lib.GRPO_KEYS) + (["reference_logprobs"] if with_reference else [])
  sharding = mesh_lib.batch_sharding(setup.mesh, rules)
  integer = set(batch_lib.REQUIRED_KEYS[:3])
  return {key: jax.ShapeDtypeStruct((rows, length), jnp.int32 if key in integer
                                    else jnp.float32, sharding=sharding) for key in keys}


def _grpo_config(setup):
  return setup.training.grpo


def train_program(setup, loss_name, name=None):
  """The RSFT or GRPO train step of setup, compiled."""
  model_config, mesh, rules = setup.model_config, setup.mesh, rules_lib.TRAIN_RULES
  optimizer = optimizer_lib.make(setup.training.optimizer)
  if loss_name == "rsft":
    temperature = setup.training.rsft_temperature
    loss_fn = lambda params, config, batch: rsft.loss(params, config, batch, temperature)
    with_reference = False
  else:
    grpo_config = _grpo_config(setup)
    loss_fn = lambda params, config, batch: grpo.loss(params, config, batch, grpo_config)
    with_reference = grpo_config.uses_reference
  step = step_lib.make_train_step(model_config, loss_fn, optimizer, mesh, rules,
                                  num_microbatches=setup.training.num_microbatches)
  state = train_state.abstract(model_config, optimizer, mesh, rules)
  batch = _train_batch(setup, loss_name, with_reference)
  result = Result(name or loss_name, params_bytes=per_chip_bytes(state["params"]),
                  optimizer_bytes=per_chip_bytes(state["opt_state"]), hbm_bytes=setup.hbm_bytes)
  if with_reference and not _grpo_config(setup).offload_reference:
    result.resident_bytes = per_chip_bytes(_reference_params(setup))
  with rules_lib.activate(mesh, rules):
    return _compile(result, step.jitted, state, batch, compile_it=setup.compile)


def _reference_params(setup):
  from whale_jax.models import decoder
  from whale_jax.train import reference
  model_config = setup.model_config
  shapes = jax.eval_shape(lambda: decoder.init_params(model_config, jax.random.key(0)))
  shardings = reference.param_shardings(model_config, setup.mesh, rules_lib.TRAIN_RULES)
  return jax.tree.map(lambda shape, sharding: jax.ShapeDtypeStruct(
      shape.shape, model_config.compute_jnp_dtype, sharding=sharding), shapes, shardings)


def reference_program(setup, name="reference"):
  """The reference model's log-prob forward over one GRPO batch."""
  from whale_jax.train import grpo_update
  grpo_config = _grpo_config(setup)
  forward = grpo_update.make_logprobs_fn(
      setup.model_config, setup.mesh, rules_lib.TRAIN_RULES, grpo_config.temperature,
      setup.training.num_microbatches)
  params = _reference_params(setup)
  batch = _train_batch(setup, "rsft", False)
  batch = {key: batch[key] for key in ("tokens", "positions", "segment_ids")}
  state_bytes = _state_bytes(setup)
  result = Result(name, params_bytes=per_chip_bytes(params), resident_bytes=state_bytes,
                  hbm_bytes=setup.hbm_bytes)
  return _compile(result, forward.jitted, params, batch, compile_it=setup.compile)


def _state_bytes(setup):
  optimizer = optimizer_lib.make(setup.training.optimizer)
  return per_chip_bytes(train_state.abstract(setup.model_config, optimizer, setup.mesh,
                                             rules_lib.TRAIN_RULES))


def _sampler_settings(setup):
  from whale_jax.sampling import buckets
  sampler = setup.training.sampler
  batch_shards = mesh_lib.axis_size(setup.mesh, "batch", rules_lib.SAMPLE_RULES)
  _, max_slots = buckets.slot_bounds(sampler.min_slots, sampler.max_slots, batch_shards)
  cache_length = sampler.max_cache_length or setup.model_config.max_position_embeddings
  return dict(max_slots=max_slots, cache_length=cache_length, batch_shards=batch_shards,
              steps_per_call=sampler.steps_per_call,
              max_prefill_tokens=sampler.max_prefill_tokens, num_stop_ids=sampler.num_stop_ids)


def sampler_program(setup, which, name=None):
  """The sampler's prefill or decode program (sampling/programs.py, as an engine on the
  setup's mesh runs it in the plain Layout of TPU and GPU), compiled."""
  from whale_jax.sampling import programs as programs_lib
  from whale_jax.sampling.layout import Layout
  model_config, mesh = setup.model_config, setup.mesh
  rules = rules_lib.SAMPLE_RULES
  settings = _sampler_settings(setup)
  functions = programs_lib.programs(model_config, setup.training.sampler, Layout(), mesh,
                                    rules)
  # The sampler decodes with the train state's own params (same mesh, train shardings).
  state = train_state.abstract(model_config, optimizer_lib.make(setup.training.optimizer), mesh, rules_lib.TRAIN_RULES)
  params = state["params"]
  result = Result(name or which, params_bytes=per_chip_bytes(params),
                  resident_bytes=per_chip_bytes(state["opt_state"]), hbm_bytes=setup.hbm_bytes)
  if which == "prefill":
    rows = settings["batch_shards"]
    length = min(settings["cache_length"], max(settings["max_prefill_tokens"] // rows, 1))
    sharding = mesh_lib.batch_sharding(mesh, rules, ndim=2)
    tokens = jax.ShapeDtypeStruct((rows, length), jnp.int32, sharding=sharding)
    lengths = jax.ShapeDtypeStruct((rows,), jnp.int32,
                                   sharding=mesh_lib.batch_sharding(mesh, rules, ndim=1))
    with rules_lib.activate(mesh, rules):
      # The params as they are: stored bits are a CPU engine's (Layout.store_weights).
      cache = functions.prefill.eval_shape(params, tokens, lengths)
      result.cache_bytes = sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize
                               for x in jax.tree.leaves(cache)) // settings["batch_shards"]
      return _compile(result, functions.prefill, params, tokens, lengths,
                      compile_it=setup.compile)
  with rules_lib.activate(mesh, rules):
    slots = functions.init.lower(settings["max_slots"], settings["cache_length"]).out_info
  result.cache_bytes = per_chip_bytes(slots["cache"])
  replicated = mesh_lib.replicated(mesh)
  cancel = jax.ShapeDtypeStruct((settings["max_slots"],), jnp.bool_,
                                sharding=mesh_lib.batch_sharding(mesh, rules, ndim=1))
  num_steps = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)
  stop_early = jax.ShapeDtypeStruct((), jnp.bool_, sharding=replicated)
  with rules_lib.activate(mesh, rules):
    return _compile(result, functions.decode, params, None, slots, cancel, num_steps,
                    stop_early, compile_it=setup.compile)


def num_hosts(mesh):
  """How many processes (hosts) the mesh's devices belong to."""
  return len({device.process_index for device in mesh.devices.flat})


def handoff_program(setup, name="handoff"):
  """The trainer-to-sampler weight handoff (parallel/handoff.make_handoff's resharding, as one
  jitted identity from the training shardings to the sampler's on the mesh seen as [hosts,
  data, fsdp, tensor]), compiled. params_bytes: what a chip holds after it; note: that, its
  trainer shard before (parallel/handoff.handoff_bytes_per_chip) and their difference, the
  least a chip receives per weight step."""
  from whale_jax.models import decoder
  from whale_jax.parallel import handoff as handoff_lib
  model_config, mesh = setup.model_config, setup.mesh
  state = train_state.abstract(model_config, optimizer_lib.make(setup.training.optimizer),
                               mesh, rules_lib.TRAIN_RULES)
  params = state["params"]
  logical = decoder.logical_axes(model_config)
  held, before = handoff_lib.handoff_bytes_per_chip(params, logical, mesh,
                                                    rules_lib.TRAIN_RULES,
                                                    rules_lib.SAMPLE_RULES)
  target = rules_lib.shardings(logical, handoff_lib.hosts_mesh(mesh), rules_lib.SAMPLE_RULES)
  params = jax.tree.map(lambda leaf, out: jax.ShapeDtypeStruct(
      leaf.shape, leaf.dtype, sharding=handoff_lib.as_target_order(leaf.sharding, out)),
                        params, target)
  result = Result(name, params_bytes=held, resident_bytes=per_chip_bytes(state["opt_state"]),
                  hbm_bytes=setup.hbm_bytes)
  result.note = (f"{name}: per weight step a chip goes from its trainer shard of the weights "
                 f"({_gib(before)} GiB) to its sampler's copy ({_gib(held)} GiB) over "
                 f"{num_hosts(mesh)} hosts: it receives at least {_gib(held - before)} GiB")
  return _compile(result, jax.jit(lambda tree: tree, out_shardings=target), params,
                  compile_it=setup.compile)


def build_program(setup, program, name=None):
  if program == "handoff":
    return handoff_program(setup, name or program)
  if program in _TRAIN_PROGRAMS:
    return train_program(setup, program, name)
  if program == "reference":
    return reference_program(setup, name or program)
  return sampler_program(setup, program, name)


# ---- advice -------------------------------------------------------------------------------


def advice(setup, result):
  """The cheapest change that would make result fit (a sentence naming the config key)."""
  model_config, training = setup.model_config, setup.training
  over = result.total_bytes - (1 - MIN_HEADROOM) * result.hbm_bytes
  need = f"needs {result.total_bytes / GIB:.1f} GiB of {result.hbm_bytes / GIB:.1f} GiB"
  mesh_sizes = dict(setup.mesh.shape)
  state = result.params_bytes + result.optimizer_bytes + result.resident_bytes
  if result.name.endswith(_TRAIN_PROGRAMS) or result.name.endswith("reference"):
    if model_config.remat in ("none", "dots") and not result.name.endswith("reference"):
      stronger = "dots_with_no_batch_dims" if model_config.remat == "none" else "full"
      return (f"{need}: set config.model.remat={stronger!r} (recompute activations in the "
              "backward pass instead of keeping them).")
    if model_config.attention == "dense":
      return f"{need}: set config.model.attention='blockwise' (no [T, T] scores)."
    if state > over and mesh_sizes["data"] > 1:
      return (f"{need}: shard the weights and optimizer state over more chips: --mesh="
              f"data={mesh_sizes['data'] // 2},fsdp={mesh_sizes['fsdp'] * 2},"
              f"tensor={mesh_sizes['tensor']} (config.mesh).")
    rows_per_chip = (_round_rows(training.samples_per_step,
                                 mesh_lib.axis_size(setup.mesh, "batch", rules_lib.TRAIN_RULES)
                                 * training.num_microbatches)
                     // (mesh_lib.axis_size(setup.mesh, "batch", rules_lib.TRAIN_RULES)
                         * training.num_microbatches))
    if rows_per_chip > 1:
      return (f"{need}: raise config.training.num_microbatches to "
              f"{training.num_microbatches * rows_per_chip} (one row per chip per "
              "micro-batch).")
    if model_config.remat != "full":
      return f"{need}: set config.model.remat='full'."
    return (f"{need}: shorten config.training.row_length to "
            f"{training.row_length // 2}.")
  settings = _sampler_settings(setup)
  if result.name.endswith("decode") and settings["max_slots"] > settings["batch_shards"]:
    slots = max(settings["max_slots"] // 2, settings["batch_shards"])
    if result.cache_bytes > over:  # the KV cache scales with the slots: the most that fit
      fitting = settings["max_slots"] * (1 - over / result.cache_bytes)
      slots = max(int(fitting) // settings["batch_shards"] * settings["batch_shards"],
                  settings["batch_shards"])
    return (f"{need}: lower config.training.sampler.max_slots to {slots} (smaller decode "
            f"batch, a smaller KV cache; or max_cache_length below {settings['cache_length']})"
            ".")
  if result.name.endswith("prefill") and settings["max_prefill_tokens"] > 1024:
    return (f"{need}: lower config.training.sampler.max_prefill_tokens to "
            f"{settings['max_prefill_tokens'] // 2}.")
  return (f"{need}: lower config.training.sampler.max_cache_length to "
          f"{settings['cache_length'] // 2}.")


# ---- the whole check ----------------------------------------------------------------------


def setups(config, devices, mesh_sizes=None, preset=None, hbm_bytes=None, compile_it=True):
  """[Setup] for the config's solver and, when it trains one, its proposer model."""
  hbm_bytes = hbm_bytes or HBM_BYTES.get(devices[0].device_kind)
  if not hbm_bytes:
    raise ValueError(f"No HBM size known for device kind {devices[0].device_kind!r}; pass "
                     "--hbm_gib.")
  mesh_section = typed_config.read(sections.MeshSection, config.get("mesh", None) or {},
                                   "config.mesh")
  mesh = mesh_lib.make_mesh(devices=devices, **{**mesh_section.axis_sizes(),
                                                **(mesh_sizes or {})})
  training = config.get("training", {})
  training = typed_config.read(options.PolicyConfig, dict(
      training.to_dict() if hasattr(training, "to_dict") else training), "config.training")
  out = [Setup("", model_config_from(config.model, preset), training, mesh, hbm_bytes,
               compile_it)]
  learning = config.get("harness_learning", None)
  if learning is not None and (config.get("recipe", "") == "harness_learning" or
                               learning.get("proposer_model") or
                               learning.get("proposer_training")):  # a proposer trains
    proposer_model = learning.get("proposer_model") or config.model
    model_key = ("config.harness_learning.proposer_model" if learning.get("proposer_model")
                 else "config.model")
    proposer_training = learning.get("proposer_training") or None
    proposer_training = training if not proposer_training else typed_config.read(
        options.PolicyConfig, dict(proposer_training.to_dict() if hasattr(
            proposer_training, "to_dict") else proposer_training),
        "config.harness_learning.proposer_training")
    out.append(Setup("proposer_", model_config_from(proposer_model, key_path=model_key),
                     proposer_training, mesh, hbm_bytes, compile_it))
  return out


GRPO_RECIPES = ("vace", "ungated", "rl_only", "vace_harness_only", "sia")  # recipes whose solver trains with GRPO
RSFT_RECIPES = ("whale", "whale_adaptive", "fst")


def default_programs(config, setup):
  """The programs a run of config uses: the solver's train step (RSFT or GRPO by recipe and
  config.baseline.weight_update; both when unknown), the proposer's RSFT and GRPO steps,
  the reference forward when GRPO keeps a reference, the sampler's prefill and decode, and,
  on several hosts, the weight handoff after each weight step."""
  recipe = config.get("recipe", "")
  baseline = config.get("baseline", None) or {}
  weight_update = baseline.get("weight_update", "") if recipe not in (
      GRPO_RECIPES + RSFT_RECIPES) else ""
  if setup.name or not recipe:
    train = ["rsft", "grpo"]
  elif recipe in GRPO_RECIPES or weight_update == "grpo":
    train = ["grpo"]
  elif recipe in RSFT_RECIPES or weight_update == "rsft":
    train = ["rsft"]
  elif recipe == "harness_learning":
    train = []  # the solver is not trained; its proposer is (setup "proposer_")
  else:
    train = ["rsft", "grpo"]
  if "grpo" in train and _grpo_config(setup).uses_reference:
    train.append("reference")
  handoff = ["handoff"] if train and num_hosts(setup.mesh) > 1 else []
  return train + ["prefill", "decode"] + handoff


def check(config, topology_name, mesh_sizes=None, programs=None, preset=None, hbm_bytes=None,
          devices=None, log=print, sizes_only=False):
  """Compiles the programs (sizes_only: only sizes their arguments); returns
  [(Setup, Result)]."""
  devices = devices if devices is not None else topology_devices(topology_name)
  results = []
  for setup in setups(config, devices, mesh_sizes, preset, hbm_bytes, not sizes_only):
    for program in programs or default_programs(config, setup):
      if program not in PROGRAMS:
        raise ValueError(f"--programs: {program!r} is not one of {PROGRAMS}.")
      if program == "reference" and not _grpo_config(setup).uses_reference:
        continue
      log(f"{'sizing' if sizes_only else 'compiling'} {setup.name}{program} ...")
      result = build_program(setup, program, setup.name + program)
      if not result.fits:
        result.advice = advice(setup, result)
      log(format_table(setup, [result]))
      results.append((setup, result))
  return results


def _gib(value):
  return f"{value / GIB:.3f}" if value < GIB / 10 else f"{value / GIB:.2f}"


def describe(setup):
  model = setup.model_config
  training = setup.training
  return (f"{setup.name or 'solver'}: {model.num_params() / 1e9:.2f}B params "
          f"({model.param_dtype}), row_length={training.row_length}, "
          f"samples_per_step={training.samples_per_step}, "
          f"num_microbatches={training.num_microbatches}, mesh={dict(setup.mesh.shape)}"
          f", attention={model.attention}, remat={model.remat}")


def format_table(setup, results):
  header = ("program", "params", "opt state", "KV cache", "temps", "peak", "resident",
            "HBM", "headroom", "compile s", "collectives")
  rows = [header]
  for result in results:
    collectives = " ".join(f"{name}:{count}" for name, count in result.collectives.items())
    bound = "" if result.compiled else ">="  # sizes only: no temporaries counted
    rows.append((result.name, _gib(result.params_bytes), _gib(result.optimizer_bytes),
                 _gib(result.cache_bytes), _gib(result.temp_bytes) if result.compiled else "?",
                 bound + _gib(result.peak_bytes) if result.peak_bytes else "?",
                 _gib(result.resident_bytes), _gib(result.hbm_bytes),
                 "FAILS" if result.error else ("<=" if bound else "")
                 + f"{100 * result.headroom:.0f}%",
                 f"{result.compile_seconds:.0f}" if result.compiled else "-",
                 collectives or "-"))
  widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
  lines = [describe(setup) + "  (GiB per chip)"]
  lines += ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths))
            for row in rows]
  for result in results:
    if result.note:
      lines.append(f"  {result.note}")
    if result.error:
      lines.append(f"  {result.name}: {result.error}")
    if result.advice:
      lines.append(f"  {result.name} does not fit: {result.advice}")
  return "\n".join(lines)


FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=False)
flags.DEFINE_string("topology", "v5p:2x4x4", "TPU topology, gen:AxB[xC].")
flags.DEFINE_string("mesh", "", "Mesh axis sizes overriding config.mesh: data=..,fsdp=..,tensor=..")
flags.DEFINE_list("programs", [], f"Subset of {PROGRAMS} (default: the ones the config uses).")
flags.DEFINE_string("model_preset", "", "models/presets.py name for the model's shapes "
                    "(default: from config.model.path).")
flags.DEFINE_float("hbm_gib", 0.0, "HBM per chip in GiB (default: the chip's).")
flags.DEFINE_string("remat", "", "Override config.model.remat (ModelConfig.remat).")
flags.DEFINE_string("attention", "", "Override config.model.attention.")
flags.DEFINE_integer("num_microbatches", 0, "Override config.training.num_microbatches.")
flags.DEFINE_integer("row_length", 0, "Override config.training.row_length.")
flags.DEFINE_bool("sizes_only", False, "No XLA compile: per program only the bytes per chip of "
                  "its arguments (weights, optimizer state, batch, KV cache) and what stays "
                  "resident, a lower bound on its peak (seconds, not minutes).")


def main(argv):
  del argv
  if FLAGS.config is None:
    raise app.UsageError("--config is required, e.g. --config=configs/whale.py:searchqa")
  config = FLAGS.config
  with config.unlocked():
    for name in ("remat", "attention"):
      if getattr(FLAGS, name):
        config.model[name] = getattr(FLAGS, name)
    for name in ("num_microbatches", "row_length"):
      if getattr(FLAGS, name):
        config.training[name] = getattr(FLAGS, name)
  results = check(config, FLAGS.topology, parse_mesh(FLAGS.mesh), FLAGS.programs or None,
                  FLAGS.model_preset or None, int(FLAGS.hbm_gib * GIB) or None,
                  sizes_only=FLAGS.sizes_only)
  failed = [result for _, result in results if not result.fits]
  print(f"\n{len(results) - len(failed)} of {len(results)} programs "
        + ("may fit (arguments only, no temporaries: compile to know)" if FLAGS.sizes_only
           else "fit") + f" on {FLAGS.topology} with >= {100 * MIN_HEADROOM:.0f}% HBM headroom.")
  for result in failed:
    print(f"  {result.name}: {result.advice or result.error}")
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  app.run(main)
