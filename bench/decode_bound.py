r"""How fast can a fixed batch be sampled on this machine? A bound from the weight products.

  python bench/decode_bound.py                          # both models, batch 32, ~3 min
  python bench/decode_bound.py --models=large --batch_size=8
  python bench/decode_bound.py --dtype=bfloat16

For the sampler benchmark's settings (bench/sampler_throughput.py: random Qwen3 weights,
64-token prompts, 64 new tokens, temperature 1, float32), one process measures, medians of
--repeats runs after a warm-up:
  generate     whale_jax's Sampler.generate, end to end (tokens/s as the benchmark counts them)
  prefill      the same call with max_tokens=1: the prompts' prefill and one decode step
  products     a jitted loop of new_tokens - 1 steps that does only the decode step's weight
               products, at the batch size: for every layer x @ qkv (query, key and value in
               one matrix), output, gate_up (gate and up), down, then the unembedding, in the
               form the sampler uses (decode_step.split_layers in Layout.for_batch's
               orientation, as the engine picks it, W @ h where the step runs in columns;
               inputs in the compute dtype, float32 accumulation), with the
               same shapes and no attention, norms, sampling or cache writes
and reports the bound  new_tokens x batch / (prefill + products): the rate whale_jax would
reach if its decode steps cost only their weight products, with prefill as it is. A
reference library's rate times a target ratio above that bound is out of reach on this CPU
without faster matrix products.
"""
import json
import os
import statistics
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from whale_jax.models import ModelConfig  # pylint: disable=wrong-import-position
from whale_jax.models import decode_step  # pylint: disable=wrong-import-position
from whale_jax.models import decoder  # pylint: disable=wrong-import-position
from whale_jax.models import products  # pylint: disable=wrong-import-position
from whale_jax.sampling import Sampler  # pylint: disable=wrong-import-position
from whale_jax.sampling import SamplingParams  # pylint: disable=wrong-import-position
from whale_jax.sampling.layout import Layout  # pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["small", "large"], "small (~3M) and/or large (~100M).")
flags.DEFINE_integer("batch_size", 32, "Prompts per generate call.")
flags.DEFINE_integer("prompt_length", 64, "Prompt tokens.")
flags.DEFINE_integer("new_tokens", 64, "Tokens generated per prompt.")
flags.DEFINE_integer("repeats", 3, "Timed runs of each measure (after one warm-up).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Weight and compute dtype.")

# bench/sampler_throughput.py's CONFIGS in ModelConfig's names (importing that module would
# define its flags here too).
SHAPES = {
    "small": dict(vocab_size=512, embed_dim=256, mlp_dim=768, num_layers=4, num_heads=4,
                  num_kv_heads=2, head_dim=64),
    "large": dict(vocab_size=32768, embed_dim=768, mlp_dim=2048, num_layers=12, num_heads=12,
                  num_kv_heads=4, head_dim=64),
}
_PROJECTIONS = ("qkv", "output", "gate_up", "down")  # decode_step.split_layers' matrices


def _median_seconds(function):
  function()
  times = []
  for _ in range(FLAGS.repeats):
    start = time.perf_counter()
    function()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def products_loop(config, split, batch_size, num_steps, transposed, columns):
  """A jitted function running num_steps steps of the decode step's weight products only.

  Each product's input is a fixed random [B, in] array ([in, B] in columns: decode_step's
  step in columns multiplies W @ h) (an argument: a constant of ones would let XLA rewrite
  the product) scaled by the mean of the previous product's whole output, so every product
  depends on the one before and none can be cut short.
  """
  widths = {split["layers"][0][name].shape[1 if transposed else 0] for name in _PROJECTIONS}
  widths.add(config.embed_dim)
  dtype = config.compute_jnp_dtype
  batch_axis = 1 if columns else 0

  def product(inputs, weight, out_dtype=None):
    if columns:
      return products.left(weight, inputs, out_dtype)
    return products.matmul(inputs, weight, transposed, out_dtype)

  def mean(out):  # [B, 1] or [1, B]
    return jnp.mean(out.astype(jnp.float32), axis=1 - batch_axis, keepdims=True)

  @jax.jit
  def run(weights, bases, scale):
    layers, unembedding = weights  # unembedding [V, D] when transposed, else [D, V]

    def step(_, scale):
      for layer in layers:
        for name in _PROJECTIONS:
          weight = layer[name]
          inputs = (bases[weight.shape[1 if transposed else 0]] * scale).astype(dtype)
          scale = 1.0 + 1e-3 * mean(product(inputs, weight))
      logits = product((bases[config.embed_dim] * scale).astype(dtype), unembedding,
                       out_dtype=jnp.float32)
      return 1.0 + 1e-3 * mean(logits)

    return jax.lax.fori_loop(0, num_steps, step, scale)

  # The weights are arguments, as in the sampler: closed over, they would be constants of the
  # program, which XLA's CPU matmul library prepares once at compile time (~100M bfloat16:
  # 17 ms a step as constants against 27 ms as arguments).
  weights = (split["layers"], split["unembedding"])
  keys = jax.random.split(jax.random.key(0), len(widths))
  bases = {width: jax.random.normal(key, (width, batch_size) if columns else (batch_size, width))
           for key, width in zip(keys, sorted(widths))}
  scale = jnp.ones((1, batch_size) if columns else (batch_size, 1), jnp.float32)
  return lambda: run(weights, bases, scale).block_until_ready()


def measure(name):
  config = ModelConfig(**SHAPES[name], param_dtype=FLAGS.dtype, compute_dtype=FLAGS.dtype)
  params = decoder.init_params(config, jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)

  def fresh_prompts():  # new ones for every call: nothing for the prefix cache to reuse
    return rng.integers(3, config.vocab_size, (FLAGS.batch_size, FLAGS.prompt_length)).tolist()

  seconds = {}
  with Sampler(config, params, max_slots=FLAGS.batch_size,
               steps_per_call=FLAGS.new_tokens) as sampler:
    for label, max_tokens in (("generate", FLAGS.new_tokens), ("prefill", 1)):
      sampling = SamplingParams(max_tokens=max_tokens, temperature=1.0, top_p=1.0, top_k=0,
                                seed=0, ignore_eos=True)
      seconds[label] = _median_seconds(
          lambda s=sampling: sampler.generate(fresh_prompts(), s))
  layout = Layout.choose(config, "cpu").for_batch(config, FLAGS.batch_size)
  weights = decode_step.split_layers(params, config, layout.transposed,
                                     layout.columns)  # as the engine makes them
  transposed = weights.transposed
  columns = decode_step.in_columns(config, FLAGS.batch_size, weights)
  split = {"layers": weights.layers, "unembedding": weights.unembedding}
  if split["unembedding"] is None:  # the params' own layout: the tied embedding [V, D]
    split["unembedding"] = params["embedding"]
  seconds["products"] = _median_seconds(products_loop(
      config, split, FLAGS.batch_size, FLAGS.new_tokens - 1, transposed, columns))
  tokens = FLAGS.batch_size * FLAGS.new_tokens
  decode_steps = FLAGS.new_tokens - 1
  return dict(
      model=name, batch_size=FLAGS.batch_size, prompt_length=FLAGS.prompt_length,
      new_tokens=FLAGS.new_tokens, dtype=FLAGS.dtype, transposed=transposed, columns=columns,
      generate_seconds=round(seconds["generate"], 3),
      prefill_seconds=round(seconds["prefill"], 3),
      decode_ms_per_step=round((seconds["generate"] - seconds["prefill"]) / decode_steps * 1e3,
                               2),
      products_ms_per_step=round(seconds["products"] / decode_steps * 1e3, 2),
      generate_tokens_per_second=round(tokens / seconds["generate"], 1),
      bound_tokens_per_second=round(tokens / (seconds["prefill"] + seconds["products"]), 1),
      load_average=round(os.getloadavg()[0], 2))


def main(_):
  for name in FLAGS.models:
    print(json.dumps(measure(name)), flush=True)


if __name__ == "__main__":
  app.run(main)
