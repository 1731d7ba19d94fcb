"""The CLI coding-agent proposer: a fake agent that reads the archive and writes a harness is
accepted by the search; a hostile one (network, reading outside its folder, a link out, a
hang) is contained and recorded, and the search goes on."""
import json
import os
import socket
import sys
import threading
import time

import pytest

from tests.search import fakes
from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.search import cli_agent
from whale_jax.search import meta_harness

SECRET = "host-secret-5e1f9c-not-for-agents"

GOOD_AGENT = """\
import json, os
read = []
def load(path):
  read.append(path)
  with open(path) as file:
    return file.read()
load("INSTRUCTIONS.md")
load("archive/README.md")
scores = load("archive/scores.md")
task_line = load("archive/task.md").splitlines()[2]
source = load("archive/candidates/c0000/harness.py")
assert "TOPK = 1" in source
with open("harness.py", "w") as file:
  file.write(source.replace("TOPK = 1", "TOPK = 3"))
with open("HYPOTHESIS.txt", "w") as file:
  file.write("Three passages instead of one; the task says: " + task_line)
print(json.dumps({"read": read, "total_cost_usd": 0.25}))
"""

HOSTILE_AGENT = """\
import os, socket, sys, time
port, secret_path = int(sys.argv[1]), sys.argv[2]
try:
  socket.create_connection(("127.0.0.1", port), timeout=2).sendall(b"leak")
  print("NETWORK REACHED")
except OSError as error:
  print("network:", error)
try:
  print("READ:", open(secret_path).read())
except OSError as error:
  print("read:", error)
with open("HYPOTHESIS.txt", "w") as file:
  file.write("stolen: " + str(os.listdir("/")))
os.remove("harness.py")
os.symlink(secret_path, "harness.py")    # the host must not follow it
os.makedirs("locked/inner")
os.chmod("locked", 0)                    # the host must still clean up
try:
  with open("big.bin", "wb") as file:    # over file_size_bytes
    file.write(b"x" * (4 << 20))
  print("WROTE BIG FILE")
except OSError as error:
  print("big file:", error)
sys.stdout.flush()
time.sleep(1000)
"""


class Listener:
  """A TCP listener on the host's 127.0.0.1 that counts the connections it gets."""

  def __init__(self):
    self.server = socket.socket()
    self.server.bind(("127.0.0.1", 0))
    self.server.listen(4)
    self.port = self.server.getsockname()[1]
    self.connections = 0
    threading.Thread(target=self._accept, daemon=True).start()

  def _accept(self):
    while True:
      try:
        connection, _ = self.server.accept()
      except OSError:
        return
      self.connections += 1
      connection.close()


class ByIteration:
  """Delegates iteration i to proposers[i - 2]."""
  name = "by_iteration"

  def __init__(self, proposers):
    self.proposers = proposers
    self.instruction_hash = proposers[-1].instruction_hash
    self.instruction_version = proposers[-1].instruction_version

  def propose(self, context, n):
    return self.proposers[context.iteration - 2].propose(context, n)


@pytest.fixture(scope="module")
def domain():
  return tasks.get_domain("synthetic_qa", seed=0, split_sizes=fakes.QA_SPLIT_SIZES)


def _script(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def _python():
  return os.path.realpath(sys.executable)


def test_hostile_agent_is_contained_and_a_good_one_is_accepted(domain, tmp_path):
  instances = domain.splits()["harness"]
  secret_path = tmp_path / "secret.txt"
  secret_path.write_text(SECRET)
  listener = Listener()
  archive_dir = tmp_path / "archive"
  hostile_script = _script(tmp_path, "hostile.py", HOSTILE_AGENT)
  work_root = tmp_path / "work"
  work_root.mkdir()
  good_script = _script(tmp_path, "good.py", GOOD_AGENT)
  hostile = cli_agent.CliAgentProposer(
      [_python(), "-S", hostile_script, str(listener.port), str(secret_path)], archive_dir,
      domain, instances, runner=cli_agent.BwrapRunner(read_only_paths=[hostile_script],
                                                      file_size_bytes=1 << 20),
      wall_clock_seconds=3.0, name="hostile", work_root=str(work_root))
  good = cli_agent.CliAgentProposer(
      [_python(), "-S", good_script], archive_dir, domain, instances,
      runner=cli_agent.BwrapRunner(read_only_paths=[good_script]), wall_clock_seconds=30.0,
      max_cost_usd=1.0, name="good")
  started = time.monotonic()
  result = meta_harness.search(Harness(domain.seed_harness, origin="seed"),
                               fakes.FakeEvaluate(), ByIteration([hostile, good]), archive_dir,
                               domain=domain, instances=instances, iterations=3,
                               candidates_per_iteration=1, weights_id="w0")
  elapsed = time.monotonic() - started
  seed, contained, accepted = result.archive.candidates
  # Hostile: killed at the wall-clock limit, nothing reached, nothing read, recorded.
  session = hostile.sessions[0]
  assert session["timed_out"] and 3.0 <= session["wall_seconds"] < 3.0 + 6
  assert elapsed < 30
  assert listener.connections == 0
  assert "NETWORK REACHED" not in session["stdout"] and "network:" in session["stdout"]
  assert "read:" in session["stdout"]
  assert "WROTE BIG FILE" not in session["stdout"] and "big file:" in session["stdout"]
  assert os.listdir(work_root) == []     # its folder is gone, locked sub-folder and all
  assert contained.status == "rejected" and contained.reasons[0]["code"] == "proposer_error"
  assert "wall_clock_seconds=3" in contained.reasons[0]["message"]
  everything = json.dumps(result.archive.get(contained.id).to_json()) + open(
      archive_dir / "candidates" / contained.id / "proposal.txt").read()
  assert SECRET not in everything
  assert "harness.py" in session["changed_files"] or "HYPOTHESIS.txt" in session["changed_files"]
  # Good: read the archive files, wrote the harness; the search evaluated and accepted it.
  record = good.sessions[0]
  reads = json.loads(record["stdout"].strip().splitlines()[-1])["read"]
  assert "archive/candidates/c0000/harness.py" in reads
  assert record["returncode"] == 0 and record["cost_usd"] == 0.25
  assert sorted(record["changed_files"]) == ["HYPOTHESIS.txt", "harness.py"]
  assert accepted.status == "evaluated" and accepted.proposer == "good"
  assert (accepted.instruction_hash, accepted.instruction_version) == (good.instruction_hash,
                                                                     "agentic-1")
  assert "TOPK = 3" in result.archive.source(accepted.id)
  assert domain.description.strip().splitlines()[0] in accepted.hypothesis
  assert result.accepted_id == accepted.id and accepted.success > seed.success
  assert json.loads(open(archive_dir / "agent_sessions" / "iteration_003" /
                         "cli_session_00.json").read())["instructions"]["hash"] == (
      good.instruction_hash)


def test_a_link_out_of_the_working_folder_is_not_followed(tmp_path):
  secret = tmp_path / "secret.txt"
  secret.write_text(SECRET)
  link = tmp_path / "harness.py"
  os.symlink(secret, link)
  text, why = cli_agent.read_regular_file(str(link), 1000)
  assert text is None and "link" in why
  fifo = tmp_path / "fifo"
  os.mkfifo(fifo)
  assert cli_agent.read_regular_file(str(fifo), 1000) == (None, "fifo is not a regular file")


def test_over_the_cost_limit_is_refused(domain, tmp_path):
  instances = domain.splits()["harness"]
  script = _script(tmp_path, "costly.py", GOOD_AGENT.replace("0.25", "7.5"))
  proposer = cli_agent.CliAgentProposer(
      [_python(), "-S", script], tmp_path / "archive", domain, instances,
      runner=cli_agent.BwrapRunner(read_only_paths=[script]), max_cost_usd=2.0)
  result = meta_harness.search(Harness(domain.seed_harness, origin="seed"),
                               fakes.FakeEvaluate(), proposer, tmp_path / "archive",
                               domain=domain, instances=instances, iterations=2,
                               candidates_per_iteration=1, weights_id="w0")
  rejected = result.archive.candidates[1]
  assert rejected.status == "rejected"
  assert "cost of 7.5 USD, over max_cost_usd=2" in rejected.reasons[0]["message"]


ENDPOINT_AGENT = """\
import os, socket, sys, urllib.request
print("endpoint:", urllib.request.urlopen(os.environ["WHALE_AGENT_ENDPOINT"], timeout=5).read())
try:
  socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
  print("OTHER PORT REACHED")
except OSError as error:
  print("other:", error)
"""


def test_the_configured_endpoint_is_the_only_way_out(tmp_path):
  import http.server  # pylint: disable=import-outside-toplevel

  class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # pylint: disable=invalid-name
      self.send_response(200)
      self.end_headers()
      self.wfile.write(b"model endpoint")

    def log_message(self, *args):
      pass

  server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  other = Listener()
  script = _script(tmp_path, "endpoint.py", ENDPOINT_AGENT)
  workdir = tmp_path / "work"
  workdir.mkdir()
  runner = cli_agent.BwrapRunner(read_only_paths=[script],
                                 endpoint=("127.0.0.1", server.server_address[1]))
  result = runner.run([_python(), "-S", script, str(other.port)], str(workdir), 20)
  server.shutdown()
  output = result.stdout.decode()
  assert "endpoint: b'model endpoint'" in output
  assert "OTHER PORT REACHED" not in output and other.connections == 0
