"""`python -m whale_jax.serve`: the flags, and main, which loads the model, warms every program
and serves the app until stopped (whale_jax/serve/__init__.py says what it serves)."""
import os
import socket

from whale_jax import quiet  # pylint: disable=unused-import  # before jax and transformers

from absl import app
from absl import flags
from absl import logging

from whale_jax.serve import app as app_lib
from whale_jax.serve import server as server_lib

_MODEL = flags.DEFINE_string("model", "embedded", "A Hugging Face model directory, 'embedded' "
                             "(the demo solver) or 'preset:NAME' (random weights).")
_TOKENIZER = flags.DEFINE_string("tokenizer", "", "Tokenizer ('byte' or a path); default: the "
                                 "model directory's.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Parameter dtype.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of a preset's random weights.")
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 0, "A preset's vocabulary size (0: the "
                                   "preset's).")
_SERVED_NAME = flags.DEFINE_string("served_model_name", "", "The name clients send as "
                                   "'model' (default: 'embedded', the directory's or preset's "
                                   "name).")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to listen on.")
_PORT = flags.DEFINE_integer("port", 8000, "Port to listen on (0: any free port; the chosen "
                             "one is printed).")
_MAX_PENDING = flags.DEFINE_integer("max_pending_requests", 256, "Prompts in the engine or "
                                    "waiting for it; more get HTTP 429.")
_MAX_SLOTS = flags.DEFINE_integer("max_slots", 64, "Samples decoded at once (engine slots).")
_STEPS_PER_CALL = flags.DEFINE_integer("steps_per_call", 16, "Decode steps per device call: "
                                       "a streamed choice gets a chunk after each call.")
_MAX_CONTEXT = flags.DEFINE_integer("max_cache_length", 0, "Longest prompt + max_tokens (0: "
                                    "the model's max_position_embeddings).")
_DEFAULT_MAX_TOKENS = flags.DEFINE_integer("default_max_tokens", 1024, "max_tokens of chat "
                                           "requests that give none.")
_BUCKET_RATIO = flags.DEFINE_integer("bucket_ratio", 8, "Ratio of neighbouring slot batch "
                                     "sizes and cache lengths, whose grid start-up compiles: "
                                     "larger starts faster and pads more (>= 2).")
_COMPILATION_CACHE_DIR = flags.DEFINE_string(
    "compilation_cache_dir",
    os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "whale_jax", "jax"),
    "Directory where compiled programs persist (JAX's persistent compilation cache), so that "
    "a restart warms up from it in seconds; '' turns it off.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  try:
    import uvicorn  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise SystemExit(f"whale_jax.serve needs FastAPI and uvicorn: {app_lib.SERVE_EXTRA}") from None
  for name, value in (("max_pending_requests", _MAX_PENDING.value),
                      ("max_slots", _MAX_SLOTS.value),
                      ("steps_per_call", _STEPS_PER_CALL.value),
                      ("default_max_tokens", _DEFAULT_MAX_TOKENS.value)):
    if value < 1:
      raise app.UsageError(f"--{name}={value} must be >= 1.")
  if _BUCKET_RATIO.value < 2:
    raise app.UsageError(f"--bucket_ratio={_BUCKET_RATIO.value} must be >= 2 (2: the finest "
                         "grid, most programs to compile; 8: the default).")
  # Bind first: a port in use fails before the model loads.
  listener = socket.socket(socket.AF_INET6 if ":" in _HOST.value else socket.AF_INET)
  listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  try:
    listener.bind((_HOST.value, _PORT.value))
  except OSError as error:
    raise SystemExit(f"--host={_HOST.value} --port={_PORT.value}: cannot listen there "
                     f"({error}); pick another --port (0 = any free one).") from None
  import jax  # pylint: disable=import-outside-toplevel
  from whale_jax.sampling import Sampler  # pylint: disable=import-outside-toplevel
  from whale_jax.sampling import buckets  # pylint: disable=import-outside-toplevel
  if _COMPILATION_CACHE_DIR.value:  # every program, however small or quick to compile
    jax.config.update("jax_compilation_cache_dir",
                      os.path.expanduser(_COMPILATION_CACHE_DIR.value))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  # From here on, every compilation (or load from the cache) is counted.
  server_lib.compilation_counter()
  config, params, tokenizer, name = server_lib.load_model(
      _MODEL.value, _TOKENIZER.value, _DTYPE.value, _SEED.value, _VOCAB_SIZE.value)
  max_cache_length = _MAX_CONTEXT.value or config.max_position_embeddings
  sampler = Sampler(
      config, params, tokenizer=tokenizer, max_slots=_MAX_SLOTS.value,
      steps_per_call=_STEPS_PER_CALL.value, max_cache_length=max_cache_length,
      batch_sizes=buckets.geometric_buckets(1, _MAX_SLOTS.value, _BUCKET_RATIO.value),
      cache_lengths=buckets.geometric_buckets(buckets.MIN_LENGTH_BUCKET, max_cache_length,
                                              _BUCKET_RATIO.value, multiple=16))
  server = server_lib.Server(sampler, tokenizer, _SERVED_NAME.value or name, _MAX_PENDING.value,
                             _DEFAULT_MAX_TOKENS.value)
  seconds, programs = server.warm_up()
  print(f"whale_jax.serve: warmed {programs} programs ({len(sampler.batch_sizes)} slot "
        f"batches {list(sampler.batch_sizes)} x {len(sampler.cache_lengths)} cache lengths "
        f"{list(sampler.cache_lengths)}, and guided_choice scoring) in {seconds:.1f} s",
        flush=True)
  listener.listen(2048)  # connections wait in the backlog until uvicorn accepts them
  host, port = listener.getsockname()[:2]
  print(f"whale_jax.serve: model {server.model_name!r} on http://{host}:{port}/v1",
        flush=True)
  uvicorn_server = uvicorn.Server(uvicorn.Config(app_lib.create_app(server), log_level="warning",
                                                 timeout_graceful_shutdown=5))
  try:
    uvicorn_server.run(sockets=[listener])
  finally:
    sampler.close()
    logging.info("whale_jax.serve: stopped after %d requests.", server.counts["served_requests"])


if __name__ == "__main__":
  app.run(main)
