"""Hugging Face checkpoints: load config.json + safetensors into whale_jax params, and back.

  config, params = load_hf(path, dtype="float32", mesh=None)
  save_hf(path, config, params)

Loading streams one tensor at a time: each whale_jax parameter is built with
`jax.make_array_from_callback`, whose callback reads, for one device shard, only the
Hugging Face tensors (one per layer) that the shard covers. No full host copy of the model
is ever made, and on a multi-host mesh each host reads only what its devices hold.

Name map (i = layer; whale_jax layout in brackets, HF stores Linear weights as [out, in]):
  model.embed_tokens.weight                 embedding [V, D]
  model.layers.i.input_layernorm.weight     layers.attention_norm [L, D]
  model.layers.i.self_attn.q_proj.weight    layers.attention.query [L, D, N, H]  (also k, v)
  model.layers.i.self_attn.q_proj.bias      layers.attention.query_bias [L, N, H] (also k, v)
  model.layers.i.self_attn.o_proj.weight    layers.attention.output [L, N, H, D]
  model.layers.i.self_attn.o_proj.bias      layers.attention.output_bias [L, D]
  model.layers.i.self_attn.q_norm.weight    layers.attention.query_norm [L, H]  (also k)
  model.layers.i.post_attention_layernorm.weight   layers.mlp_norm [L, D]
  model.layers.i.mlp.{gate,up,down}_proj.weight    layers.mlp.{gate,up,down}
  model.norm.weight                         final_norm [D]
  lm_head.weight                            unembedding [D, V] (untied models only)

Qwen3.5 (model_type "qwen3_5"): layer i is stacked in "linear_layers" or "attention_layers" at
its position among the layers of its kind (see hybrid_decoder.py); all norms keep the
checkpoint's zero-centered weights. Per layer, besides the norms and MLP above:
  linear_attn.in_proj_qkv.weight [C, D]       linear_layers.linear_attention.qkv [L, D, C]
  linear_attn.conv1d.weight [C, 1, W]         .convolution [L, W, C]
  linear_attn.in_proj_b / in_proj_a.weight    .beta / .decay [L, D, N]
  linear_attn.dt_bias / A_log [N]             .decay_bias / .log_decay_rate [L, N]
  linear_attn.in_proj_z.weight [N * E, D]     .output_gate [L, D, N, E]
  linear_attn.norm.weight [E]                 .norm [L, E]
  linear_attn.out_proj.weight [D, N * E]      .output [L, N, E, D]
  self_attn.q_proj.weight [N * 2H, D]         attention_layers.attention.query_and_gate
                                              [L, D, N, 2, H] (per head: query, then gate)
  self_attn.{k,v,o}_proj, q_norm, k_norm      as above, under attention_layers.attention
A vision-language checkpoint (config.json with a text_config, tensors under
model.language_model.*) loads its text decoder; the vision tower (model.visual.*) and the
multi-token-prediction head (mtp.*) are skipped with a log message. save_hf writes a text-only
Qwen3_5ForCausalLM checkpoint.
"""
import json
import os
import shutil
import tempfile

from absl import logging
import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding
from safetensors import safe_open
from safetensors.numpy import save_file

from whale_jax.models import config as config_lib
from whale_jax.models import decoder
from whale_jax.parallel import distributed
from whale_jax.parallel import rules as rules_lib

DEFAULT_MAX_SHARD_BYTES = 4 * 1024**3
_INDEX_FILE = "model.safetensors.index.json"
_LANGUAGE_MODEL = "model.language_model."
_SKIPPED_PARTS = {"model.visual.": "vision tower", "mtp.": "multi-token-prediction head"}


def hf_layout(config):
  """{params path: (HF name with {i} for the layer, to_whale, to_hf)} for every parameter.

  to_whale maps one HF tensor (numpy) to one whale_jax slice (per layer for stacked params);
  to_hf is its inverse.
  """
  d, n, k, h, f = (config.embed_dim, config.num_heads, config.num_kv_heads, config.head_dim,
                   config.mlp_dim)
  identity = (lambda w: w, lambda w: w)
  transpose = (lambda w: w.T, lambda w: w.T)

  def heads_in(num):  # [num * H, D] -> [D, num, H]
    return (lambda w: w.T.reshape(d, num, h), lambda w: w.reshape(d, num * h).T)

  def heads_bias(num):  # [num * H] -> [num, H]
    return (lambda w: w.reshape(num, h), lambda w: w.reshape(num * h))

  if config.is_hybrid:
    return _hybrid_layout(config)
  prefix = "model.layers.{i}."
  layout = {
      ("embedding",): ("model.embed_tokens.weight", *identity),
      ("final_norm",): ("model.norm.weight", *identity),
      ("layers", "attention_norm"): (prefix + "input_layernorm.weight", *identity),
      ("layers", "mlp_norm"): (prefix + "post_attention_layernorm.weight", *identity),
      ("layers", "attention", "query"): (prefix + "self_attn.q_proj.weight", *heads_in(n)),
      ("layers", "attention", "key"): (prefix + "self_attn.k_proj.weight", *heads_in(k)),
      ("layers", "attention", "value"): (prefix + "self_attn.v_proj.weight", *heads_in(k)),
      ("layers", "attention", "output"): (prefix + "self_attn.o_proj.weight",
                                          lambda w: w.T.reshape(n, h, d),
                                          lambda w: w.reshape(n * h, d).T),
      ("layers", "mlp", "gate"): (prefix + "mlp.gate_proj.weight", *transpose),
      ("layers", "mlp", "up"): (prefix + "mlp.up_proj.weight", *transpose),
      ("layers", "mlp", "down"): (prefix + "mlp.down_proj.weight", *transpose),
  }
  if config.qkv_bias:
    layout[("layers", "attention", "query_bias")] = (prefix + "self_attn.q_proj.bias",
                                                     *heads_bias(n))
    layout[("layers", "attention", "key_bias")] = (prefix + "self_attn.k_proj.bias",
                                                   *heads_bias(k))
    layout[("layers", "attention", "value_bias")] = (prefix + "self_attn.v_proj.bias",
                                                     *heads_bias(k))
  if config.output_bias:
    layout[("layers", "attention", "output_bias")] = (prefix + "self_attn.o_proj.bias",
                                                      *identity)
  if config.qk_norm:
    layout[("layers", "attention", "query_norm")] = (prefix + "self_attn.q_norm.weight",
                                                     *identity)
    layout[("layers", "attention", "key_norm")] = (prefix + "self_attn.k_norm.weight",
                                                   *identity)
  if not config.tie_embeddings:
    layout[("unembedding",)] = ("lm_head.weight", *transpose)
  return layout


def _hybrid_layout(config):
  """hf_layout() for Qwen3.5; see the module docstring for the names."""
  d, n, k, h = config.embed_dim, config.num_heads, config.num_kv_heads, config.head_dim
  value_heads, value_dim = config.linear_num_value_heads, config.linear_value_head_dim
  identity = (lambda w: w, lambda w: w)
  transpose = (lambda w: w.T, lambda w: w.T)
  prefix = "model.layers.{i}."
  layout = {("embedding",): ("model.embed_tokens.weight", *identity),
            ("final_norm",): ("model.norm.weight", *identity)}
  if not config.tie_embeddings:
    layout[("unembedding",)] = ("lm_head.weight", *transpose)
  for stack, present in (("linear_layers", config.linear_layer_indices),
                         ("attention_layers", config.attention_layer_indices)):
    if present:
      layout.update({
          (stack, "attention_norm"): (prefix + "input_layernorm.weight", *identity),
          (stack, "mlp_norm"): (prefix + "post_attention_layernorm.weight", *identity),
          (stack, "mlp", "gate"): (prefix + "mlp.gate_proj.weight", *transpose),
          (stack, "mlp", "up"): (prefix + "mlp.up_proj.weight", *transpose),
          (stack, "mlp", "down"): (prefix + "mlp.down_proj.weight", *transpose)})
  if config.linear_layer_indices:
    linear = ("linear_layers", "linear_attention")
    prefix_linear = prefix + "linear_attn."
    layout.update({
        (*linear, "qkv"): (prefix_linear + "in_proj_qkv.weight", *transpose),
        (*linear, "convolution"): (prefix_linear + "conv1d.weight", lambda w: w[:, 0, :].T,
                                   lambda w: w.T[:, None, :]),
        (*linear, "beta"): (prefix_linear + "in_proj_b.weight", *transpose),
        (*linear, "decay"): (prefix_linear + "in_proj_a.weight", *transpose),
        (*linear, "decay_bias"): (prefix_linear + "dt_bias", *identity),
        (*linear, "log_decay_rate"): (prefix_linear + "A_log", *identity),
        (*linear, "output_gate"): (prefix_linear + "in_proj_z.weight",
                                   lambda w: w.T.reshape(d, value_heads, value_dim),
                                   lambda w: w.reshape(d, value_heads * value_dim).T),
        (*linear, "norm"): (prefix_linear + "norm.weight", *identity),
        (*linear, "output"): (prefix_linear + "out_proj.weight",
                              lambda w: w.T.reshape(value_heads, value_dim, d),
                              lambda w: w.reshape(value_heads * value_dim, d).T),
    })
  if config.attention_layer_indices:
    full = ("attention_layers", "attention")
    layout.update({
        (*full, "query_and_gate"): (prefix + "self_attn.q_proj.weight",
                                    lambda w: w.T.reshape(d, n, 2, h),
                                    lambda w: w.reshape(d, n * 2 * h).T),
        (*full, "key"): (prefix + "self_attn.k_proj.weight", lambda w: w.T.reshape(d, k, h),
                         lambda w: w.reshape(d, k * h).T),
        (*full, "value"): (prefix + "self_attn.v_proj.weight", lambda w: w.T.reshape(d, k, h),
                           lambda w: w.reshape(d, k * h).T),
        (*full, "output"): (prefix + "self_attn.o_proj.weight", lambda w: w.T.reshape(n, h, d),
                            lambda w: w.reshape(n * h, d).T),
        (*full, "query_norm"): (prefix + "self_attn.q_norm.weight", *identity),
        (*full, "key_norm"): (prefix + "self_attn.k_norm.weight", *identity),
    })
  return layout


def stacked_layer_indices(config, path):
  """HF layer indices of a stacked params path, in stack order; None for unstacked params."""
  if path[0] == "layers":
    return tuple(range(config.num_layers))
  if path[0] == "linear_layers":
    return config.linear_layer_indices
  if path[0] == "attention_layers":
    return config.attention_layer_indices
  return None


def _get_path(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def _set_path(tree, path, value):
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def read_hf_config(path) -> dict:
  config_path = os.path.join(path, "config.json")
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f"{config_path} does not exist; load_hf needs a Hugging Face model "
                            "directory with config.json and *.safetensors.")
  with open(config_path) as f:
    try:
      hf_config = json.load(f)
    except json.JSONDecodeError as error:
      raise ValueError(f"{config_path} line {error.lineno} column {error.colno}: not valid "
                       f"JSON ({error.msg}); the file is corrupt or truncated.") from None
  if not isinstance(hf_config, dict):
    raise ValueError(f"{config_path} holds a JSON {type(hf_config).__name__}; expected the "
                     "model's config object.")
  return hf_config


def _generation_eos_ids(path):
  generation_path = os.path.join(path, "generation_config.json")
  if not os.path.isfile(generation_path):
    return ()
  with open(generation_path) as f:
    eos = json.load(f).get("eos_token_id")
  return () if eos is None else tuple(eos) if isinstance(eos, list) else (eos,)


def _open_safetensors(file_path):
  """safe_open(file_path), or a ValueError naming a truncated or corrupt file."""
  try:
    return safe_open(file_path, framework="numpy")
  except Exception as error:  # pylint: disable=broad-except  # SafetensorError, OSError
    size = os.path.getsize(file_path)
    raise ValueError(f"{file_path} ({size} bytes) is not a readable safetensors file "
                     f"({error}); it is probably truncated or corrupt: download or copy it "
                     "again.") from None


class _TensorReader:
  """Finds each tensor's file (through the index file when there is one) and reads it."""

  def __init__(self, path):
    self.path = path
    index_path = os.path.join(path, _INDEX_FILE)
    if os.path.isfile(index_path):
      with open(index_path) as f:
        weight_map = json.load(f)["weight_map"]
      self.files = sorted(set(weight_map.values()))
    else:
      self.files = sorted(name for name in os.listdir(path) if name.endswith(".safetensors"))
      if not self.files:
        raise FileNotFoundError(f"No *.safetensors files in {path}; load_hf reads only "
                                "safetensors checkpoints (convert .bin files with transformers "
                                "`save_pretrained(..., safe_serialization=True)`).")
      weight_map = None
    self.handles = {}
    for name in self.files:
      file_path = os.path.join(path, name)
      if not os.path.isfile(file_path):
        raise FileNotFoundError(f"{index_path} lists {name}, which is missing from {path}.")
      self.handles[name] = _open_safetensors(file_path)
    if weight_map is None:
      weight_map = {key: name for name, handle in self.handles.items() for key in handle.keys()}
    else:
      for key, name in weight_map.items():
        if key not in self.handles[name].keys():
          raise ValueError(f"{index_path} says tensor {key!r} is in {name}, but it is not.")
    self.weight_map = weight_map
    # Checkpoints of the bare model (no LM head wrapper) lack the "model." prefix.
    self.prefix_strip = not any(key.startswith("model.") for key in weight_map)
    # Vision-language checkpoints keep the text decoder under "model.language_model.".
    self.language_model = any(key.startswith(_LANGUAGE_MODEL) for key in weight_map)

  def location(self, name):
    """(file, name in file) of a tensor, or raises naming what is missing."""
    key = name[len("model."):] if self.prefix_strip and name.startswith("model.") else name
    if self.language_model and key.startswith("model."):
      key = _LANGUAGE_MODEL + key[len("model."):]
    if key not in self.weight_map:
      raise ValueError(f"Tensor {name!r} is missing from the checkpoint in {self.path} "
                       f"(files: {', '.join(self.files)}).")
    return self.weight_map[key], key

  def shape(self, name):
    file, key = self.location(name)
    return tuple(self.handles[file].get_slice(key).get_shape())

  def read(self, name):
    file, key = self.location(name)
    try:
      return self.handles[file].get_tensor(key)
    except Exception as error:  # pylint: disable=broad-except  # SafetensorError, OSError
      raise ValueError(f"Tensor {key!r} of {os.path.join(self.path, file)} cannot be read "
                       f"({error}); the file is probably corrupt: download or copy it "
                       "again.") from None


def _check_shapes(reader, config, layout, shapes):
  """Every tensor present with its expected shape, before any data is read."""
  expected = {}
  for path, (name, _, to_hf) in layout.items():
    shape = _get_path(shapes, path).shape
    indices = stacked_layer_indices(config, path)
    if indices is not None:
      shape = shape[1:]
      names = [name.format(i=i) for i in indices]
    else:
      names = [name]
    hf_shape = jax.eval_shape(to_hf, jax.ShapeDtypeStruct(shape, np.float32)).shape
    for hf_name in names:
      expected[hf_name] = hf_shape
  for hf_name, hf_shape in expected.items():
    actual = reader.shape(hf_name)
    if actual != hf_shape:
      file, _ = reader.location(hf_name)
      raise ValueError(f"Tensor {hf_name!r} in {os.path.join(reader.path, file)} has shape "
                       f"{list(actual)}, but config.json implies {list(hf_shape)}.")
  return expected


def decoder_shapes(config):
  """ShapeDtypeStructs of the params tree, without allocating anything."""
  return jax.eval_shape(lambda: decoder.init_params(config, jax.random.key(0)))


def load_hf(path, dtype="float32", mesh=None, rules=None, compute_dtype=None, **overrides):
  """Loads a Hugging Face causal LM directory.

  Args:
    path: directory with config.json and model.safetensors or sharded safetensors + index.
    dtype: parameter dtype ("float32" or "bfloat16"); tensors are cast on the host per shard.
    mesh: if given, each parameter is created straight in its sharding on this mesh.
    rules: logical axis rules for the mesh (default rules.TRAIN_RULES).
    compute_dtype: activation dtype (default = dtype).
    overrides: further ModelConfig fields.
  Returns:
    (ModelConfig, params)
  """
  hf_config = read_hf_config(path)
  generation_eos = _generation_eos_ids(path)
  config = config_lib.ModelConfig.from_hf_dict(hf_config, param_dtype=dtype,
                                               compute_dtype=compute_dtype or dtype, **overrides)
  if generation_eos:
    merged = tuple(dict.fromkeys(config.eos_token_ids + generation_eos))
    config = config.replace(eos_token_ids=merged)
  reader = _TensorReader(path)
  layout = hf_layout(config)
  shapes = decoder_shapes(config)
  expected = _check_shapes(reader, config, layout, shapes)
  used = {reader.location(name)[1] for name in expected}
  ignored = sorted(key for key in reader.weight_map if key not in used)
  ignored = [key for key in ignored if not key.endswith("rotary_emb.inv_freq")]
  for part_prefix, part in _SKIPPED_PARTS.items():
    skipped = [key for key in ignored if key.startswith(part_prefix)]
    if skipped:
      logging.warning("load_hf(%s): loading the text decoder only; skipping the %s (%d tensors "
                      "under %s*).", path, part, len(skipped), part_prefix)
      ignored = [key for key in ignored if not key.startswith(part_prefix)]
  if ignored and not (ignored == ["lm_head.weight"] and config.tie_embeddings):
    logging.warning("load_hf(%s): ignoring %d tensors not used by whale_jax: %s", path,
                    len(ignored), ", ".join(ignored[:8]) + (" ..." if len(ignored) > 8 else ""))

  axes = decoder.logical_axes(config)
  rules = rules or rules_lib.TRAIN_RULES
  params = {}
  for tree_path, (name, to_whale, _) in layout.items():
    shape = _get_path(shapes, tree_path).shape
    target_dtype = np.dtype(config.param_jnp_dtype)
    if mesh is None:
      sharding = SingleDeviceSharding(jax.local_devices()[0])
    else:
      sharding = NamedSharding(mesh, rules_lib.spec(_get_path(axes, tree_path), rules))
    layer_indices = stacked_layer_indices(config, tree_path)
    memo = {}

    def callback(index, name=name, to_whale=to_whale, layer_indices=layer_indices, shape=shape,
                 target_dtype=target_dtype, memo=memo):
      key = tuple((s.start, s.stop, s.step) for s in index)
      if key not in memo:
        if layer_indices is not None:
          layers = [layer_indices[j] for j in range(*index[0].indices(shape[0]))]
          pieces = [to_whale(reader.read(name.format(i=i)))[index[1:]] for i in layers]
          memo[key] = np.stack(pieces).astype(target_dtype)
        else:
          memo[key] = np.ascontiguousarray(to_whale(reader.read(name))[index]
                                           ).astype(target_dtype)
      return memo[key]

    _set_path(params, tree_path, jax.make_array_from_callback(shape, sharding, callback))
    memo.clear()
  return config, params


def _host_array(x):
  """A numpy copy of a (possibly multi-host sharded) array (its bytes from other hosts
  counted in distributed.TRAFFIC)."""
  return distributed.allgather_global(x, "hf.save_hf")


def save_hf(path, config, params, max_shard_bytes=DEFAULT_MAX_SHARD_BYTES, dtype=None):
  """Writes config.json + safetensors (sharded with an index above max_shard_bytes).

  Files are written to a temporary directory next to `path` and moved in one by one, so a
  crash never leaves a half-written file; stale shards of an earlier save are removed.
  On a multi-host run every process must call this; only process 0 writes.

  Args:
    dtype: tensor dtype in the files (default config.param_dtype).
  """
  dtype = np.dtype(dtype or config.param_dtype)
  layout = hf_layout(config)
  hf_config = config.to_hf_dict()
  hf_config["torch_dtype"] = hf_config["dtype"] = str(dtype)
  writer = jax.process_index() == 0
  shards, current, current_bytes = [], {}, 0
  for tree_path, (name, _, to_hf) in layout.items():
    array = _get_path(params, tree_path)
    layer_indices = stacked_layer_indices(config, tree_path)
    for position, i in enumerate(layer_indices if layer_indices is not None else [0]):
      tensor = _host_array(array[position] if layer_indices is not None else array)
      tensor = np.ascontiguousarray(to_hf(tensor).astype(dtype))
      if current and current_bytes + tensor.nbytes > max_shard_bytes:
        shards.append(current)
        current, current_bytes = {}, 0
      current[name.format(i=i)] = tensor
      current_bytes += tensor.nbytes
  shards.append(current)
  if not writer:
    return
  os.makedirs(path, exist_ok=True)
  staging = tempfile.mkdtemp(prefix=".save_hf-", dir=path)
  try:
    if len(shards) == 1:
      names = ["model.safetensors"]
    else:
      names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    for name, shard in zip(names, shards):
      save_file(shard, os.path.join(staging, name), metadata={"format": "pt"})
    files = list(names)
    if len(shards) > 1:
      index = {"metadata": {"total_size": sum(t.nbytes for s in shards for t in s.values())},
               "weight_map": {key: name for name, shard in zip(names, shards) for key in shard}}
      with open(os.path.join(staging, _INDEX_FILE), "w") as f:
        json.dump(index, f, indent=2)
      files.append(_INDEX_FILE)
    with open(os.path.join(staging, "config.json"), "w") as f:
      json.dump(hf_config, f, indent=2)
    files.append("config.json")
    for name in files:  # config.json last: a reader never sees it before the weights
      os.replace(os.path.join(staging, name), os.path.join(path, name))
    for name in os.listdir(path):  # stale weights of an earlier save
      if (name.endswith(".safetensors") or name == _INDEX_FILE) and name not in files:
        os.remove(os.path.join(path, name))
  finally:
    shutil.rmtree(staging, ignore_errors=True)
