"""The agentic proposer: a bounded tool-calling session over the archive view per proposal.

  proposer = AgenticProposer(client, archive_dir, domain, instances=splits["harness"],
                             runner=SandboxRunner(evaluate, splits["harness"]),
                             search_answers=archive_view.SEARCH_ANSWERS_BY_RECIPE["whale"],
                             withheld=archive_view.reference_strings(held_out))
  meta_harness.search(incoming, evaluate, proposer, archive_dir, ...)   # a drop-in proposer
  proposer.rollouts, proposer.generated_tokens       # what its `run` calls cost, this process
  session_costs(archive_dir)                         # the same from the saved sessions (resumes)
  proposer.config()                                  # for the run's config record

  # built once from a config, bound to each search's archive by the loop:
  unbound = AgenticProposer(client, None, domain, None, use_run_tool=True, ...)
  proposer = unbound.for_search(archive_dir, evaluate, splits["harness"], seed)

propose(context, n) runs n sessions, one after another. Each session builds the archive view
(whale_jax.search.archive_view) as the archive stands, gives the model the domain's
instructions (whale_jax.search.steering) and the tools of whale_jax.search.agent_tools, and
loops: one model call per step, every tool call in the reply executed and its result sent back,
until a submit passes the search's checks or a budget ends it (AgentBudgets: steps, tokens,
runs). What can go wrong is answered, recorded and never fatal:
  no_tool_call      the reply called no tool: the model is told to call one.
  malformed         a call that cannot be parsed: the parse error goes back to the model.
  unknown_tool      a name that is not a tool: the tool list goes back.
  bad_arguments, refused, empty_submission   the tool's error goes back.
  budget            steps or tokens ran out without a submission: the session returns a
                    Proposal with error set, which the search rejects (proposer_error).
  client_error      the chat client raised: the same, with the client's message (but
                    openai_client.EndpointUnavailable, an endpoint down for good, propagates
                    and stops the run).
  tool_error        a tool raised (e.g. the runtime under `run` failed): the same.
The whole conversation (messages, tool schemas, every event, what was read, the runs, the
instructions' name, version and hash, token counts) is the proposal's raw_output (JSON), so it
is saved with the candidate (proposal.txt), and also under
archive_dir/agent_sessions/iteration_NNN/session_KK.json.

A chat client is any object with complete(messages, tools, **sampling) -> AgentReply:
  InProcessToolClient   an LLMBackend (the in-process sampler) with the tokenizer's chat
                        template (tools rendered by it) and <tool_call> parsing
                        (whale_jax.search.tool_calls: Qwen3 JSON and Qwen3.5 XML forms).
  OpenAIToolClient      any OpenAI-compatible /chat/completions endpoint with `tools`; reads
                        message.tool_calls, or <tool_call> text in the content when the server
                        does not parse calls (whale_jax.serve).
  (CLI coding agents are a separate proposer: whale_jax.search.cli_agent.)
"""
import copy
import dataclasses
import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.request

from whale_jax import atomic_files
from whale_jax import seeds as seeds_lib
from whale_jax.sampling import openai_client
from whale_jax.search import agent_tools
from whale_jax.search import archive as archive_lib
from whale_jax.search import archive_view
from whale_jax.search import context as context_lib
from whale_jax.search import evaluation as evaluation_lib
from whale_jax.search import proposal as proposal_lib
from whale_jax.search import steering
from whale_jax.search import tool_calls as tool_calls_lib

SESSION_FORMAT = "whale_jax.agentic_session/1"
NO_TOOL_CALL = ("Your reply called no tool. Each reply must call exactly one tool; finish with "
                "submit(patch=... or program=..., hypothesis=...).")
LAST_STEP = "This is your last step: call submit now."


@dataclasses.dataclass(frozen=True)
class AgentReply:
  """One model call's reply.

  Attributes:
    message: the assistant message to append to the conversation.
    tool_calls: [tool_calls.ToolCall], in order.
    text: the reply's text.
    prompt_tokens, completion_tokens: its cost.
  """
  message: dict
  tool_calls: tuple
  text: str = ""
  prompt_tokens: int = 0
  completion_tokens: int = 0


def tool_message(call, content):
  """The message carrying a tool's result back (tool_call_id set for endpoint calls)."""
  message = {"role": "tool", "content": content}
  if call.id:
    message["tool_call_id"] = call.id
  return message


class InProcessToolClient:
  """complete() over an LLMBackend: chat template with tools, <tool_call> parsing.

  Args:
    backend: an LLMBackend (e.g. whale_jax.sampling.Sampler).
    tokenizer: renders the chat template (tools included) and decodes.
    sampling: default SamplingParams; complete() keywords replace its fields.
    timeout_seconds: how long to wait for one reply.
  """

  def __init__(self, backend, tokenizer, sampling, timeout_seconds=1800.0):
    self.backend, self.tokenizer = backend, tokenizer
    self.sampling, self.timeout_seconds = sampling, timeout_seconds

  def complete(self, messages, tools, **sampling):
    params = self.sampling.replace(**sampling)
    plain = [{"role": m["role"], "content": m["content"]} for m in messages]
    prompt_ids = self.tokenizer.apply_chat_template(plain, add_generation_prompt=True,
                                                    tools=tools)
    completion = self.backend.submit(prompt_ids, params).result(self.timeout_seconds)[0]
    token_ids = list(completion.token_ids)
    if token_ids and token_ids[-1] in self.tokenizer.eos_ids:
      token_ids = token_ids[:-1]
    text = self.tokenizer.decode(token_ids)
    return AgentReply({"role": "assistant", "content": text},
                      tuple(tool_calls_lib.parse_tool_calls(text)), text, len(prompt_ids),
                      len(completion.token_ids))


class ClientError(RuntimeError):
  """The endpoint gave no usable reply (after retries)."""


class OpenAIToolClient:
  """complete() over an OpenAI-compatible endpoint's /chat/completions with `tools`.

  Args:
    base_url: e.g. "http://127.0.0.1:8000/v1".
    model: the model name the endpoint serves.
    api_key_env: environment variable with the API key (None: no key).
    timeout_seconds: limit on connecting and on each read.
    max_retries: retries of transient failures (connection, 429, 5xx), with doubling backoff.
    extra_body: fields added to every request.
    max_consecutive_failures: calls failing in a row (after their retries) after which a call
      raises openai_client.EndpointUnavailable, which stops the run, instead of ClientError.
  """

  def __init__(self, base_url, model, api_key_env=None, timeout_seconds=600.0, max_retries=3,
               initial_backoff_seconds=1.0, extra_body=None, sleep=time.sleep,
               max_consecutive_failures=3):
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
      raise ValueError(f"base_url={base_url!r} must start with http:// or https:// (e.g. "
                       "http://127.0.0.1:8000/v1).")
    if not isinstance(model, str) or not model:
      raise ValueError(f"model={model!r} must name the model the endpoint serves.")
    self.url, self.model = base_url.rstrip("/") + "/chat/completions", model
    self.api_key = openai_client.read_api_key(api_key_env)
    self.timeout_seconds, self.max_retries = timeout_seconds, max_retries
    self.initial_backoff_seconds, self._sleep = initial_backoff_seconds, sleep
    self.extra_body = dict(extra_body or {})
    if not isinstance(max_consecutive_failures, int) or max_consecutive_failures < 1:
      raise ValueError(f"max_consecutive_failures={max_consecutive_failures!r} must be an int "
                       ">= 1.")
    self.max_consecutive_failures, self.consecutive_failures = max_consecutive_failures, 0

  def _post(self, body):
    headers = {"Content-Type": "application/json"}
    if self.api_key:
      headers["Authorization"] = f"Bearer {self.api_key}"
    request = urllib.request.Request(self.url, json.dumps(body).encode(), headers,
                                     method="POST")
    backoff, failure = self.initial_backoff_seconds, ""
    for attempt in range(self.max_retries + 1):
      try:
        with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
          reply = json.loads(response.read())
        self.consecutive_failures = 0
        return reply
      except urllib.error.HTTPError as error:
        failure = f"HTTP {error.code}: {error.read()[:300].decode('utf-8', 'replace')}"
        if error.code != 429 and error.code < 500:
          break
      except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError,
              http.client.HTTPException, OSError, ValueError) as error:
        failure = f"{type(error).__name__}: {error}"
      if attempt < self.max_retries:
        self._sleep(backoff)
        backoff *= 2
    self.consecutive_failures += 1
    if self.consecutive_failures >= self.max_consecutive_failures:
      raise openai_client.EndpointUnavailable(self.url, self.consecutive_failures, failure,
                                              attempt + 1)
    raise ClientError(f"{self.url}: {failure}")

  def complete(self, messages, tools, **sampling):
    body = {"model": self.model, "messages": list(messages), "tools": tools,
            **self.extra_body, **{k: v for k, v in sampling.items() if v is not None}}
    reply = self._post(body)
    try:
      message = reply["choices"][0]["message"]
      usage = reply.get("usage") or {}
    except (KeyError, IndexError, TypeError) as error:
      raise ClientError(f"{self.url}: not a chat completion ({error}): "
                        f"{json.dumps(reply)[:200]}") from None
    text = message.get("content") or ""
    raw_calls = message.get("tool_calls") or []
    if raw_calls:
      calls = []
      for index, raw in enumerate(raw_calls):
        function = raw.get("function") if isinstance(raw, dict) else None
        call_id = str(raw.get("id") or f"call_{index}") if isinstance(raw, dict) else ""
        if not isinstance(function, dict):
          calls.append(tool_calls_lib.ToolCall("", {}, "A tool call without a function "
                                               "object.", json.dumps(raw)[:500], call_id))
          continue
        calls.append(tool_calls_lib.from_name_and_arguments(
            function.get("name"), function.get("arguments"), json.dumps(raw)[:2000], call_id))
      assistant = {"role": "assistant", "content": text, "tool_calls": raw_calls}
    else:
      calls = tool_calls_lib.parse_tool_calls(text)
      assistant = {"role": "assistant", "content": text}
    return AgentReply(assistant, tuple(calls), text, int(usage.get("prompt_tokens") or 0),
                      int(usage.get("completion_tokens") or 0))


def held_out_strings(splits, search_split="harness", held_out=("validation", "test")):
  """The reference strings of the held-out splits (the `withheld` of a proposer)."""
  if search_split in held_out:
    raise ValueError(f"search_split={search_split!r} is one of the held-out splits {held_out}.")
  return archive_view.reference_strings(
      [instance for name in held_out for instance in splits.get(name, ())])


def session_costs(archive_dir):
  """{"sessions", "rollouts", "generated_tokens", "prompt_tokens", "completion_tokens"} summed
  over the agentic and CLI-agent sessions (session_KK.json, cli_session_KK.json: the episodes
  of their `run` calls) saved under archive_dir (so a resumed run counts them once)."""
  totals = dict.fromkeys(("sessions", "rollouts", "generated_tokens", "prompt_tokens",
                          "completion_tokens"), 0)
  root = os.path.join(os.fspath(archive_dir), "agent_sessions")
  if not os.path.isdir(root):
    return totals
  for folder in sorted(os.listdir(root)):
    for name in sorted(os.listdir(os.path.join(root, folder))):
      if not (name.startswith(("session_", "cli_session_")) and name.endswith(".json")):
        continue
      session = archive_lib.read_json(os.path.join(root, folder, name))
      totals["sessions"] += 1
      for key in ("rollouts", "generated_tokens", "prompt_tokens", "completion_tokens"):
        totals[key] += int(session.get(key, 0))
  return totals


class SandboxRunner:
  """(harness, task_ids) -> Evaluation: `run` of the agent on search tasks.

  Args:
    evaluate: the search's evaluate function (whale_jax.search.evaluation.make_evaluate over
      the sandboxed HarnessRuntime).
    instances: the search split (only these tasks can be run).
    seed: sample keys are those of the search (sample_keys(instances, seed)), so a draft's
      episodes are comparable with the archived ones.
  """

  def __init__(self, evaluate, instances, seed=0):
    self.evaluate = evaluate
    self.by_id = {instance.id: instance for instance in instances}
    self.seed = seed

  def __call__(self, harness, task_ids):
    instances = [self.by_id[task_id] for task_id in task_ids]
    keys = evaluation_lib.sample_keys(instances, self.seed)
    return evaluation_lib.as_evaluation(self.evaluate(harness, instances, keys), instances,
                                        keys)


def _opening(context, record, view):
  score = ("not scored" if record is None or record.success is None else
           f"success {record.success:.3f}, mean turns {record.mean_turns:.2f}")
  return (f"Iteration {context.iteration}. The current harness is {context.incumbent_id} "
          f"({score}); patches apply to candidates/{context.incumbent_id}/harness.py.\n\n"
          f"{view.read('README.md')}\nExplore, prototype, then submit one candidate.")


class AgenticProposer:
  """Proposals from tool-calling sessions (see the module docstring).

  Args:
    client: a chat client with complete(messages, tools, **sampling).
    archive_dir: the search's archive directory (the view is built from it); None leaves the
      proposer unbound until for_search.
    domain: the tasks.Domain (name, description, allowed imports).
    instances: the search split (None while unbound).
    runner: (harness, task_ids) -> Evaluation for `run` (e.g. SandboxRunner); None: no `run`
      (unless use_run_tool, where for_search makes a SandboxRunner).
    budgets: AgentBudgets per session.
    search_answers: one of archive_view.SEARCH_ANSWER_MODES (per-recipe defaults in
      archive_view.SEARCH_ANSWERS_BY_RECIPE).
    withheld: strings that must never reach the agent (held-out references).
    instructions: steering.Instructions (default: the domain's file).
    name: recorded as each proposal's proposer.
    sampling: keyword arguments of every model call (e.g. temperature, max_tokens).
    seed: base seed of the model calls (None: no seed is sent); step s of session i in
      iteration t sends seeds.derive_seed(seed, "proposer_call", *context.call_site,
      ("agentic", i, s)) (context.call_site is (t,), or (t, search session) when named).
    max_lines: the search's line limit for candidates.
    tokenizer: counts tokens when the client does not report them.
    use_run_tool: for_search gives the bound proposer a SandboxRunner over its evaluate.
  """

  def __init__(self, client, archive_dir, domain, instances, runner=None,
               budgets=agent_tools.AgentBudgets(), search_answers="none", withheld=(),
               instructions=None, name="agentic", sampling=None, seed=0,
               max_lines=None, tokenizer=None, use_run_tool=False):
    if not callable(getattr(client, "complete", None)):
      raise TypeError(f"AgenticProposer needs a client with complete(messages, tools, "
                      f"**sampling); got {type(client).__name__}.")
    self.client, self.domain = client, domain
    self.archive_dir = None if archive_dir is None else os.fspath(archive_dir)
    self.instances = None if instances is None else list(instances)
    if self.instances is not None and not self.instances:
      raise ValueError("AgenticProposer needs the search split: a non-empty list of instances.")
    if (self.archive_dir is None) != (self.instances is None):
      raise ValueError("Give AgenticProposer both archive_dir and instances, or neither (then "
                       "bind it to a search with for_search).")
    self.runner, self.budgets, self.use_run_tool = runner, budgets, use_run_tool
    self.search_answers = archive_view.check_search_answers(search_answers)
    self.withheld = frozenset(withheld)
    self.instructions = instructions or steering.load_instructions(domain)
    self.name, self.sampling, self.seed = name, dict(sampling or {}), seed
    self.max_lines, self.tokenizer = max_lines, tokenizer
    self.rollouts = self.generated_tokens = 0
    self.sessions = []
    self._view = (None, None)   # (archive state, view): sessions of one iteration share it

  @property
  def instruction_version(self):
    return self.instructions.version

  @property
  def instruction_hash(self):
    return self.instructions.hash

  def config(self):
    """What the run's config records about this proposer."""
    return {"proposer": self.name, "kind": "agentic", "search_answers": self.search_answers,
            "budgets": self.budgets.to_json(), "instructions": self.instructions.to_json(),
            "run_tool": self.runner is not None or self.use_run_tool,
            "sampling": self.sampling}

  def for_search(self, archive_dir, evaluate, instances, seed=0):
    """A copy bound to one search: its archive, its search split, `run` over its evaluate."""
    bound = copy.copy(self)
    bound.archive_dir, bound.instances = os.fspath(archive_dir), list(instances)
    if self.use_run_tool:
      bound.runner = SandboxRunner(evaluate, instances, seed)
    bound.rollouts = bound.generated_tokens = 0
    bound.sessions, bound._view = [], (None, None)
    return bound

  def propose(self, context, n):
    if self.archive_dir is None:
      raise RuntimeError("This AgenticProposer is not bound to a search: call "
                         "for_search(archive_dir, evaluate, instances) and use what it returns.")
    return self.propose_at(context, range(n))

  def propose_at(self, context, indices):
    """The sessions number `indices` of this iteration (a resumed search asks again for the
    ones whose call failed)."""
    if self.archive_dir is None:
      raise RuntimeError("This AgenticProposer is not bound to a search: call "
                         "for_search(archive_dir, evaluate, instances) and use what it returns.")
    return [self._session(context, index) for index in indices]

  def _system(self, context):
    budgets = self.budgets
    return (f"{self.instructions.text.rstrip()}\n\n## This session\n"
            f"Budgets: {budgets.max_steps} replies, {budgets.max_tokens} tokens, "
            f"{budgets.max_runs} runs of at most {budgets.max_run_tasks} tasks "
            f"({budgets.max_run_episodes} episodes in all). Limits: at most "
            f"{context.max_lines} lines; imports only: {', '.join(context.allowed_imports)}."
            f"{' Prompt-only mode: change only the prompt strings.' if context.prompt_only else ''}"
            f"\n{tool_calls_lib.FORMAT_NOTE}\n\n{proposal_lib.REPLY_FORMAT.split(chr(10), 1)[1]}")

  def _session(self, context, index):
    archive = archive_lib.Archive(self.archive_dir)
    state = (len(archive.candidates), context.incumbent_id)
    view = self._view[1] if self._view[0] == state else None
    if view is None:
      view = archive_view.build_view(
          archive, self.domain.name, self.domain.description, self.instances,
          incumbent_id=context.incumbent_id, search_answers=self.search_answers,
          withheld=self.withheld)
      self._view = (state, view)
    record = archive.get(context.incumbent_id) if context.incumbent_id in {
        c.id for c in archive.candidates} else None
    references = {i.id: archive_view.shown_reference(i, self.search_answers)
                  for i in self.instances}
    tools = agent_tools.AgentTools(
        view, context.incumbent_id, context.incumbent.source, self.runner,
        [i.id for i in self.instances], self.budgets, context.allowed_imports,
        self.max_lines or context.max_lines,
        prompt_only_reference=None if not context.prompt_only else
        archive.source(archive.candidates[0].id),
        known_hashes=context.known_hashes, references={
            k: v for k, v in references.items() if v is not None})
    schemas = tools.schemas()
    messages = [{"role": "system", "content": self._system(context)},
                {"role": "user", "content": _opening(context, record, view)}]
    counts = {kind: 0 for kind in ("no_tool_call", "malformed", "unknown_tool",
                                   "bad_arguments", "refused", "empty_submission")}
    prompt_tokens = completion_tokens = steps = 0
    stop_reason, error = "", ""
    while tools.submission is None:
      if steps >= self.budgets.max_steps:
        stop_reason = f"step budget: {steps} replies without an accepted submission"
        break
      if prompt_tokens + completion_tokens >= self.budgets.max_tokens:
        stop_reason = (f"token budget: {prompt_tokens + completion_tokens} >= "
                       f"{self.budgets.max_tokens} tokens without an accepted submission")
        break
      sampling = dict(self.sampling)
      if self.seed is not None:
        sampling["seed"] = seeds_lib.derive_seed(self.seed, "proposer_call",
                                                 *context.call_site, ("agentic", index, steps))
      try:
        reply = self.client.complete(messages, schemas, **sampling)
      except openai_client.EndpointUnavailable:
        raise   # the endpoint is down for good: stop the run, as the one-shot proposers do
      except Exception as raised:  # pylint: disable=broad-except
        stop_reason = "client_error"
        error = f"The chat client raised {type(raised).__name__}: {raised}"
        break
      steps += 1
      prompt_tokens += reply.prompt_tokens or context_lib.count_message_tokens(
          messages, self.tokenizer)
      completion_tokens += reply.completion_tokens or context_lib.count_tokens(
          reply.text, self.tokenizer)
      messages.append(dict(reply.message))
      if not reply.tool_calls:
        counts["no_tool_call"] += 1
        messages.append({"role": "user", "content": NO_TOOL_CALL})
      for call in reply.tool_calls:
        if call.error:
          counts["malformed"] += 1
          tools.events.append({"tool": call.name, "ok": False, "kind": "malformed",
                               "text": call.text[:400], "error": call.error})
          messages.append(tool_message(call, f"ERROR: malformed tool call: {call.error}"))
          continue
        try:
          result = tools.call(call.name, call.arguments)
        except Exception as raised:  # pylint: disable=broad-except
          stop_reason = "tool_error"   # e.g. the runtime under `run` failed: not the model's
          error = f"The {call.name} tool raised {type(raised).__name__}: {raised}"
          break
        if not result.ok:
          counts[result.kind] = counts.get(result.kind, 0) + 1
        messages.append(tool_message(call, agent_tools.render_result(result)))
        if tools.submission is not None:
          break
      if stop_reason:
        break
      if tools.submission is None and steps == self.budgets.max_steps - 1:
        messages.append({"role": "user", "content": LAST_STEP})
    self.rollouts += tools.rollouts
    self.generated_tokens += tools.generated_tokens
    transcript = {
        "format": SESSION_FORMAT, "proposer": self.name, "iteration": context.iteration,
        "index": index, "incumbent_id": context.incumbent_id,
        "instructions": self.instructions.to_json(), "budgets": self.budgets.to_json(),
        "search_answers": self.search_answers, "tools": schemas, "messages": messages,
        "steps": steps, "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
        "counts": counts, "stop_reason": stop_reason or "submitted", "error": error,
        "submitted": tools.submission is not None, **tools.summary()}
    self.sessions.append(transcript)
    raw = json.dumps(transcript, indent=1, sort_keys=True)
    atomic_files.write_text(os.path.join(
        self.archive_dir, "agent_sessions", f"iteration_{context.iteration:03d}",
        f"session_{index:02d}.json"), raw + "\n")
    submission = tools.submission
    if submission is None and stop_reason == "client_error":
      # No reply from the endpoint (after the client's retries): a failed call, logged and
      # counted by the search, never archived; a resumed search runs this session again.
      return dataclasses.replace(proposal_lib.failed_call(error, self.name), raw_output=raw,
                                 prompt_tokens=prompt_tokens,
                                 completion_tokens=completion_tokens, mechanism="agentic")
    if submission is None:
      return proposal_lib.Proposal(
          kind="patch", text="", raw_output=raw, prompt_tokens=prompt_tokens,
          completion_tokens=completion_tokens, proposer=self.name, mechanism="agentic",
          error=error or f"The agentic session ended without a submission ({stop_reason}; "
          f"{steps} replies, {tools.rollouts} rollouts; {counts}).")
    return dataclasses.replace(submission, raw_output=raw, prompt_tokens=prompt_tokens,
                               completion_tokens=completion_tokens, proposer=self.name,
                               mechanism="agentic")
