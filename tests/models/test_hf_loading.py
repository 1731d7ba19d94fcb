"""load_hf: sharded files, placement on a mesh, bfloat16, and errors that say what is wrong."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from safetensors.numpy import load_file, save_file

from tests.models import hf_fixtures
from whale_jax.models import decoder
from whale_jax.models import hf
from whale_jax.parallel import rules


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
  directory = tmp_path_factory.mktemp("qwen3")
  model = hf_fixtures.build("qwen3_untied", directory)
  return directory, model


def _copy_with(directory, target, change):
  """Copies a single-file checkpoint to target, letting change(tensors) edit the tensors."""
  target.mkdir()
  tensors = load_file(str(directory / "model.safetensors"))
  change(tensors)
  save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
  (target / "config.json").write_text((directory / "config.json").read_text())
  return target


def test_sharded_checkpoint_with_index_loads_same_params(qwen3, tmp_path):
  directory, _ = qwen3
  config, params = hf.load_hf(str(directory))
  hf.save_hf(str(tmp_path), config, params, max_shard_bytes=50_000)
  index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
  assert len(set(index["weight_map"].values())) > 3
  _, reloaded = hf.load_hf(str(tmp_path))
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(reloaded)):
    np.testing.assert_array_equal(a, b)


def test_load_onto_mesh_places_each_tensor_in_its_sharding(qwen3):
  directory, _ = qwen3
  config, params = hf.load_hf(str(directory))
  mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
  _, sharded = hf.load_hf(str(directory), mesh=mesh, rules=rules.TRAIN_RULES)
  query = sharded["layers"]["attention"]["query"]  # [L, D, N, H]: D over fsdp, N over tensor
  assert query.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor", None)
  assert query.addressable_shards[0].data.shape == (3, 24, 2, 20)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(sharded)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bfloat16_logits_stay_close_to_float32_transformers(qwen3):
  directory, model = qwen3
  tokens, mask = hf_fixtures.padded_batch(np.random.default_rng(4), [8, 12], 12)
  expected = hf_fixtures.torch_logits(model, tokens, mask)
  real = mask.astype(bool)
  for dtype, compute_dtype in (("bfloat16", "bfloat16"), ("float32", "bfloat16")):
    config, params = hf.load_hf(str(directory), dtype=dtype, compute_dtype=compute_dtype)
    assert params["embedding"].dtype == jnp.dtype(dtype)
    actual = np.asarray(decoder.forward(params, config, jnp.asarray(tokens, jnp.int32),
                                        attention_mask=jnp.asarray(mask)))
    assert actual.dtype == np.float32
    # Stated tolerance: logits here span about +-4; bfloat16 keeps 8 mantissa bits.
    assert np.abs(actual[real] - expected[real]).max() <= 0.15
    assert (actual[real].argmax(-1) == expected[real].argmax(-1)).mean() >= 0.9


def test_unsupported_model_type_lists_supported(qwen3, tmp_path):
  directory, _ = qwen3
  target = _copy_with(directory, tmp_path / "gpt2", lambda tensors: None)
  config = json.loads((target / "config.json").read_text())
  config["model_type"] = "gpt2"
  (target / "config.json").write_text(json.dumps(config))
  with pytest.raises(ValueError, match=r"model_type='gpt2'.*Supported model types: qwen3"):
    hf.load_hf(str(target))


def test_missing_tensor_is_named(qwen3, tmp_path):
  directory, _ = qwen3
  name = "model.layers.1.mlp.up_proj.weight"
  target = _copy_with(directory, tmp_path / "missing", lambda tensors: tensors.pop(name))
  with pytest.raises(ValueError, match=f"Tensor '{name}' is missing.*model.safetensors"):
    hf.load_hf(str(target))


def test_misshapen_tensor_is_named_with_both_shapes(qwen3, tmp_path):
  directory, _ = qwen3
  name = "model.layers.2.self_attn.k_proj.weight"

  def shrink(tensors):
    tensors[name] = tensors[name][:-1]

  target = _copy_with(directory, tmp_path / "misshapen", shrink)
  with pytest.raises(ValueError, match=rf"Tensor '{name}' in .*model.safetensors has shape "
                                       r"\[39, 48\], but config.json implies \[40, 48\]"):
    hf.load_hf(str(target))


def test_missing_shard_file_is_named(qwen3, tmp_path):
  directory, _ = qwen3
  config, params = hf.load_hf(str(directory))
  hf.save_hf(str(tmp_path), config, params, max_shard_bytes=50_000)
  second = sorted(tmp_path.glob("model-00002-of-*.safetensors"))[0]
  second.unlink()
  with pytest.raises(FileNotFoundError, match=second.name):
    hf.load_hf(str(tmp_path))


@pytest.mark.parametrize("damage", ["truncated", "header_only", "garbage", "empty"])
def test_truncated_or_corrupt_safetensors_names_the_file(qwen3, tmp_path, damage):
  import shutil
  import time
  directory, _ = qwen3
  target = tmp_path / "damaged"
  shutil.copytree(directory, target)
  weights = target / "model.safetensors"
  data = weights.read_bytes()
  weights.write_bytes({"truncated": data[:len(data) * 2 // 3], "header_only": data[:40],
                       "garbage": b"\x93not a safetensors file" * 8, "empty": b""}[damage])
  before = sorted(p.name for p in target.iterdir())
  started = time.perf_counter()
  with pytest.raises(ValueError, match="model.safetensors .* is not a readable safetensors "
                     "file .*truncated or corrupt"):
    hf.load_hf(str(target))
  assert time.perf_counter() - started < 10
  assert sorted(p.name for p in target.iterdir()) == before  # nothing written beside it


def test_corrupt_config_json_names_the_file_and_line(qwen3, tmp_path):
  import shutil
  directory, _ = qwen3
  target = tmp_path / "bad_config"
  shutil.copytree(directory, target)
  (target / "config.json").write_text('{"model_type": "qwen3",\n "vocab_size": }')
  with pytest.raises(ValueError, match=r"config.json line 2 column \d+: not valid JSON"):
    hf.load_hf(str(target))
