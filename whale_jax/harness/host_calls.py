"""Serving a sandboxed harness's llm and tools requests on the host, and recording them.

  value, call = serve_llm(backend, tokenizer, episode.sampling, message, call_index, started)
  value, event = serve_tool(episode.tools, message, started)

serve_llm renders chat messages with tokenizer.apply_chat_template (or encodes a raw prompt)
exactly once, calls backend.submit(prompt_ids, SamplingParams), records prompt ids, completion
ids, logprobs, sampling params and timings, and returns only the text (a list of texts when
n > 1). The text is the completion's token ids decoded on the host, less a final
end-of-generation token (visible_text); the harness never supplies what the model said. Each
completion is decoded once, and that one text is both what the harness gets and what the
trajectory records (RecordedCompletion.text), so a trace shows exactly what the harness saw.
The backend's own Completion.text is not used: the engine's leaves out any stop token (not
only an end-of-generation one) and ends at a stop string, an HTTP server's is its own
decoding, and a sampler without a tokenizer has none.

Sampling: a harness may pass max_tokens, temperature, top_p, top_k, n, stop and seed; anything
else is a TypeError naming what is allowed. The episode's SamplingParams are the defaults,
max_tokens may only be lowered, and n is at most MAX_SAMPLES_PER_CALL. Unless the harness
passes a seed, call k of an episode uses seeds.derive_seed(episode seed, "llm_call", k), so
two harnesses run on the same episode draw the same random stream call by call.

Budget per rollout: with max_episode_tokens = B > 0 (config.runtime.max_episode_tokens; the
papers' 8,192 or 16,384 tokens per rollout), the completion tokens of all of an episode's llm
calls together are at most B. A call made when R = B - (tokens generated so far) tokens are
left gets max_tokens = min(its max_tokens, R // n), so even n completions cannot pass B; a
call with R // n = 0 is refused: the harness gets a ValueError it may catch, saying the
budget is spent -- it gets no more model output in this episode.

Thinking: enable_thinking (config.runtime.enable_thinking; None = the template's default) is
passed to the chat template of every llm.chat call (Qwen3 / Qwen3.5 templates read it;
tokenization/chat.py's default template writes an empty think block when it is False).

Errors: RequestError goes back to the harness as an exception it may catch (a bad request or a
failing tool); InfraError means the host side failed and ends the episode as infra_error.
"""
import dataclasses
import inspect
import json
import time

from whale_jax import seeds as seeds_lib
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.tokenization import chat

SAMPLING_ARGUMENTS = ("max_tokens", "temperature", "top_p", "top_k", "n", "stop", "seed")
MAX_SAMPLES_PER_CALL = 16


class RequestError(Exception):
  """A request the harness got wrong, or a tool failure; raised inside the harness."""

  def __init__(self, error_type, message):
    super().__init__(message)
    self.error_type = error_type


class InfraError(Exception):
  """The host side failed; the episode ends as infra_error."""


def call_seed(episode_seed, call_index):
  """The seed of an episode's call call_index when the harness passes none."""
  return seeds_lib.derive_seed(episode_seed, "llm_call", call_index)


def sampling_params(defaults, requested, method, call_index):
  """The SamplingParams for one call: the episode's defaults updated by the harness's kwargs."""
  if not isinstance(requested, dict):
    raise RequestError("TypeError", f"llm.{method}() sampling arguments must be keywords.")
  unknown = sorted(set(requested) - set(SAMPLING_ARGUMENTS))
  if unknown:
    raise RequestError("TypeError", f"llm.{method}() got unknown argument(s) "
                       f"{', '.join(unknown)}. Allowed sampling arguments: "
                       f"{', '.join(SAMPLING_ARGUMENTS)}.")
  max_tokens = requested.get("max_tokens", defaults.max_tokens)
  if isinstance(max_tokens, int) and max_tokens > defaults.max_tokens:
    raise RequestError("ValueError", f"llm.{method}(max_tokens={max_tokens}) exceeds this "
                       f"episode's limit of {defaults.max_tokens} tokens; ask for at most "
                       f"{defaults.max_tokens}.")
  n = requested.get("n", 1)
  if isinstance(n, int) and n > MAX_SAMPLES_PER_CALL:
    raise RequestError("ValueError", f"llm.{method}(n={n}): at most {MAX_SAMPLES_PER_CALL} "
                       "samples per call.")
  stop = requested.get("stop", defaults.stop)
  if isinstance(stop, list):
    stop = tuple(stop)
  changes = dict(requested, n=n, stop=stop,
                 seed=requested.get("seed", call_seed(defaults.seed, call_index)))
  try:
    return defaults.replace(**changes)
  except (TypeError, ValueError) as error:
    raise RequestError("ValueError", f"llm.{method}(): {error}") from None


def check_episode_budget(max_episode_tokens):
  """Raises ValueError unless max_episode_tokens is an int >= 0 (0 = no budget)."""
  if (not isinstance(max_episode_tokens, int) or isinstance(max_episode_tokens, bool) or
      max_episode_tokens < 0):
    raise ValueError(f"config.runtime.max_episode_tokens={max_episode_tokens!r} must be an int "
                     ">= 0: completion tokens per episode over all its llm calls (0 = no "
                     "budget; the papers use 8192 or 16384).")


def chat_template_kwargs(tokenizer, enable_thinking):
  """The keywords every llm.chat render passes to tokenizer.apply_chat_template: {} when
  enable_thinking is None, else {"enable_thinking": it}. Raises ValueError when the setting
  is not a bool or None, or the tokenizer's apply_chat_template cannot take it."""
  if enable_thinking is None:
    return {}
  if not isinstance(enable_thinking, bool):
    raise ValueError(f"config.runtime.enable_thinking={enable_thinking!r} must be True, False "
                     "or None (the chat template's default).")
  parameters = inspect.signature(tokenizer.apply_chat_template).parameters.values()
  if not any(p.name == "enable_thinking" or p.kind == p.VAR_KEYWORD for p in parameters):
    raise ValueError(f"config.runtime.enable_thinking={enable_thinking} needs a tokenizer "
                     "whose chat template takes it (a Hugging Face tokenizer, e.g. Qwen3's); "
                     f"{type(tokenizer).__name__} does not. Set it to None.")
  return {"enable_thinking": enable_thinking}


def budget_params(params, generated_so_far, max_episode_tokens, method):
  """params with max_tokens clipped to the episode's budget (module docstring)."""
  if not max_episode_tokens:
    return params
  left = max_episode_tokens - generated_so_far
  per_completion = max(left, 0) // params.n
  if per_completion < 1:
    raise RequestError("ValueError", f"llm.{method}(): this episode has generated "
                       f"{generated_so_far} of its {max_episode_tokens} tokens "
                       f"(max_episode_tokens), which leaves none for n={params.n} "
                       "completion(s); finish with what you have.")
  if per_completion < params.max_tokens:
    return params.replace(max_tokens=per_completion)
  return params


def _render(tokenizer, message, method, template_kwargs=None):
  if method == "chat":
    messages, tools = message.get("messages"), message.get("tools")
    try:
      chat.validate_messages(messages)
    except ValueError as error:
      raise RequestError("ValueError", f"llm.chat(): {error}") from None
    if tools is not None and not (isinstance(tools, list) and
                                  all(isinstance(tool, dict) for tool in tools)):
      raise RequestError("TypeError", "llm.chat(tools=...) takes a list of JSON function "
                         "schemas (dicts).")
    try:
      return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tools=tools,
                                           **(template_kwargs or {}))
    except (TypeError, ValueError) as error:
      raise RequestError("ValueError", f"llm.chat(): {error}") from None
  if method == "generate":
    prompt = message.get("prompt")
    if not isinstance(prompt, str) or not prompt:
      raise RequestError("TypeError", "llm.generate(prompt) takes the prompt text as a "
                         f"non-empty str; got {type(prompt).__name__}.")
    return tokenizer.encode(prompt)
  raise RequestError("TypeError", f"llm has no method {method!r}; use llm.chat(messages, "
                     "**sampling) or llm.generate(prompt, **sampling).")


def visible_text(tokenizer, token_ids):
  """What the harness sees: the ids decoded, less a final end-of-generation token."""
  if token_ids and token_ids[-1] in tokenizer.eos_ids:
    token_ids = token_ids[:-1]
  return tokenizer.decode(token_ids)


def serve_llm(backend, tokenizer, defaults, message, call_index, episode_start,
              timeout_seconds=None, generated_so_far=0, max_episode_tokens=0,
              template_kwargs=None):
  """Serves one llm request. Returns (text or list of texts, LLMCall).

  timeout_seconds bounds the wait for the backend (None: wait as long as it takes).
  generated_so_far: completion tokens of the episode's earlier calls; max_episode_tokens:
  the episode's budget (0 = none; module docstring). template_kwargs: chat_template_kwargs.
  """
  method = message.get("method")
  params = sampling_params(defaults, message.get("sampling", {}), method, call_index)
  params = budget_params(params, generated_so_far, max_episode_tokens, method)
  prompt_ids = [int(i) for i in _render(tokenizer, message, method, template_kwargs)]
  started = time.monotonic()
  try:
    completions = backend.submit(prompt_ids, params).result(timeout_seconds)
  except Exception as error:  # pylint: disable=broad-except
    raise InfraError(f"The LLM backend raised {type(error).__name__}: {error}"
                     f"{' (backend_timeout_seconds)' if isinstance(error, TimeoutError) else ''}"
                     ) from error
  duration = time.monotonic() - started
  if len(completions) != params.n:
    raise InfraError(f"The LLM backend returned {len(completions)} completions for n="
                     f"{params.n}.")
  sampling = {}  # its fields are plain values and tuples: no need for asdict's deep copies
  for field in dataclasses.fields(params):
    value = getattr(params, field.name)
    sampling[field.name] = list(value) if isinstance(value, tuple) else value
  recorded = []
  for completion in completions:
    token_ids = [int(i) for i in completion.token_ids]
    recorded.append(trajectory_lib.RecordedCompletion(
        token_ids=token_ids, logprobs=[float(p) for p in completion.logprobs],
        text=visible_text(tokenizer, token_ids), finish_reason=completion.finish_reason))
  call = trajectory_lib.LLMCall(
      method=method, messages=message.get("messages") if method == "chat" else None,
      prompt=message.get("prompt") if method == "generate" else None,
      prompt_token_ids=prompt_ids, sampling=sampling, completions=recorded,
      started_seconds=started - episode_start, duration_seconds=duration)
  texts = [completion.text for completion in recorded]
  return (texts[0] if params.n == 1 else texts), call


def _describe(name, function):
  try:
    return f"tools.{name}{inspect.signature(function)}"
  except (TypeError, ValueError):
    return f"tools.{name}(...)"


def serve_tool(tools, message, episode_start):
  """Serves one tools request and returns its ToolEvent.

  A tool that raises is recorded with its error (the caller raises it in the harness as a
  ToolError); a malformed request raises RequestError; a non-JSON result raises InfraError.
  """
  name, args, kwargs = message.get("name"), message.get("args", []), message.get("kwargs", {})
  if name not in tools:
    raise RequestError("ToolError", f"No tool named {name!r}; this domain offers: "
                       f"{', '.join(sorted(tools)) or 'no tools'}.")
  if not isinstance(args, list) or not isinstance(kwargs, dict):
    raise RequestError("TypeError", f"tools.{name}() got malformed arguments.")
  function = tools[name]
  try:
    arguments = dict(inspect.signature(function).bind(*args, **kwargs).arguments)
  except TypeError as error:
    raise RequestError("TypeError", f"{_describe(name, function)}: {error}") from None
  except ValueError:
    arguments = {"args": args, **kwargs}
  started = time.monotonic()
  result, error = None, ""
  try:
    result = function(*args, **kwargs)
  except Exception as exception:  # pylint: disable=broad-except
    error = f"tools.{name}() failed: {type(exception).__name__}: {exception}"
  duration = time.monotonic() - started
  if not error:
    try:
      json.dumps(result)
    except (TypeError, ValueError) as exception:
      raise InfraError(f"Tool {name!r} returned a {type(result).__name__}, which is not "
                       "JSON-serializable; tools must return JSON values.") from exception
  return trajectory_lib.ToolEvent(name=name, arguments=arguments, result=result, error=error,
                                  started_seconds=started - episode_start,
                                  duration_seconds=duration)
