r"""An OpenAI-compatible HTTP server over whale_jax's own generation engine.

  pip install -e '.[serve]'
  python -m whale_jax.serve --model=embedded --port=8000                  # the demo solver
  python -m whale_jax.serve --model=/ckpt/Qwen3-8B --dtype=bfloat16 --served_model_name=proposer
  python -m whale_jax.serve --model=preset:qwen3_5_tiny --tokenizer=byte --vocab_size=267

  client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
  client.chat.completions.create(model="embedded", messages=[...], temperature=0, seed=3)

--model is a Hugging Face directory (config.json + *.safetensors), "embedded" (the solver in
whale_jax/assets/demo_solver) or "preset:NAME" (models.presets, random weights from --seed).
Every request is served by one sampling.Sampler: continuous batching over decode slots, chat
messages rendered with the model's chat template (tokenization.chat's ChatML when it has none).

Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health.
Request fields: model, max_tokens (chat also max_completion_tokens), temperature, top_p,
top_k (0 or -1 = off), n, stop, seed, logprobs (completions: 0 or 1; chat: true/false with
top_logprobs 0), stream (+ stream_options.include_usage), ignore_eos, return_token_ids
(adds token_ids and prompt_token_ids to each choice), user; presence_penalty and
frequency_penalty only 0, logit_bias only empty, echo only false, best_of only 1 or n.
Chat also takes tools (function schemas, rendered into the prompt; no tool-call parsing).
Both take guided_choice (a list of strings, as vLLM before 0.12 takes it through the openai
client's extra_body) or its newer spelling structured_outputs={"choice": [...]} (both at
once must agree): the reply is the choice with the highest total log-probability under the
model.
Anything else, and any value out of range, is a 400 whose message and "param" name the field.

Semantics, where they differ from the OpenAI API:
  - Random streams: prompt r of a request draws from (seed, request key r, sample index), the
    same streams as Sampler.generate(prompts, SamplingParams(seed=seed, ...)); with no seed the
    server draws one per request.
  - logprobs are those the sampler reports: log-softmax of logits / temperature (temperature 1
    when greedy), one per generated token, a final end-of-sequence token included (the text
    leaves it out). top_logprobs (alternatives) are not available.
  - A stop string ends the output and is removed from the text (as the OpenAI API does); the
    tokens and logprobs keep the token that completed it.
  - Streaming speaks the SSE protocol: a choice's chunk comes after each decode call that gave
    it tokens (--steps_per_call tokens at most; each chunk carries their logprobs), then
    usage, then [DONE]. The text of a chunk holds back its last characters (as many as the
    longest stop string, at least one) until more tokens or the end settle them, so the
    chunks add up to the whole reply's text. An engine failure after the stream started is a
    last chunk {"error": {...}}. guided_choice replies stream whole (one chunk per token).
  - guided_choice is exact, not sampled: each choice's tokens (tokenizer.encode(choice), no
    end-of-sequence token) are scored after the prompt with the model's own distribution
    (temperature 1, whatever the request's temperature), the highest sum wins (ties: the
    earlier choice), finish_reason is "stop". Sampling fields are validated but do not change
    the answer; n must be 1; logprobs are the chosen choice's per-token ones.
Requests beyond --max_pending_requests (prompts in the engine or waiting for it) get a 429
with Retry-After; the client retries.

Start-up compiles every program a request can need before the server listens: the engine's
grid of slot batches (1, r, r**2, ... up to --max_slots) by cache lengths (32, 32 r, ... up to
--max_cache_length), r = --bucket_ratio, and guided_choice's scoring of 4 rows at each cache
length. The log and /health give that warm-up's seconds and program count; /health's
"compilations" (every XLA compilation in the process) stays flat from then on, whatever the
load. Compiled programs persist in --compilation_cache_dir (JAX's persistent compilation
cache), so a restarted server loads them in seconds.

The package: protocol.py (fields, validation, SamplingParams), guided.py (guided_choice),
rendering.py (reply dicts and SSE chunks), server.py (Server, load_model), app.py (the
endpoints and the FastAPI app), __main__.py (flags and main).
"""
from whale_jax import quiet  # pylint: disable=unused-import  # before jax and transformers

from whale_jax.serve.app import SERVE_EXTRA
from whale_jax.serve.app import chat_completions
from whale_jax.serve.app import completions
from whale_jax.serve.app import create_app
from whale_jax.serve.protocol import RequestError
from whale_jax.serve.server import EMBEDDED_SOLVER
from whale_jax.serve.server import Server
from whale_jax.serve.server import compilation_counter
from whale_jax.serve.server import load_model
