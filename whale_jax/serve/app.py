"""whale_jax.serve's HTTP app: the two OpenAI endpoints (a request body through protocol.py,
guided.py and the Server to a reply of rendering.py) and the FastAPI app around them."""
import json

from whale_jax.serve import guided
from whale_jax.serve import protocol
from whale_jax.serve import rendering

SERVE_EXTRA = "pip install -e '.[serve]'"


async def completions(server, body):
  """The reply dict of POST /v1/completions; streaming, its SSE chunks (an async iterator)."""
  protocol.check_fields(body, protocol.COMPLETION_FIELDS)
  prompts = protocol.prompts(body, server.tokenizer)
  params = server.sampling_params(body, [len(p) for p in prompts], 16, chat=False)
  logprobs = protocol.read_field(
      body, "logprobs", 0, lambda v: protocol.is_int(v) and 0 <= v <= 1,
      "0 or 1 (only the sampled token's log-probability is available)")
  protocol.read_field(body, "echo", False, lambda v: v is False, "false (echo is not supported)")
  protocol.read_field(body, "suffix", None, lambda v: False, "null (suffix is not supported)")
  choice = guided.choices(body, server.tokenizer, [len(p) for p in prompts],
                          server.max_context, params)
  if choice is not None:
    completions_list = [await server.guided(prompts[0], *choice)]
  elif body.get("stream"):
    return rendering.streamed(server, body, prompts, params, logprobs, chat=False)
  else:
    completions_list = await server.generate(prompts, params)
  return rendering.reply(server, body, prompts, completions_list, logprobs, chat=False)


async def chat_completions(server, body):
  """The reply dict of POST /v1/chat/completions; streaming, its SSE chunks (an async
  iterator; guided_choice: a list)."""
  protocol.check_fields(body, protocol.CHAT_FIELDS)
  messages = protocol.messages(body)
  tools = protocol.read_field(body, "tools", None, lambda v: isinstance(v, list) and all(
      isinstance(t, dict) for t in v), "a list of tool (function schema) objects")
  protocol.read_field(body, "tool_choice", None, lambda v: v in ("auto", "none"),
                      "'auto' or 'none' (tool calls are not parsed)")
  prompt = server.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                tools=tools)
  params = server.sampling_params(body, [len(prompt)], server.default_max_tokens, chat=True)
  logprobs = protocol.read_field(body, "logprobs", False, lambda v: isinstance(v, bool),
                                 "true or false")
  protocol.read_field(body, "top_logprobs", 0, lambda v: v == 0,
                      "0 (only the sampled token's log-probability is available)")
  choice = guided.choices(body, server.tokenizer, [len(prompt)], server.max_context, params)
  if choice is not None:
    completions_list = [await server.guided(prompt, *choice)]
  elif body.get("stream"):
    return rendering.streamed(server, body, [prompt], params, logprobs, chat=True)
  else:
    completions_list = await server.generate([prompt], params)
  return rendering.reply(server, body, [prompt], completions_list, logprobs, chat=True)


def create_app(server):
  """The FastAPI app of a Server."""
  try:
    import fastapi  # pylint: disable=import-outside-toplevel
    from fastapi import responses  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ImportError(f"whale_jax.serve needs FastAPI and uvicorn: {SERVE_EXTRA}") from None

  application = fastapi.FastAPI(title="whale_jax.serve", docs_url=None, redoc_url=None)

  def error_reply(error):
    headers = {"Retry-After": "1"} if error.status == 429 else None
    return responses.JSONResponse(
        {"error": {"message": error.message, "type": error.kind, "param": error.param,
                   "code": error.status}}, status_code=error.status, headers=headers)

  async def handle(request, endpoint):
    try:
      raw = await request.body()
      try:
        body = json.loads(raw)
      except ValueError as error:
        raise protocol.RequestError(400, f"The request body is not valid JSON ({error}).") from None
      result = await endpoint(server, body)
    except protocol.RequestError as error:
      if error.status != 429:
        server.count("rejected_requests")
      return error_reply(error)
    if isinstance(result, dict):
      return responses.JSONResponse(result)

    async def events():
      if isinstance(result, list):  # a finished reply's chunks
        for chunk in result:
          yield f"data: {json.dumps(chunk)}\n\n"
      else:
        async for chunk in result:
          yield f"data: {json.dumps(chunk)}\n\n"
      yield "data: [DONE]\n\n"
    return responses.StreamingResponse(events(), media_type="text/event-stream")

  @application.post("/v1/completions")
  async def post_completions(request: fastapi.Request):
    return await handle(request, completions)

  @application.post("/v1/chat/completions")
  async def post_chat_completions(request: fastapi.Request):
    return await handle(request, chat_completions)

  @application.get("/v1/models")
  async def get_models():
    return {"object": "list", "data": [{"id": server.model_name, "object": "model",
                                        "created": server.created, "owned_by": "whale_jax",
                                        "max_model_len": server.max_context}]}

  @application.get("/health")
  async def get_health():
    return server.health()

  return application
