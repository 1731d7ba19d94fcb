"""Mesh building, validation messages and placement on eight fake CPU devices."""
import jax
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec

from whale_jax.models import config as config_lib
from whale_jax.models import decoder
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules

MODEL = config_lib.ModelConfig(vocab_size=96, num_layers=2, embed_dim=16, mlp_dim=24,
                               num_heads=4, num_kv_heads=2, head_dim=8)


@pytest.mark.parametrize("sizes, expected", [
    (dict(data=-1, fsdp=4, tensor=2), {"data": 1, "fsdp": 4, "tensor": 2}),
    (dict(data=2, fsdp=-1, tensor=1), {"data": 2, "fsdp": 4, "tensor": 1}),
    (dict(data=1, fsdp=1, tensor=-1), {"data": 1, "fsdp": 1, "tensor": 8}),
    (dict(data=2, fsdp=2, tensor=2), {"data": 2, "fsdp": 2, "tensor": 2}),
])
def test_make_mesh_fills_minus_one_and_uses_auto_axes(sizes, expected):
  mesh = mesh_lib.make_mesh(**sizes)
  assert dict(mesh.shape) == expected
  assert mesh.axis_names == ("data", "fsdp", "tensor")
  assert tuple(mesh.axis_types) == (AxisType.Auto,) * 3


@pytest.mark.parametrize("sizes, words", [
    (dict(data=-1, fsdp=-1), "at most one axis may be -1"),
    (dict(data=3, fsdp=1, tensor=1), r"data \* fsdp \* tensor = 8"),
    (dict(data=-1, fsdp=3), "does not divide 8"),
    (dict(data=0), "positive integer or -1"),
])
def test_make_mesh_errors_say_what_to_change(sizes, words):
  with pytest.raises(ValueError, match=words):
    mesh_lib.make_mesh(**sizes)


def test_validate_model_names_the_field_and_the_fix():
  mesh = mesh_lib.make_mesh(data=2, fsdp=1, tensor=4)
  with pytest.raises(ValueError, match=r"num_kv_heads=2 is not divisible by the 4 devices"):
    mesh_lib.validate_model(MODEL, mesh, rules.TRAIN_RULES)
  mesh_lib.validate_model(MODEL, mesh_lib.make_mesh(data=1, fsdp=4, tensor=2), rules.TRAIN_RULES)


def test_validate_model_checks_linear_attention_heads_of_hybrids():
  hybrid = config_lib.ModelConfig(
      model_type="qwen3_5", vocab_size=96, num_layers=4, embed_dim=16, mlp_dim=24, num_heads=8,
      num_kv_heads=4, head_dim=8, partial_rotary_factor=0.5,
      layer_types=("linear_attention",) * 3 + ("full_attention",), linear_num_key_heads=2,
      linear_num_value_heads=6, linear_key_head_dim=4, linear_value_head_dim=4,
      linear_conv_width=4)
  mesh_lib.validate_model(hybrid, mesh_lib.make_mesh(data=4, fsdp=1, tensor=2), rules.TRAIN_RULES)
  with pytest.raises(ValueError, match=r"linear_num_value_heads=6 is not divisible by the 4"):
    mesh_lib.validate_model(hybrid, mesh_lib.make_mesh(data=2, fsdp=1, tensor=4),
                            rules.TRAIN_RULES)


def test_validate_shardable_names_the_leaf_and_the_axis():
  mesh = mesh_lib.make_mesh(data=1, fsdp=4, tensor=2)
  shapes = {"mixer": {"beta": np.zeros((2, 16, 3)), "gate": np.zeros((2, 16, 4))}}
  names = {"mixer": {"beta": ("layers", "embed", "linear_heads"),
                     "gate": ("layers", "embed", "mlp")}}
  with pytest.raises(ValueError, match=r"\['mixer'\]\['beta'\] has shape \(2, 16, 3\); "
                                       r"its axis 'linear_heads' of size 3 is not divisible"):
    mesh_lib.validate_shardable(shapes, names, mesh, {**rules.TRAIN_RULES,
                                                      "linear_heads": "tensor"})
  mesh_lib.validate_shardable(shapes, names, mesh, {**rules.TRAIN_RULES, "linear_heads": None})


def test_validate_batch_size_counts_data_fsdp_and_microbatches():
  mesh = mesh_lib.make_mesh(data=2, fsdp=2, tensor=2)
  mesh_lib.validate_batch_size(8, mesh, rules.TRAIN_RULES, num_microbatches=2)
  with pytest.raises(ValueError, match=r"batch_size=6 .* Use a multiple of 8 \(e.g. 8\)"):
    mesh_lib.validate_batch_size(6, mesh, rules.TRAIN_RULES, num_microbatches=2)
  with pytest.raises(ValueError, match="num_microbatches=0"):
    mesh_lib.validate_batch_size(8, mesh, rules.TRAIN_RULES, num_microbatches=0)


def test_place_puts_each_parameter_in_its_logical_sharding():
  mesh = mesh_lib.make_mesh(data=1, fsdp=4, tensor=2)
  shapes = jax.eval_shape(lambda: decoder.init_params(MODEL, jax.random.key(0)))
  rng = np.random.default_rng(0)
  params = jax.tree.map(lambda shape: rng.normal(size=shape.shape).astype(shape.dtype), shapes)
  placed = mesh_lib.place(params, decoder.logical_axes(MODEL), mesh, rules.TRAIN_RULES)
  query = placed["layers"]["attention"]["query"]  # [L, D, N, H]
  assert query.sharding.spec == PartitionSpec(None, "fsdp", "tensor", None)
  assert query.addressable_shards[0].data.shape == (2, 16 // 4, 4 // 2, 8)
  np.testing.assert_array_equal(np.asarray(query), np.asarray(params["layers"]["attention"]
                                                              ["query"]))


def test_place_batch_splits_rows_over_data_and_fsdp():
  mesh = mesh_lib.make_mesh(data=2, fsdp=2, tensor=2)
  batch = {"tokens": np.arange(8 * 3, dtype=np.int32).reshape(8, 3)}
  placed = mesh_lib.place_batch(batch, mesh, rules.TRAIN_RULES)
  assert placed["tokens"].sharding.spec == PartitionSpec(("data", "fsdp"), None)
  assert placed["tokens"].addressable_shards[0].data.shape == (2, 3)


@pytest.mark.parametrize("sizes,local", [
    (dict(data=2, fsdp=2, tensor=2), dict(data=4, fsdp=1, tensor=2)),
    (dict(data=1, fsdp=8, tensor=1), dict(data=8, fsdp=1, tensor=1)),
    (dict(data=1, fsdp=1, tensor=8), dict(data=1, fsdp=1, tensor=8)),
])
def test_host_local_mesh_keeps_tensor_and_puts_the_rest_on_data(sizes, local):
  mesh = mesh_lib.make_mesh(**sizes)
  assert not mesh_lib.spans_processes(mesh)  # one process here: every device is local
  local_mesh = mesh_lib.host_local_mesh(mesh)
  assert dict(local_mesh.shape) == local
  assert {d.process_index for d in local_mesh.devices.flat} == {jax.process_index()}
