"""The OpenAI request protocol of whale_jax.serve: the fields each endpoint accepts, and a
request body read into prompts, chat messages and SamplingParams, field by field, with a 400
(RequestError) whose message and "param" name the field."""
import json
import secrets

COMMON_FIELDS = ("model", "max_tokens", "temperature", "top_p", "top_k", "n", "stop", "seed",
                 "logprobs", "stream", "stream_options", "ignore_eos", "return_token_ids",
                 "user", "presence_penalty", "frequency_penalty", "logit_bias", "best_of")
COMPLETION_FIELDS = COMMON_FIELDS + ("prompt", "echo", "suffix", "guided_choice",
                                     "structured_outputs")
CHAT_FIELDS = COMMON_FIELDS + ("messages", "max_completion_tokens", "top_logprobs", "tools",
                               "tool_choice", "guided_choice", "structured_outputs")
MAX_STOP_STRINGS = 16


class RequestError(Exception):
  """An HTTP error reply: status, message, the request field it is about."""

  def __init__(self, status, message, param=None, kind="invalid_request_error"):
    super().__init__(message)
    self.status, self.message, self.param, self.kind = status, message, param, kind


def bad(name, expected, value):
  return RequestError(400, f"'{name}' must be {expected}; got {json.dumps(value)[:80]}.", name)


def is_int(value):
  return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_field(body, name, default, valid, expected):
  value = body.get(name)
  if value is None:
    return default
  if not valid(value):
    raise bad(name, expected, value)
  return value


def check_fields(body, allowed):
  if not isinstance(body, dict):
    raise RequestError(400, "The request body must be a JSON object.")
  unknown = sorted(set(body) - set(allowed))
  if unknown:
    raise RequestError(400, f"Unknown field(s) {unknown}; this endpoint accepts: "
                       f"{', '.join(allowed)}.", unknown[0])


def prompts(body, tokenizer):
  """Token-id prompts of a /v1/completions body (str, [str], [int] or [[int]])."""
  prompt = body.get("prompt")
  expected = "a string, a list of strings, a list of token ids or a list of such lists"
  if isinstance(prompt, str):
    prompt = [prompt]
  elif isinstance(prompt, list) and prompt and all(is_int(t) for t in prompt):
    prompt = [prompt]
  if not isinstance(prompt, list) or not prompt:
    raise bad("prompt", expected, prompt)
  prompts = []
  for item in prompt:
    if isinstance(item, str):
      ids = tokenizer.encode(item)
    elif isinstance(item, list) and all(is_int(t) for t in item):
      ids = list(item)
    else:
      raise bad("prompt", expected, item)
    if not ids:
      raise RequestError(400, "'prompt' holds an empty prompt; a prompt needs at least one "
                         "token.", "prompt")
    outside = [t for t in ids if not 0 <= t < tokenizer.vocab_size]
    if outside and not isinstance(item, str):
      raise RequestError(400, f"'prompt' holds token ids {outside[:5]} outside the vocabulary "
                         f"[0, {tokenizer.vocab_size}).", "prompt")
    prompts.append(ids)
  return prompts


def messages(body):
  """Chat messages with text content (content parts of type "text" joined)."""
  messages = body.get("messages")
  if not isinstance(messages, list) or not messages:
    raise bad("messages", "a non-empty list of {\"role\", \"content\"} objects", messages)
  plain = []
  for i, message in enumerate(messages):
    if isinstance(message, dict) and isinstance(message.get("content"), list):
      parts = message["content"]
      if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(
          p.get("text"), str) for p in parts):
        raise RequestError(400, f"'messages[{i}].content' parts must be "
                           "{\"type\": \"text\", \"text\": ...}; other content types are not "
                           "supported.", f"messages[{i}].content")
      message = {**message, "content": "".join(p["text"] for p in parts)}
    if isinstance(message, dict):
      message = {"role": message.get("role"), "content": message.get("content")}
    plain.append(message)
  from whale_jax.tokenization import chat  # pylint: disable=import-outside-toplevel
  try:
    chat.validate_messages(plain)
  except ValueError as error:
    raise RequestError(400, str(error), "messages") from None
  return plain


def sampling_params(body, prompt_lengths, default_max_tokens, chat, model_name, max_context,
                    max_n):
  """SamplingParams of a request body (validated field by field) for a server of model_name
  with a context of max_context tokens and at most max_n samples per prompt."""
  from whale_jax.sampling import SamplingParams  # pylint: disable=import-outside-toplevel
  model = body.get("model")
  if not isinstance(model, str) or not model:
    raise bad("model", f"the served model's name ({model_name!r})", model)
  if model != model_name:
    raise RequestError(404, f"The model {model!r} does not exist; this server serves "
                       f"{model_name!r} (GET /v1/models).", "model", "not_found_error")
  longest = max(prompt_lengths)
  room = max_context - longest
  if room < 1:
    raise RequestError(400, f"The prompt has {longest} tokens; this server's context is "
                       f"{max_context} tokens, which leaves no room to generate.",
                       "messages" if chat else "prompt")
  token_field = "max_tokens"
  if chat and body.get("max_completion_tokens") is not None:
    token_field = "max_completion_tokens"
  max_tokens = read_field(body, token_field, None, lambda v: is_int(v) and v >= 1,
                          "an integer >= 1")
  if max_tokens is None:
    max_tokens = min(default_max_tokens, room)
  elif max_tokens > room:
    raise RequestError(400, f"'{token_field}'={max_tokens} plus the prompt's {longest} "
                       f"tokens exceeds this server's context of {max_context} tokens; "
                       f"ask for at most {room}.", token_field)
  temperature = read_field(body, "temperature", 1.0, lambda v: is_number(v) and 0 <= v <= 100,
                           "a number in [0, 100] (0 = greedy)")
  top_p = read_field(body, "top_p", 1.0, lambda v: is_number(v) and 0 < v <= 1,
                     "a number in (0, 1]")
  top_k = read_field(body, "top_k", 0, lambda v: is_int(v) and v >= -1,
                     "an integer >= 0 (0 or -1 = off)")
  n = read_field(body, "n", 1, lambda v: is_int(v) and 1 <= v <= max_n,
                 f"an integer in [1, {max_n}]")
  seed = read_field(body, "seed", None, lambda v: is_int(v) and 0 <= v < 2**64,
                    "an integer in [0, 2**64)")
  stop = body.get("stop")
  if stop is None:
    stop = ()
  elif isinstance(stop, str):
    stop = (stop,)
  if not (isinstance(stop, (list, tuple)) and len(stop) <= MAX_STOP_STRINGS and
          all(isinstance(s, str) and s for s in stop)):
    raise bad("stop", f"a non-empty string or a list of at most {MAX_STOP_STRINGS} of them",
              body.get("stop"))
  ignore_eos = read_field(body, "ignore_eos", False, lambda v: isinstance(v, bool), "true or false")
  best_of = body.get("best_of")
  if best_of is not None and best_of not in (1, n):
    raise bad("best_of", f"1 or n ({n}); this server does not rank samples", best_of)
  for name in ("presence_penalty", "frequency_penalty"):
    read_field(body, name, 0, lambda v: is_number(v) and v == 0, "0 (penalties are not supported)")
  read_field(body, "logit_bias", None, lambda v: v == {}, "empty (logit_bias is not supported)")
  read_field(body, "user", None, lambda v: isinstance(v, str), "a string")
  read_field(body, "stream", False, lambda v: isinstance(v, bool), "true or false")
  read_field(body, "return_token_ids", False, lambda v: isinstance(v, bool), "true or false")
  options = read_field(body, "stream_options", {}, lambda v: isinstance(v, dict) and set(v) <= {
      "include_usage"} and isinstance(v.get("include_usage", False), bool),
                 '{"include_usage": true or false}')
  del options
  if seed is None:
    seed = secrets.randbits(63)
  return SamplingParams(max_tokens=max_tokens, temperature=float(temperature),
                        top_p=float(top_p), top_k=max(int(top_k), 0), seed=int(seed), n=n,
                        ignore_eos=ignore_eos, stop=tuple(stop))
