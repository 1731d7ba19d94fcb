"""platform_tuning.tuned: a platform's compile choices, taken only where the config keeps the
field's default."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.train import random_params
from whale_jax.models import config as config_lib
from whale_jax.parallel import mesh as mesh_lib
from whale_jax.parallel import rules
from whale_jax.train import platform_tuning
from whale_jax.train import rsft
from whale_jax.train import step as step_lib
from whale_jax.train import train_state

CONFIG = config_lib.ModelConfig(vocab_size=11, num_layers=2, embed_dim=8, mlp_dim=8,
                                num_heads=2, num_kv_heads=1, head_dim=4)


def test_cpu_tuning_replaces_the_defaults():
  tuned = platform_tuning.tuned(CONFIG, "cpu")
  assert (tuned.attention, tuned.attention_block_size, tuned.unroll_layers) == (
      "blockwise", 256, True)
  assert tuned.replace(attention="auto", attention_block_size=512,
                       unroll_layers=False) == CONFIG  # nothing else changed


def test_cpu_tuning_keeps_fields_set_to_other_values():
  explicit = platform_tuning.tuned(CONFIG.replace(attention="dense", attention_block_size=64),
                                   "cpu")
  assert (explicit.attention, explicit.attention_block_size, explicit.unroll_layers) == (
      "dense", 64, True)


def test_other_platforms_compile_the_config_as_given():
  for platform in ("tpu", "gpu"):
    assert platform_tuning.tuned(CONFIG, platform) == CONFIG


def test_largest_value_counts_inner_jaxprs_but_not_an_unrolled_loops_stacks():
  def program(x, unroll):  # x: [4, 8] float32
    wide = jnp.outer(x[0], jnp.ones(16))  # [8, 16]: 512 bytes
    inner = jax.jit(lambda v: jnp.concatenate([v] * 6))(x.ravel())  # [192]: 768 bytes
    _, stacked = jax.lax.scan(lambda carry, row: (carry, jnp.tile(row, 5)), 0.0, x,
                              unroll=unroll)  # 4 steps of [40]: 160 bytes; stacked [4, 40]: 640
    return wide, inner, stacked

  x = jnp.ones((4, 8), jnp.float32)
  rolled = jax.make_jaxpr(lambda x: program(x, 1))(x)
  assert platform_tuning.largest_value_bytes(rolled.jaxpr) == 768
  wide_stacks = jax.make_jaxpr(lambda x: jax.lax.scan(
      lambda c, row: (c, jnp.tile(row, 30)), 0.0, x, unroll=1))(x)  # [4, 240]: 3,840 bytes
  assert platform_tuning.largest_value_bytes(wide_stacks.jaxpr) == 3840
  unrolled = jax.make_jaxpr(lambda x: jax.lax.scan(
      lambda c, row: (c, jnp.tile(row, 30)), 0.0, x, unroll=True))(x)  # steps' [240]: 960
  assert platform_tuning.largest_value_bytes(unrolled.jaxpr) == max(960, 128)


@pytest.fixture
def no_persistent_cache():
  """JAX's persistent compilation cache off for the test (the test run turns it on)."""
  cache_dir = jax.config.jax_compilation_cache_dir
  jax.config.update("jax_compilation_cache_dir", None)
  yield
  jax.config.update("jax_compilation_cache_dir", cache_dir)


def test_cpu_compiles_in_heaps_of_the_largest_value_unless_a_cache_needs_one_block(
    no_persistent_cache):
  del no_persistent_cache
  small = jax.make_jaxpr(lambda x: x * 2)(jnp.ones((3 << 18,), jnp.float32))  # 3 MiB
  large = jax.make_jaxpr(lambda x: x * 2)(jnp.ones((5 << 20,), jnp.float32))  # 20 MiB
  tiny = jax.make_jaxpr(lambda x: x * 2)(jnp.ones((8,), jnp.float32))
  option = "xla_multiheap_size_constraint_per_heap"
  assert platform_tuning.compiler_options("cpu", small) == {option: 3 << 20}
  assert platform_tuning.compiler_options("cpu", tiny) == {option: 1 << 20}
  assert platform_tuning.compiler_options("cpu", large) == {}
  assert platform_tuning.compiler_options("tpu", small) == {}
  assert platform_tuning.compiler_options("gpu", small) == {}
  jax.config.update("jax_compilation_cache_dir", "/nonexistent/cache")
  assert platform_tuning.compiler_options("cpu", small) == {}


def test_train_step_in_heaps_equals_xla_defaults_bitwise(no_persistent_cache, recwarn):
  """The ~3M shape (one layer) at 4 x 128 tokens: values up to a few MiB, tens of MiB of
  temporaries, so XLA cuts them into many heaps; two AdamW steps must give bitwise what the
  same program gives with its temporaries in one block."""
  del no_persistent_cache, recwarn  # the run's cache may refuse the heaps' program: a warning
  model = config_lib.ModelConfig(vocab_size=512, num_layers=1, embed_dim=256, mlp_dim=768,
                                 num_heads=8, num_kv_heads=4, head_dim=32)
  rng = np.random.default_rng(0)
  batch = {"tokens": rng.integers(0, 512, (4, 128)).astype(np.int32),
           "positions": np.tile(np.arange(128, dtype=np.int32), (4, 1)),
           "segment_ids": np.ones((4, 128), np.int32),
           "loss_mask": (rng.uniform(size=(4, 128)) < 0.8).astype(np.float32)}
  mesh = mesh_lib.make_mesh(data=1, devices=jax.devices()[:1])
  optimizer = optax.adamw(1e-3)
  step = step_lib.make_train_step(model, rsft.loss, optimizer, mesh, rules.TRAIN_RULES)
  results = []
  for in_heaps in (True, False):
    state = train_state.create(model, random_params.numpy_params(model), optimizer, mesh,
                               rules.TRAIN_RULES)
    for _ in range(2):
      state, metrics = (step(state, batch) if in_heaps
                        else default_compile(step, state, batch)(state, batch))
    results.append(jax.device_get((state, metrics)))
  (options, compiled), = step.compiled_steps.values()
  heap = options["xla_multiheap_size_constraint_per_heap"]
  largest = platform_tuning.largest_value_bytes(step.jitted.trace(state, batch).jaxpr.jaxpr)
  assert heap == largest > 1 << 20  # [512, 768] float32 MLP activations at least
  assert compiled.memory_analysis().temp_size_in_bytes > 8 * heap
  for heaps, one_block in zip(jax.tree.leaves(results[0]), jax.tree.leaves(results[1])):
    np.testing.assert_array_equal(heaps, one_block)


_DEFAULT_COMPILES = {}


def default_compile(step, state, batch):
  """step's program compiled with XLA's default options (its temporaries in one block)."""
  if step not in _DEFAULT_COMPILES:
    _DEFAULT_COMPILES[step] = step.jitted.lower(state, batch).compile()
  return _DEFAULT_COMPILES[step]
