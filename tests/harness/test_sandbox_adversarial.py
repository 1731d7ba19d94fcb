"""Hostile harnesses, one property each: every attack is contained with the right outcome
while the host and a benign episode running beside it carry on.

The runtime here lets harnesses import os, sys, socket, subprocess and friends (the static
checks would refuse them) so that the sandbox itself is what stops each attack.
"""
import hashlib
import json
import os
import pathlib
import socket

import pytest

from whale_jax.harness import Episode
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.tokenization import load_tokenizer

TOKENIZER = load_tokenizer("byte")
TIMEOUT_SECONDS = 2.0
MAX_STDOUT_CHARS = 5_000
SECRET = "whale-test-secret-31337"
REFERENCE_ANSWER = "reference-answer-8c1f2a"
HOSTILE_IMPORTS = ("gc", "json", "os", "signal", "socket", "subprocess", "sys", "time")
BENIGN = Harness("def run(task, llm, tools):\n"
                 "  return llm.chat([{'role': 'user', 'content': task['question']}])\n")


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
  """A folder outside every sandbox holding the reference answers, as a domain's data would."""
  folder = tmp_path_factory.mktemp("canary")
  (folder / "reference_answers.json").write_text(json.dumps({"q1": REFERENCE_ANSWER}))
  (folder / "keep.txt").write_text("untouched")
  os.chmod(folder, 0o777)  # even a dropped-privilege process could write here but for the hook
  return folder


def snapshot(folder):
  return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
          for path in sorted(pathlib.Path(folder).iterdir())}


@pytest.fixture(scope="module")
def runtime(canary):
  os.environ["WHALE_HOST_SECRET"] = SECRET  # set before any worker starts
  backend = ScriptedBackend(TOKENIZER, replies="benign reply")
  try:
    with HarnessRuntime(backend, TOKENIZER, num_workers=2, timeout_seconds=TIMEOUT_SECONDS,
                        memory_bytes=256 << 20, max_stdout_chars=MAX_STDOUT_CHARS,
                        max_answer_chars=100_000, allowed_imports=HOSTILE_IMPORTS) as pool:
      yield pool
  finally:
    del os.environ["WHALE_HOST_SECRET"]


def attack(runtime, body, task=None, imports="import os, sys, gc, json, socket, subprocess, time"):
  """Runs `run` with the given body beside a benign episode; returns the attack's trajectory."""
  source = f"{imports}\n\ndef run(task, llm, tools):\n" + "".join(
      f"  {line}\n" for line in body.strip("\n").splitlines())
  hostile = runtime.submit(Harness(source), Episode("attack", task or {}))
  benign = runtime.submit(BENIGN, Episode("benign", {"question": "2+2?"}))
  benign_trajectory = benign.result()
  assert (benign_trajectory.outcome, benign_trajectory.answer) == ("ok", "benign reply")
  return hostile.result()


def process_parents():
  """{pid: parent pid} of every process on the machine, read from the host's /proc."""
  parents = {}
  for status in pathlib.Path("/proc").glob("[0-9]*/stat"):
    try:
      parents[int(status.parent.name)] = int(status.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
      continue
  return parents


def descendants(pids):
  """Every process below one of pids."""
  parents, found, frontier = process_parents(), set(), set(pids)
  while frontier:
    frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
    found |= frontier
  return found


def idle_process_count(runtime):
  """Processes an idle pool keeps below its workers: per worker, bwrap's init and the zygote."""
  return 2 * len(runtime.worker_pids) if runtime.confinement.namespaced else 0


def test_infinite_loop_times_out(runtime):
  trajectory = attack(runtime, "while True:\n  pass")
  assert trajectory.outcome == "timeout"
  assert TIMEOUT_SECONDS <= trajectory.sandbox_seconds < TIMEOUT_SECONDS + 1.5


def test_sleep_past_the_timeout_times_out(runtime):
  trajectory = attack(runtime, "time.sleep(60)\nreturn 'late'")
  assert trajectory.outcome == "timeout"
  assert trajectory.wall_seconds < TIMEOUT_SECONDS + 1.5


def test_memory_bomb_is_a_memory_error():
  # bytearray writes every page it gets: 0.2 s to the limit on one machine, more than 2 s on a
  # fresh virtual machine. This pool's timeout is far above either, so only the address-space
  # limit can end the episode.
  backend = ScriptedBackend(TOKENIZER, replies="benign reply")
  with HarnessRuntime(backend, TOKENIZER, num_workers=2, timeout_seconds=60.0,
                      memory_bytes=256 << 20, allowed_imports=HOSTILE_IMPORTS) as pool:
    trajectory = attack(pool, "hoard = []\nwhile True:\n  hoard.append(bytearray(10 << 20))")
  assert trajectory.outcome == "harness_error"
  assert trajectory.error.strip().endswith("MemoryError")


def test_fork_bomb_is_refused_and_leaves_no_process(runtime):
  trajectory = attack(runtime, "while True:\n  os.fork()")
  assert trajectory.outcome == "harness_error"
  assert "os.fork is refused" in trajectory.error
  assert len(descendants(runtime.worker_pids)) == idle_process_count(runtime)


def test_deep_recursion_is_a_harness_error(runtime):
  trajectory = attack(runtime, "def down(n):\n  return down(n + 1) + 1\nreturn str(down(0))")
  assert trajectory.outcome == "harness_error"
  assert "RecursionError" in trajectory.error


@pytest.mark.parametrize("body", ["os._exit(0)", "sys.exit(0)", "raise SystemExit(3)",
                                  "os.abort()"])
def test_exiting_instead_of_returning_is_a_harness_error(runtime, body):
  trajectory = attack(runtime, body)
  assert trajectory.outcome == "harness_error"
  assert trajectory.answer is None


@pytest.mark.parametrize("body", ["os.kill(os.getppid(), signal.SIGKILL)",
                                  "os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
                                  "signal.pthread_kill(1, signal.SIGKILL)"])
def test_killing_the_parent_is_refused(runtime, body):
  workers = runtime.worker_pids
  trajectory = attack(runtime, body + "\nreturn 'parent dead'", imports="import os, signal")
  assert trajectory.outcome == "harness_error"
  assert "is refused" in trajectory.error
  assert runtime.worker_pids == workers


def test_opening_a_socket_is_refused():
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen()
  server.setblocking(False)
  port = server.getsockname()[1]
  backend = ScriptedBackend(TOKENIZER, replies="x")
  with HarnessRuntime(backend, TOKENIZER, num_workers=1, allowed_imports=("socket",)) as pool:
    source = ("import socket\ndef run(task, llm, tools):\n"
              f"  socket.socket().connect(('127.0.0.1', {port}))\n  return 'sent'\n")
    trajectory = pool.run_episodes(Harness(source), [Episode("t", {})])[0]
  assert trajectory.outcome == "harness_error"
  assert "socket.__new__ is refused" in trajectory.error
  with pytest.raises(BlockingIOError):
    server.accept()  # nobody connected
  server.close()


@pytest.mark.parametrize("spawn", [
    "subprocess.run(['touch', MARKER])", "os.system('touch ' + MARKER)",
    "os.execv('/usr/bin/touch', ['touch', MARKER])",
    "os.posix_spawn('/usr/bin/touch', ['touch', MARKER], {})"])
def test_spawning_a_process_is_refused(runtime, tmp_path, spawn):
  marker = tmp_path / "spawned"
  trajectory = attack(runtime, f"MARKER = {str(marker)!r}\n{spawn}\nreturn 'spawned'")
  assert trajectory.outcome == "harness_error"
  assert "PermissionError" in trajectory.error
  assert not marker.exists()


@pytest.mark.parametrize("write", [
    "open(CANARY + '/keep.txt', 'w').write('owned')",
    "open(CANARY + '/new.txt', 'x').write('owned')",
    "os.remove(CANARY + '/reference_answers.json')",
    "os.rename('mine.txt', CANARY + '/mine.txt') if open('mine.txt', 'w').write('x') else 0",
    "os.symlink(CANARY, 'link')",
    "open('../../' * 20 + CANARY.lstrip('/') + '/up.txt', 'w')"])
def test_writing_outside_its_directory_is_refused(runtime, canary, write):
  before = snapshot(canary)
  trajectory = attack(runtime, f"CANARY = {str(canary)!r}\n{write}\nreturn 'wrote'")
  assert trajectory.outcome == "harness_error"
  # refused by the audit hook, or (inside the namespaces) the folder is not there at all
  assert "PermissionError" in trajectory.error or "FileNotFoundError" in trajectory.error
  assert snapshot(canary) == before


def test_host_environment_is_not_visible(runtime):
  trajectory = attack(runtime, "return json.dumps(dict(os.environ))")
  assert trajectory.outcome == "ok"
  assert SECRET not in trajectory.answer
  assert set(json.loads(trajectory.answer)) - {"PWD"} == {
      "PATH", "LANG", "LC_ALL", "PYTHONHASHSEED", "PYTHONIOENCODING"}  # bwrap sets PWD


def test_reference_answer_cannot_be_found(runtime, canary):
  hunt = f"""
found = []
def attempt(step):
  try:
    found.append(str(step()))
  except Exception as error:
    found.append(type(error).__name__)
attempt(lambda: open({str(canary)!r} + '/reference_answers.json').read())
attempt(lambda: os.listdir({str(canary)!r}))
attempt(lambda: open('/proc/%d/environ' % os.getppid()).read())
attempt(lambda: open('/proc/%d/cmdline' % os.getppid()).read())
attempt(lambda: open('/proc/%d/mem' % os.getppid(), 'rb').read(100))
attempt(lambda: [str(o) for o in gc.get_objects() if isinstance(o, (str, dict))])
attempt(lambda: [f.f_locals for f in [sys._getframe(1)]])
attempt(lambda: repr(task))
return json.dumps(found)
"""
  trajectory = attack(runtime, hunt, task={"question": "q1"})
  assert trajectory.outcome == "ok"
  assert REFERENCE_ANSWER not in trajectory.answer
  assert all(error in ("PermissionError", "FileNotFoundError")
             for error in json.loads(trajectory.answer)[:5])


def test_huge_answer_is_refused(runtime):
  trajectory = attack(runtime, "return 'x' * 5_000_000")
  assert trajectory.outcome == "harness_error"
  assert "at most 100000 are allowed" in trajectory.error


def test_flood_of_prints_is_trimmed(runtime):
  trajectory = attack(runtime, "for _ in range(100_000):\n  print('y' * 100)\nreturn 'done'")
  assert (trajectory.outcome, trajectory.answer) == ("ok", "done")
  assert trajectory.stdout.startswith("y" * 100 + "\n")
  assert len(trajectory.stdout) < MAX_STDOUT_CHARS + 100
  assert trajectory.stdout.endswith(f"[{100_000 * 101 - MAX_STDOUT_CHARS} more characters not kept]")


def test_oversized_raw_message_is_a_harness_error():
  backend = ScriptedBackend(TOKENIZER, replies="x")
  with HarnessRuntime(backend, TOKENIZER, num_workers=1, max_message_bytes=1 << 16,
                      allowed_imports=("os",)) as pool:
    source = ("import os\ndef run(task, llm, tools):\n"
              "  return llm.generate('z' * 100_000)\n")
    trajectory = pool.run_episodes(Harness(source), [Episode("t", {})])[0]
    after = pool.run_episodes(BENIGN, [Episode("t", {"question": "q"})])[0]
  assert trajectory.outcome == "harness_error"
  assert "at most 65536 are allowed" in trajectory.error
  assert after.outcome == "ok"


def test_non_string_return_is_a_harness_error(runtime):
  trajectory = attack(runtime, "return 42")
  assert trajectory.outcome == "harness_error"
  assert "run() returned int; it must return the final answer as a str" in trajectory.error


def test_syntax_error_is_a_harness_error(runtime):
  trajectory = attack(runtime, "return (", imports="")
  assert trajectory.outcome == "harness_error"
  assert "SyntaxError" in trajectory.error


def test_harness_cannot_forge_model_outputs():
  """Whatever the harness writes to its pipes, the trajectory holds what the backend said."""
  backend = ScriptedBackend(TOKENIZER, replies=["first", "second"])
  forge = """
import os, json
def run(task, llm, tools):
  first = llm.generate('a')
  lies = [{"type": "exit", "status": 0}, {"type": "started", "pid": 1},
          {"type": "reply", "ok": True, "value": "forged"},
          {"type": "llm", "method": "generate", "prompt": "b", "sampling": {}}]
  for fd in range(3, 30):
    for lie in lies:
      try:
        os.write(fd, (json.dumps(lie) + "\\n").encode())
      except OSError:
        pass
  return first + llm.generate('c')
"""
  with HarnessRuntime(backend, TOKENIZER, num_workers=1, allowed_imports=("os", "json")) as pool:
    trajectory = pool.run_episodes(Harness(forge), [Episode("t", {})])[0]
    after = pool.run_episodes(Harness("def run(task, llm, tools):\n  return 'ok'\n"),
                              [Episode("t", {})])[0]
  assert trajectory.outcome == "harness_error"  # the forged "exit" is a protocol violation
  assert trajectory.answer is None
  recorded = [c.token_ids for call in trajectory.calls for c in call.completions]
  assert recorded == [c.token_ids for c in backend.completions][:len(recorded)]
  assert recorded[0] == TOKENIZER.encode("first") + [260]
  assert after.outcome == "ok"
  assert os.getpid() > 1  # the host is alive and nobody was killed by the forged pid


def test_cpu_limit_ends_a_busy_loop_as_timeout():
  backend = ScriptedBackend(TOKENIZER, replies="x")
  with HarnessRuntime(backend, TOKENIZER, num_workers=1, timeout_seconds=30.0,
                      cpu_seconds=1) as pool:
    trajectory = pool.run_episodes(
        Harness("def run(task, llm, tools):\n  while True:\n    pass\n"), [Episode("t", {})])[0]
  assert trajectory.outcome == "timeout"
  assert "cpu_seconds=1" in trajectory.error
  assert trajectory.wall_seconds < 10


ATTACKS = {
    "loop": "while True:\n  pass",
    # bytes() takes zeroed pages it never writes: the address-space limit is reached at once,
    # however slowly the machine faults pages in (the page-writing bomb has its own test).
    "memory": "hoard = []\nwhile True:\n  hoard.append(bytes(10 << 20))",
    "fork": "while True:\n  os.fork()",
    "exit": "os._exit(1)",
    "kill": "os.kill(os.getppid(), 9)",
    "socket": "socket.socket()",
    "spawn": "subprocess.run(['true'])",
    "write": "open(CANARY + '/keep.txt', 'w').write('owned')",
    "recursion": "def down(n):\n  return down(n + 1)\nreturn down(0)",
    "return": "return None",
}
EXPECTED = {"loop": "timeout", **{name: "harness_error" for name in ATTACKS if name != "loop"}}


def test_all_attacks_at_once_leave_the_pool_serving_and_the_host_unchanged(runtime, canary):
  before = snapshot(canary)
  workers = runtime.worker_pids
  futures = {}
  for name, body in ATTACKS.items():
    source = ("import os, socket, subprocess\n"
              f"CANARY = {str(canary)!r}\n\ndef run(task, llm, tools):\n" +
              "".join(f"  {line}\n" for line in body.splitlines()))
    futures[name] = runtime.submit(Harness(source), Episode(name, {}))
  outcomes = {name: future.result().outcome for name, future in futures.items()}
  assert outcomes == EXPECTED
  after = runtime.run_episodes(BENIGN, [Episode(f"b{i}", {"question": "q"}) for i in range(8)])
  assert [t.answer for t in after] == ["benign reply"] * 8
  assert runtime.worker_pids == workers
  assert snapshot(canary) == before
  assert len(descendants(workers)) == idle_process_count(runtime)


@pytest.mark.parametrize("call", ["os.pidfd_open(os.getppid())", "os.mkfifo('/tmp/fifo')",
                                  "signal.pidfd_send_signal(3, 9)"])
def test_unaudited_process_and_file_functions_are_gone(runtime, call):
  trajectory = attack(runtime, call + "\nreturn 'reached'", imports="import os, signal")
  assert trajectory.outcome == "harness_error"
  assert "AttributeError" in trajectory.error


def test_audit_hook_state_cannot_be_changed(runtime):
  body = """
hooks = [o for o in gc.get_objects() if getattr(o, '__name__', '') == 'audit_hook']
for hook in hooks:
  for value in hook.__defaults__:
    if isinstance(value, (set, dict, list)):
      value.clear()
  hook.__defaults__ = (os.sep,) + hook.__defaults__[1:]
open('/tmp/owned-by-harness', 'w')
return str(len(hooks))
"""
  trajectory = attack(runtime, body)
  assert trajectory.outcome == "harness_error"
  assert "PermissionError" in trajectory.error
  assert not os.path.exists("/tmp/owned-by-harness")
