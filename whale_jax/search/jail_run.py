"""`run` inside the CLI agent's jail: the host runs a draft harness on search tasks.

  server = RunServer(os.path.join(relay_dir, SOCKET_NAME), tools)  # tools: AgentTools
  write_client(relay_dir)        # relay_dir/bin/run, seen in the jail as /relay/bin/run
  ... in the jail:  run candidate_1.py [--tasks N] [--task-ids ID,ID]
  server.close()                 # waits for a run in progress; server.requests: the log

The agent types `run DRAFT.py`. The client (CLIENT, a stdlib-only script read-only in the
jail) reads the draft there and sends it, with the options, as one JSON line over the Unix
socket the host listens on (in the relay folder, as the other relays: only the jail and the
host see it). The host hands it to whale_jax.search.agent_tools.AgentTools.run_draft, the
agentic proposer's `run`: the search's candidate checks, then an evaluation on the first N (or
the named) tasks of the search split through the search's evaluate function (the one episode
collector, the real sandbox), counted in the tools' rollouts and generated tokens and limited
by AgentBudgets (runs, tasks per run, episodes). It answers with one JSON line: ok, run (the
run's name, run_NN), summary (printed by the client) and files (summary.md and one full trace
per task), which the client writes under /agent/runs/run_NN/. The host never opens a path the
agent named, so no link of the agent's can send a write elsewhere.

Only search-split task ids are accepted; every text goes through the view's scrub (held-out
reference strings become [withheld]) and references are shown per search_answers, as for the
agentic proposer's `run`. A refused request (bad arguments, spent budget, a draft that fails
the checks) costs nothing and says why; a request the host fails on (the runtime raised) is
answered and logged, and the session goes on.
"""
import json
import os
import socket
import sys
import threading


SOCKET_NAME = "run.sock"
CLIENT_NAME = "run"
MAX_REQUEST_BYTES = 4 << 20
ACCEPT_POLL_SECONDS = 0.2
READ_TIMEOUT_SECONDS = 60.0
RUNS_FOLDER = "runs"
_CLIENT_BODY = '''\
import json, os, socket, sys
USAGE = ("usage: run DRAFT.py [--tasks N] [--task-ids ID,ID,...]\\n"
         "Runs the harness program in DRAFT.py in the sandbox on search tasks (the first N, or "
         "the ids given); the full traces are written to " + RUNS + "/run_NN/ and a summary is "
         "printed. Every run spends this session's run budget.")
def fail(message, status=2):
  print("run: " + message, file=sys.stderr)
  sys.exit(status)
def main(args):
  if not args or args[0] in ("-h", "--help"):
    print(USAGE)
    sys.exit(0 if args else 2)
  path, num_tasks, task_ids, rest = args[0], None, None, args[1:]
  while rest:
    option = rest.pop(0)
    if option not in ("--tasks", "--task-ids") or not rest:
      fail("unknown option or missing value: " + option + "\\n" + USAGE)
    value = rest.pop(0)
    if option == "--tasks":
      try:
        num_tasks = int(value)
      except ValueError:
        fail("--tasks takes a number, got " + value)
    else:
      task_ids = [t for t in value.split(",") if t]
  try:
    with open(path, encoding="utf-8") as file:
      program = file.read()
  except (OSError, UnicodeDecodeError) as error:
    fail("cannot read " + path + ": " + str(error))
  request = {"draft": path, "program": program, "num_tasks": num_tasks, "task_ids": task_ids}
  connection = socket.socket(socket.AF_UNIX)
  try:
    connection.connect(SOCKET)
    connection.sendall(json.dumps(request).encode() + b"\\n")
    connection.shutdown(socket.SHUT_WR)
    chunks = []
    while True:
      chunk = connection.recv(1 << 16)
      if not chunk:
        break
      chunks.append(chunk)
  except OSError as error:
    fail("the host's run service is not reachable (" + str(error) + ")", 3)
  try:
    reply = json.loads(b"".join(chunks))
  except ValueError:
    fail("the host's answer was cut off (the session may be ending)", 3)
  files = reply.get("files") or {}
  if files:
    folder = os.path.join(RUNS, os.path.basename(str(reply.get("run") or "run")))
    os.makedirs(folder, exist_ok=True)
    for name, text in sorted(files.items()):
      name = os.path.basename(name)
      if name and not name.startswith("."):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as file:
          file.write(text)
  print(reply.get("summary", ""))
  sys.exit(0 if reply.get("ok") else 1)
main(sys.argv[1:])
'''


def client_script(socket_path, runs_dir):
  """The client's text: the jail's Python (this interpreter, which the jail shows read-only)
  with the socket and the runs folder as the jail sees them."""
  python = os.path.realpath(sys.executable)
  return (f"#!{python} -S\n\"\"\"The `run` command of a CLI agent's jail "
          f"(whale_jax.search.jail_run).\"\"\"\nSOCKET = {socket_path!r}\n"
          f"RUNS = {runs_dir!r}\n{_CLIENT_BODY}")


def write_client(relay_dir, socket_path, runs_dir):
  """Writes relay_dir/bin/run (executable); returns its folder."""
  folder = os.path.join(relay_dir, "bin")
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, CLIENT_NAME)
  with open(path, "w", encoding="utf-8") as file:
    file.write(client_script(socket_path, runs_dir))
  os.chmod(path, 0o755)
  return folder


def _safe_file_name(task_id):
  return "".join(c if c.isalnum() or c in "-_.:" else "_" for c in str(task_id)).lstrip(
      ".") or "_"


def _optional(request, name, kind):
  value = request.get(name)
  if value is not None and not isinstance(value, kind):
    raise ValueError(f"{name} must be {kind.__name__}, got {type(value).__name__}.")
  return value


def listen(owner, path, backlog, timeout=None):
  """Sets owner.server, a Unix socket listening at path whose accept() times out after timeout
  seconds (None: never), owner.closed = False and owner.thread, a started daemon thread
  running owner._serve()."""
  owner.server = socket.socket(socket.AF_UNIX)
  owner.server.bind(path)
  owner.server.listen(backlog)
  owner.server.settimeout(timeout)
  owner.closed = False
  serve = owner._serve  # pylint: disable=protected-access
  owner.thread = threading.Thread(target=serve, daemon=True)
  owner.thread.start()


class RunServer:
  """The host side of `run` (module docstring): serves one request at a time on a Unix socket.

  Args:
    path: the socket's path (in the relay folder).
    tools: the session's AgentTools (its runner, budgets, view and counters).

  Attributes:
    requests: one record per request: draft, ok, kind ("ran", "refused", "host_error",
      "bad_request"), run (run_NN or None), task_ids, message (the summary's first lines).
  """

  def __init__(self, path, tools):
    if tools.runner is None:
      raise ValueError("RunServer needs AgentTools with a runner (the search's evaluate on "
                       "the search split); this one has none.")
    self.path, self.tools, self.requests = path, tools, []
    listen(self, path, 8, ACCEPT_POLL_SECONDS)

  def _serve(self):
    while not self.closed:
      try:
        connection, _ = self.server.accept()
      except socket.timeout:
        continue
      except OSError:
        return
      with connection:
        self._answer(connection)

  def _answer(self, connection):
    connection.settimeout(READ_TIMEOUT_SECONDS)
    chunks, size = [], 0
    try:
      while size <= MAX_REQUEST_BYTES:
        chunk = connection.recv(1 << 16)
        if not chunk:
          break
        chunks.append(chunk)
        size += len(chunk)
    except OSError:
      return
    if size > MAX_REQUEST_BYTES:
      reply = self._refusal("", "bad_request", f"the request is over {MAX_REQUEST_BYTES} "
                            "bytes; run one harness file at a time.")
    else:
      reply = self.handle(b"".join(chunks))
    try:
      connection.settimeout(READ_TIMEOUT_SECONDS)
      connection.sendall(json.dumps(reply).encode() + b"\n")
    except OSError:
      pass   # the agent is gone (killed at its time limit): the run still counts

  def _refusal(self, draft, kind, message):
    summary = self.tools.view.scrub(f"run {'refused' if kind != 'host_error' else 'failed'}: "
                                    f"{message}")
    self.requests.append({"draft": draft, "ok": False, "kind": kind, "run": None,
                          "task_ids": [], "message": summary[:400]})
    return {"ok": False, "run": None, "summary": summary, "files": {}}

  def handle(self, data):
    """The reply (a dict) to one request's bytes."""
    try:
      request = json.loads(data)
      if not isinstance(request, dict):
        raise ValueError("not a JSON object")
    except ValueError as error:
      return self._refusal("", "bad_request", f"the request is not a JSON object ({error}).")
    draft = str(request.get("draft") or "draft")[:200]
    tools = self.tools
    try:
      program = _optional(request, "program", str)
      num_tasks = _optional(request, "num_tasks", int)
      task_ids = _optional(request, "task_ids", list)
      result = tools.run_draft(program=program, num_tasks=num_tasks, task_ids=task_ids)
    except ValueError as error:   # EmptySubmission included
      return self._refusal(draft, "refused", str(error))
    except Exception as raised:  # pylint: disable=broad-except  # the runtime failed
      return self._refusal(draft, "host_error", f"the host could not run it "
                           f"({type(raised).__name__}: {raised}); the budget is unchanged.")
    if not result.ok:
      return self._refusal(draft, "refused", result.report)
    name = f"run_{len(tools.runs):02d}"
    folder = f"{RUNS_FOLDER}/{name}"
    budgets = tools.budgets
    lines = [f"{draft}: {result.report}", result.headline]
    files = {}
    for task_id, score, outcome, turns, trace in zip(result.task_ids, result.scores,
                                                     result.outcomes, result.num_turns,
                                                     result.traces):
      file_name = f"{_safe_file_name(task_id)}.txt"
      files[file_name] = trace
      lines.append(f"  {task_id}: score {score:g}, {outcome}, {turns} llm call(s) -> "
                   f"{folder}/{file_name}")
    lines.append(f"budget left: {budgets.max_runs - len(tools.runs)} of {budgets.max_runs} "
                 f"runs, {budgets.max_run_episodes - tools.run_episodes} of "
                 f"{budgets.max_run_episodes} episodes (at most {budgets.max_run_tasks} tasks "
                 "per run).")
    summary = tools.view.scrub("\n".join(lines))
    files["summary.md"] = summary + "\n"
    self.requests.append({"draft": draft, "ok": True, "kind": "ran", "run": name,
                          "task_ids": list(result.task_ids), "message": summary[:400]})
    return {"ok": True, "run": name, "summary": summary, "files": files}

  def close(self):
    """Stops accepting and waits for a request in progress (so its episodes are counted)."""
    self.closed = True
    self.thread.join()
    self.server.close()


def summary(tools, requests):
  """What a session's `run` calls did (tools: its AgentTools; requests: RunServer.requests),
  for its record; rollouts and generated_tokens are what the run's accounting adds up."""
  return {"run_requests": list(requests or ()),
          "runs": list(tools.runs), "rollouts": tools.rollouts,
          "generated_tokens": tools.generated_tokens, "run_episodes": tools.run_episodes,
          "budgets": tools.budgets.to_json()}

