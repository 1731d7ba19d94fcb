"""Reply rendering of whale_jax.serve: finished completions as OpenAI reply dicts, and the
SSE chunks of a reply, streamed as the engine settles tokens or cut from a finished one."""
import time
import uuid

from absl import logging


def _text(completion):
  """The reply text: the engine's text without a final stop string."""
  text = completion.text
  if isinstance(completion.stop_reason, str) and text.endswith(completion.stop_reason):
    text = text[:-len(completion.stop_reason)]
  return text


def _token_strings(tokenizer, token_ids):
  return [tokenizer.decode([t]) for t in token_ids]


def _deltas(tokenizer, token_ids, text):
  """text split into one piece per token (their concatenation is text)."""
  pieces, emitted = [], 0
  for i in range(len(token_ids)):
    prefix = tokenizer.decode(token_ids[:i + 1])  # may end in half a character, or go
    target = max(len(prefix), emitted) if text.startswith(prefix) else emitted  # past text
    pieces.append(text[emitted:target])
    emitted = target
  if pieces:
    pieces[-1] += text[emitted:]
  else:
    pieces = [text]
  return pieces


def usage(prompts, completions):
  prompt_tokens = sum(len(p) for p in prompts)
  completion_tokens = sum(len(c.token_ids) for c in completions)
  return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
          "total_tokens": prompt_tokens + completion_tokens}


def _completion_logprobs(tokenizer, token_ids, logprobs, offset=0):
  """The completions endpoint's logprobs of tokens whose text starts at offset."""
  tokens = _token_strings(tokenizer, token_ids)
  offsets = []
  for token in tokens:
    offsets.append(offset)
    offset += len(token)
  return {"tokens": tokens, "token_logprobs": list(logprobs),
          "top_logprobs": [{t: p} for t, p in zip(tokens, logprobs)],
          "text_offset": offsets}


def _chat_logprobs(tokenizer, token_ids, logprobs):
  return {"content": [
      {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8")),
       "top_logprobs": []}
      for token, logprob in zip(_token_strings(tokenizer, token_ids), logprobs)]}


def reply(server, body, prompts, completions_list, want_logprobs, chat):
  """The reply dict of finished completions (or its SSE chunks when streaming)."""
  choices = []
  for index, completion in enumerate(completions_list):
    choice = {"index": index, "logprobs": None, "finish_reason": completion.finish_reason}
    if chat:
      choice["message"] = {"role": "assistant", "content": _text(completion)}
      if want_logprobs:
        choice["logprobs"] = _chat_logprobs(server.tokenizer, completion.token_ids,
                                            completion.logprobs)
    else:
      choice["text"] = _text(completion)
      if want_logprobs:
        choice["logprobs"] = _completion_logprobs(server.tokenizer, completion.token_ids,
                                                  completion.logprobs)
    if body.get("return_token_ids"):
      choice["token_ids"] = list(completion.token_ids)
      choice["prompt_token_ids"] = list(completion.prompt_token_ids)
    choices.append(choice)
  reply = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
           "object": "chat.completion" if chat else "text_completion",
           "created": int(time.time()), "model": server.model_name, "choices": choices,
           "usage": usage(prompts, completions_list)}
  return _finish(server, body, reply, completions_list, chat)


def _finish(server, body, reply, completions_list, chat):
  server.count_served(reply["usage"])
  if not body.get("stream"):
    return reply
  return _stream_chunks(server.tokenizer, body, reply, completions_list, chat)


class _ChoiceText:
  """The text deltas of one streamed choice. Mid-stream it holds back the last characters
  (as many as the longest stop string, at least one: a stop string removed at the end, half
  a character, a tokenizer's space clean-up), so that the deltas add up to the reply's text."""

  def __init__(self, tokenizer, stop_strings):
    self.tokenizer = tokenizer
    self.holdback = max((len(s) for s in stop_strings), default=1)
    self.token_ids, self.emitted, self.offset = [], "", 0

  def delta(self, token_ids, completion):
    self.token_ids.extend(token_ids)
    if completion is not None:
      text, end = _text(completion), None
    else:
      text = self.tokenizer.decode(self.token_ids).rstrip("\ufffd")
      end = len(text) - self.holdback
      if not text.startswith(self.emitted):
        end = len(self.emitted)
    piece = text[len(self.emitted):end]
    self.emitted += piece
    return piece


def streamed(server, body, prompts, params, want_logprobs, chat):
  """The SSE chunks of a generation, as an async iterator; submits it now (see
  Server.stream)."""
  events = server.stream(prompts, params)
  return _stream_generation(server, body, prompts, params, want_logprobs, chat, events)


async def _stream_generation(server, body, prompts, params, want_logprobs, chat, events):
  tokenizer = server.tokenizer
  base = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
          "created": int(time.time()), "model": server.model_name,
          "object": "chat.completion.chunk" if chat else "text_completion"}
  texts = [_ChoiceText(tokenizer, params.stop) for _ in range(len(prompts) * params.n)]
  finished = []
  if chat:
    for index in range(len(texts)):
      yield {**base, "choices": [{"index": index, "delta": {"role": "assistant", "content": ""},
                                  "logprobs": None, "finish_reason": None}]}
  try:
    async for index, token_ids, logprobs, completion in events:
      text = texts[index]
      entry = {"index": index, "logprobs": None,
               "finish_reason": None if completion is None else completion.finish_reason}
      if want_logprobs:
        if chat:
          entry["logprobs"] = _chat_logprobs(tokenizer, token_ids, logprobs)
        else:
          entry["logprobs"] = _completion_logprobs(tokenizer, token_ids, logprobs, text.offset)
          text.offset += sum(len(t) for t in entry["logprobs"]["tokens"])
      piece = text.delta(token_ids, completion)
      if chat:
        entry["delta"] = {"content": piece}
      else:
        entry["text"] = piece
      if completion is not None:
        finished.append(completion)
      yield {**base, "choices": [entry]}
  except Exception as error:  # pylint: disable=broad-except  # the 200 is already sent
    logging.exception("A streamed generation failed.")
    yield {"error": {"message": f"The generation failed: {error}", "type": "server_error",
                     "param": None, "code": 500}}
    return
  totals = usage(prompts, finished)
  server.count_served(totals)
  if (body.get("stream_options") or {}).get("include_usage"):
    yield {**base, "choices": [], "usage": totals}


def _stream_chunks(tokenizer, body, reply, completions_list, chat):
  """The SSE chunks of a finished reply: per choice, one per token, then a finishing one."""
  base = {"id": reply["id"], "created": reply["created"], "model": reply["model"],
          "object": "chat.completion.chunk" if chat else "text_completion"}
  include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
  chunks = []
  for choice, completion in zip(reply["choices"], completions_list):
    index = choice["index"]
    text = choice["message"]["content"] if chat else choice["text"]
    pieces = _deltas(tokenizer, completion.token_ids, text)
    if chat:
      chunks.append({**base, "choices": [{"index": index, "delta": {"role": "assistant",
                                                                     "content": ""},
                                          "logprobs": None, "finish_reason": None}]})
    for position, piece in enumerate(pieces):
      last = position == len(pieces) - 1
      logprobs = None
      if choice["logprobs"] is not None and position < len(completion.token_ids):
        # Each chunk carries its token's entry; the last also carries any remaining ones.
        take = slice(position, None if last else position + 1)
        if chat:
          logprobs = {"content": choice["logprobs"]["content"][take]}
        else:
          logprobs = {key: value[take] for key, value in choice["logprobs"].items()}
      entry = {"index": index, "logprobs": logprobs,
               "finish_reason": choice["finish_reason"] if last else None}
      if chat:
        entry["delta"] = {"content": piece}
      else:
        entry["text"] = piece
      chunks.append({**base, "choices": [entry]})
  if include_usage:
    chunks.append({**base, "choices": [], "usage": reply["usage"]})
  return chunks
