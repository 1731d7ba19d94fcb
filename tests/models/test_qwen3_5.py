"""Qwen3.5 (hybrid) decoder: transformers parity beyond the generic suite, padding and packing
in the linear layers, cached decoding, sharding, config and cache conventions.

test_hf_parity.py runs the generic checks (padded logits, 16-token greedy, save round trip) on
hf_fixtures.CONFIGS["qwen3_5_untied"]; this file covers what is specific to the hybrid.
"""
import copy
import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.sharding import Mesh

from tests.models import hf_fixtures
from whale_jax.models import ModelConfig
from whale_jax.models import decoder
from whale_jax.models import hf
from whale_jax.models import hybrid_decoder
from whale_jax.models import kv_cache
from whale_jax.models import presets
from whale_jax.parallel import rules

# Distinct sizes: a swapped axis fails loudly instead of broadcasting (vocabulary 64 so that
# the sharded test can split it).
CONFIG = ModelConfig(
    model_type="qwen3_5", vocab_size=64, num_layers=6, embed_dim=40, mlp_dim=56, num_heads=4,
    num_kv_heads=2, head_dim=12, partial_rotary_factor=0.5, tie_embeddings=False,
    layer_types=("linear_attention", "linear_attention", "full_attention") * 2,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
    linear_value_head_dim=6, linear_conv_width=4, rope_theta=10_000.0)
BATCH = 2
# For checks at 1e-5 between two float32 computations of the same function. With random
# weights some heads' delta-rule outputs are tiny (q . k near 0), and the gated RMSNorm after
# the rule scales them to unit size, amplifying float32 rounding up to 1 / sqrt(eps) = 1000x
# at eps 1e-6: the same model's first-token logits then differ by ~2e-5 between a 1- and a
# 70-token forward pass (transformers' own float32 run is 2e-4 away from its float64 run).
# eps 1e-2 caps that at 10x and leaves a noise floor of ~2e-6, as in attention-only models.
WELL_CONDITIONED = CONFIG.replace(rms_norm_eps=1e-2)


@functools.cache
def _jitted(config):
  """Jitted forward and forward_with_cache: compiled once per config and shape and shared by
  the tests (eager calls would recompile the layer scans every time)."""
  return (jax.jit(lambda p, t: decoder.forward(p, config, t)),
          jax.jit(lambda p, t, c, n: decoder.forward_with_cache(p, config, t, c,
                                                                num_new_tokens=n)))


@functools.cache
def _init_params(config):
  """decoder.init_params(config, key 0), jitted (eagerly it compiles op by op) and shared."""
  return jax.jit(decoder.init_params, static_argnums=0)(config, jax.random.key(0))


@functools.cache
def _jitted_full_forward(config):
  return jax.jit(lambda p, tokens, positions, mask, segments: decoder.forward(
      p, config, tokens, positions=positions, attention_mask=mask, segment_ids=segments))


def _forward(params, config, tokens, mask=None, positions=None, segment_ids=None,
             shape=None):
  """decoder.forward logits (numpy) of tokens [B, T].

  The batch is padded with empty rows and on the right with masked tokens up to `shape`, so
  that tests share one compiled function; padding on the right changes no real token's logits.
  """
  tokens = np.asarray(tokens)
  rows, length = tokens.shape
  mask = np.ones_like(tokens) if mask is None else np.asarray(mask)
  if positions is None:
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
  segment_ids = np.ones_like(tokens) if segment_ids is None else np.asarray(segment_ids)
  padding = [(0, (shape or tokens.shape)[0] - rows), (0, (shape or tokens.shape)[1] - length)]
  arrays = [jnp.asarray(np.pad(x, padding), jnp.int32)
            for x in (tokens, positions, mask, segment_ids)]
  logits = _jitted_full_forward(config)(params, *arrays)
  return np.asarray(logits)[:rows, :length]


@pytest.fixture(scope="module")
def periodic(tmp_path_factory):
  directory = tmp_path_factory.mktemp("qwen3_5_untied")
  model = hf_fixtures.build("qwen3_5_untied", directory)
  config, params = hf.load_hf(str(directory))
  return model, config, params, str(directory)


PERIODIC_SHAPE = (2, 80)  # every forward pass on the periodic fixture: two chunks of 64


def _torch_logits(model, tokens):
  """Unpadded rows through transformers; positions 0, 1, ..."""
  with torch.no_grad():
    return model(input_ids=torch.tensor(np.asarray(tokens, np.int64))).logits.float().numpy()


def test_irregular_schedule_matches_transformers(tmp_path):
  """Layer types with no repeating pattern (5 layers: F L L F L), tied, 12 rotary dims."""
  model = hf_fixtures.build("qwen3_5_tied_irregular", tmp_path)
  config, params = hf.load_hf(str(tmp_path))
  assert hybrid_decoder.schedule(config) == (config.layer_types, 1)
  tokens, mask = hf_fixtures.padded_batch(np.random.default_rng(1), [9, 4, 12], 12, left=True)
  expected = hf_fixtures.torch_logits(model, tokens, mask)
  actual = _forward(params, config, tokens, mask)
  real = mask.astype(bool)
  np.testing.assert_allclose(actual[real], expected[real], atol=1e-4, rtol=0)


def test_long_sequences_across_chunks_match_transformers(periodic):
  """80 tokens: two chunks of the delta rule (64 + 16) on both sides."""
  model, config, params, _ = periodic
  tokens = np.random.default_rng(2).integers(3, hf_fixtures.VOCAB_SIZE, size=PERIODIC_SHAPE)
  np.testing.assert_allclose(_forward(params, config, tokens), _torch_logits(model, tokens),
                             atol=1e-4, rtol=0)


def test_padding_in_the_middle_is_skipped_by_linear_layers(periodic):
  """A row with padding between real tokens gives the logits of the row without it: the
  convolution window reaches over the padding and the state neither decays nor learns there.

  (transformers only zeroes padded inputs, which matches at the start or end of a row only.)
  """
  model, config, params, _ = periodic
  real_tokens = np.random.default_rng(3).integers(3, hf_fixtures.VOCAB_SIZE, size=(1, 70))
  tokens = np.concatenate([real_tokens[:, :40], np.full((1, 3), 5), real_tokens[:, 40:]],
                          axis=1)
  mask = np.ones_like(tokens)
  mask[:, 40:43] = 0
  actual = _forward(params, config, tokens, mask, shape=PERIODIC_SHAPE)
  np.testing.assert_allclose(actual[mask.astype(bool)][None], _torch_logits(model, real_tokens),
                             atol=1e-4, rtol=0)


def test_packed_segments_match_separate_transformers_runs(periodic):
  """Sequences packed in one row (segment_ids, positions restarting) = run separately."""
  model, config, params, _ = periodic
  rng = np.random.default_rng(4)
  lengths = (5, 2, 60)  # the 2-token one is shorter than the convolution window
  pieces = [rng.integers(3, hf_fixtures.VOCAB_SIZE, size=(1, n)) for n in lengths]
  segment_ids = np.concatenate([np.full((1, n), i + 1) for i, n in enumerate(lengths)], axis=1)
  positions = np.concatenate([np.arange(n)[None] for n in lengths], axis=1)
  actual = _forward(params, config, np.concatenate(pieces, axis=1), positions=positions,
                    segment_ids=segment_ids, shape=PERIODIC_SHAPE)
  expected = np.concatenate([_torch_logits(model, piece) for piece in pieces], axis=1)
  np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=0)


def test_bfloat16_logits_stay_close_to_float32_transformers(periodic):
  """bfloat16 weights and activations; the delta rule and its state stay float32 inside."""
  model, _, _, directory = periodic
  config, params = hf.load_hf(directory, dtype="bfloat16")
  assert params["linear_layers"]["linear_attention"]["qkv"].dtype == jnp.bfloat16
  tokens = np.random.default_rng(6).integers(3, hf_fixtures.VOCAB_SIZE, size=PERIODIC_SHAPE)
  expected = _torch_logits(model, tokens)
  actual = _forward(params, config, tokens)
  assert actual.dtype == np.float32
  # Stated tolerance: no worse than transformers' own bfloat16 run of the same checkpoint (8
  # layers, 80 tokens: max 0.56, mean 0.034 off its float32 logits, which span about +-4).
  with torch.no_grad():
    reference = copy.deepcopy(model).to(torch.bfloat16)(input_ids=torch.tensor(tokens))
  reference_error = np.abs(reference.logits.float().numpy() - expected)
  error = np.abs(actual - expected)
  assert error.max() <= 1.5 * reference_error.max()
  assert error.mean() <= 1.5 * reference_error.mean()
  assert (actual.argmax(-1) == expected.argmax(-1)).mean() >= 0.9


def test_vision_language_checkpoint_loads_text_decoder(tmp_path, caplog):
  model = hf_fixtures.build_qwen3_5_vision_language(tmp_path)
  with caplog.at_level(logging.WARNING):
    config, params = hf.load_hf(str(tmp_path))
  assert "skipping the vision tower" in caplog.text
  assert config.model_type == "qwen3_5" and not config.tie_embeddings
  tokens = np.random.default_rng(5).integers(3, hf_fixtures.VOCAB_SIZE, size=(3, 12))
  with torch.no_grad():
    expected = model(input_ids=torch.tensor(tokens)).logits.float().numpy()
  np.testing.assert_allclose(_forward(params, config, tokens), expected, atol=1e-4, rtol=0)


CAPACITY = 72


@pytest.mark.parametrize("chunks", [
    (34, 1, 1, 34),
    pytest.param((66, 1, 1, 1, 1), marks=pytest.mark.slow),
    pytest.param((5, 5, 5, 55), marks=pytest.mark.slow)])
def test_recurrent_decoding_equals_chunked_forward(chunks):
  """Chunked prefill, then token-by-token decoding (the recurrence, T == 1) continuing from its
  state and window, then chunked prefill continuing from theirs: the logits of one chunked
  forward pass over 70 tokens (two chunks of 64)."""
  config = WELL_CONDITIONED
  params = _init_params(config)
  tokens = jax.random.randint(jax.random.key(1), (BATCH, 70), 0, config.vocab_size)
  forward, step = _jitted(config)
  full = forward(params, tokens)
  cache = kv_cache.init(config, BATCH, CAPACITY)
  pieces, start = [], 0
  for size in chunks:
    logits, cache = step(params, tokens[:, start:start + size], cache,
                         jnp.full((BATCH,), size, jnp.int32))
    pieces.append(logits)
    start += size
  np.testing.assert_allclose(jnp.concatenate(pieces, axis=1), full, atol=1e-5, rtol=0)
  np.testing.assert_array_equal(cache["length"], [70] * BATCH)


def test_right_padded_prefill_leaves_each_row_state_as_if_unpadded():
  """A right-padded prefill (rows of 2 and 6 tokens) leaves the states and windows that
  feeding each row its own tokens one at a time leaves; the next token's logits are then
  those of a full forward pass."""
  config = WELL_CONDITIONED
  params = _init_params(config)
  tokens = np.asarray(jax.random.randint(jax.random.key(2), (BATCH, 70), 0, config.vocab_size))
  prompt_lengths = np.array([2, 6], np.int32)  # row 0 shorter than the convolution window + 1
  prefill = tokens[:, :34].copy()  # the shapes of the decoding test: shared compilations
  prefill[0, 2:] = 7  # padding with a real token id: only num_new_tokens may hide it
  prefill[1, 6:] = 7
  forward, step = _jitted(config)
  _, cache = step(params, jnp.asarray(prefill), kv_cache.init(config, BATCH, CAPACITY),
                  jnp.asarray(prompt_lengths))
  one_by_one = kv_cache.init(config, BATCH, CAPACITY)
  for t in range(6):  # a row that has no token left gets num_new_tokens 0
    _, one_by_one = step(params, jnp.asarray(prefill[:, t:t + 1]), one_by_one,
                         jnp.asarray((t < prompt_lengths).astype(np.int32)))
  for name in ("recurrent_state", "convolution_window", "length"):
    # Chunked (padded) vs one token at a time: the same sums in another order.
    np.testing.assert_allclose(cache[name], one_by_one[name], atol=1e-5, rtol=0, err_msg=name)
  next_tokens = jnp.asarray(tokens[np.arange(BATCH), prompt_lengths])[:, None]
  logits, cache = step(params, next_tokens, cache, jnp.ones((BATCH,), jnp.int32))
  full = np.asarray(forward(params, jnp.asarray(tokens)))
  np.testing.assert_allclose(logits[:, 0], full[np.arange(BATCH), prompt_lengths], atol=1e-5,
                             rtol=0)


def test_cache_leaves_have_batch_on_axis_one():
  cache = kv_cache.init(CONFIG, 3, 11)
  assert set(cache) == {"key", "value", "length", "convolution_window", "recurrent_state"}
  assert cache["key"].shape == (2, 3, 11, 2, 12)
  assert cache["convolution_window"].shape == (4, 3, 3, 2 * 2 * 8 + 4 * 6)
  assert cache["recurrent_state"].shape == (4, 3, 4, 8, 6)
  assert cache["recurrent_state"].dtype == jnp.float32
  for name in kv_cache.layer_leaves(CONFIG):
    assert cache[name].shape[1] == 3, name
  axes = kv_cache.logical_axes(CONFIG)
  assert set(axes) == set(cache)
  for name, names in axes.items():
    assert len(names) == cache[name].ndim and names[1 if name != "length" else 0] == "batch"


def test_logical_axes_mirror_params_and_count():
  for config in (CONFIG, CONFIG.replace(tie_embeddings=True), presets.get("qwen3_5_tiny")):
    shapes = jax.eval_shape(lambda c=config: decoder.init_params(c, jax.random.key(0)))
    axes = decoder.logical_axes(config)
    is_names = lambda x: isinstance(x, tuple)
    assert jax.tree.structure(shapes) == jax.tree.structure(axes, is_leaf=is_names)
    for shape, names in zip(jax.tree.leaves(shapes), jax.tree.leaves(axes, is_leaf=is_names)):
      assert len(shape.shape) == len(names), (shape, names)
    assert config.num_params() == sum(np.prod(s.shape) for s in jax.tree.leaves(shapes))


def _count_equations(jaxpr):
  count = 0
  for equation in jaxpr.eqns:
    count += 1
    for value in equation.params.values():
      inner = getattr(value, "jaxpr", value)
      if hasattr(inner, "eqns"):
        count += _count_equations(inner)
  return count


def test_program_size_does_not_grow_with_depth():
  """The schedule is scanned: 6 and 24 layers of the same pattern trace to equally many ops."""
  tokens = jnp.zeros((1, 5), jnp.int32)
  sizes = []
  for num_layers in (6, 24):
    config = CONFIG.replace(num_layers=num_layers,
                            layer_types=CONFIG.layer_types[:3] * (num_layers // 3))
    params = jax.eval_shape(lambda c=config: decoder.init_params(c, jax.random.key(0)))
    jaxpr = jax.make_jaxpr(lambda p, c=config: decoder.forward(p, c, tokens))(params)
    sizes.append(_count_equations(jaxpr.jaxpr))
  assert sizes[0] == sizes[1]


@pytest.mark.slow
def test_sharded_forward_and_gradient_equal_unsharded():
  """TRAIN_RULES on a (data 2, fsdp 2, tensor 2) mesh: linear heads split over tensor."""
  config = WELL_CONDITIONED
  params = decoder.init_params(config, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(3), (4, 10), 0, config.vocab_size)

  def loss(params, tokens):
    logits = decoder.forward(params, config, tokens)
    return jnp.mean(jax.nn.log_softmax(logits)[..., 0])

  expected_loss, expected_grads = jax.jit(jax.value_and_grad(loss))(params, tokens)
  mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
  shardings = rules.shardings(decoder.logical_axes(config), mesh, rules.TRAIN_RULES)
  sharded = jax.device_put(params, shardings)
  qkv_spec = sharded["linear_layers"]["linear_attention"]["beta"].sharding.spec
  assert qkv_spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor")
  with rules.activate(mesh, rules.TRAIN_RULES):
    actual_loss, actual_grads = jax.jit(jax.value_and_grad(loss), out_shardings=(
        None, shardings))(sharded, jax.device_put(tokens, rules.shardings(
            ("batch", None), mesh, rules.TRAIN_RULES)))
  np.testing.assert_allclose(actual_loss, expected_loss, atol=1e-6, rtol=0)
  for actual, expected in zip(jax.tree.leaves(actual_grads), jax.tree.leaves(expected_grads)):
    # Cross-device reductions sum in another order: float32 rounding relative to the scale.
    np.testing.assert_allclose(actual, expected, atol=1e-5 * np.abs(expected).max(), rtol=0)


def test_hf_config_round_trip_and_vision_language_config():
  assert ModelConfig.from_hf_dict(CONFIG.to_hf_dict()) == CONFIG
  text = CONFIG.to_hf_dict()
  vision_language = {"model_type": "qwen3_5", "tie_word_embeddings": True,
                     "eos_token_id": 5, "text_config": {**text, "eos_token_id": None}}
  config = ModelConfig.from_hf_dict(vision_language)
  assert config == CONFIG.replace(tie_embeddings=True, eos_token_ids=(5,))


def test_bad_qwen3_5_configs_name_the_field():
  with pytest.raises(ValueError, match="layer_types has 3 entries but num_layers=6"):
    CONFIG.replace(layer_types=CONFIG.layer_types[:3])
  with pytest.raises(ValueError, match="linear_num_value_heads=3 is not a multiple"):
    CONFIG.replace(linear_num_value_heads=3)
  with pytest.raises(ValueError, match="partial_rotary_factor=0.25 with head_dim=12"):
    CONFIG.replace(partial_rotary_factor=0.25)
  with pytest.raises(ValueError, match=r"layer_types contains \['sliding_attention'\]"):
    CONFIG.replace(layer_types=("sliding_attention",) * 6)
  with pytest.raises(ValueError, match="mixture-of-experts"):
    ModelConfig.from_hf_dict({**CONFIG.to_hf_dict(), "num_experts": 8})
  with pytest.raises(ValueError, match="only model_type='qwen3_5'"):
    ModelConfig(vocab_size=8, num_layers=1, embed_dim=8, mlp_dim=8, num_heads=1,
                num_kv_heads=1, head_dim=8, layer_types=("linear_attention",))
  with pytest.raises(ValueError, match="Unknown model preset 'qwen3_5_7b'"):
    presets.get("qwen3_5_7b")
