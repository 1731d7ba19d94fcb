r"""What a run on this machine needs, and whether it is there: one line per item, in seconds.

  python -m whale_jax.check                                     # devices, sandbox, disk
  python -m whale_jax.check --config=configs/whale.py:searchqa --workdir=/mnt/whale/run1

Items, in order (no model is loaded):
  devices    JAX's platform and devices;
  sandbox    one real confined process (the harness's bwrap namespaces and seccomp program):
             it must run as the sandbox's uid in its own PID namespace, be refused a socket,
             and see none of the host's files;
  disk       free space in the workdir (--min_free_gb);
  data       with --config: every data file and checkpoint the config names, present and
             readable;
  endpoints  with --config: every http(s) endpoint the config names (proposer, judge,
             retrieval) answers.
Each item prints `ok   <item>: <what was found>`; the first that fails prints
`FAIL <item>: <what is wrong>; <the fix>` and the command exits 1. `launch/tpu_pod.sh install`
runs it on every worker, and `whale_jax.main` runs `cheap_checks` (sandbox, disk, data) before
it loads a model.
"""
import glob
import json
import os
import shutil
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from whale_jax.harness import confinement as confinement_lib

DEFAULT_MIN_FREE_GB = 2.0
ENDPOINT_TIMEOUT_SECONDS = 5.0
# Keys of a config whose string values name files the run reads.
DATA_EXTENSIONS = (".jsonl", ".json", ".parquet", ".csv", ".txt", ".pdf", ".gz", ".zst",
                   ".tsv", ".arrow")
_PROBE = """
import json, os, socket
found = {"uid": os.getuid(), "pid": os.getpid()}
try:
  socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  found["socket"] = "created"
except OSError as error:
  found["socket"] = type(error).__name__ + (f" errno {error.errno}" if error.errno else "")
found["host_files"] = [p for p in ("/etc/passwd", "/etc/shadow", "/proc/1", "/var", PLANTED)
                       if os.path.exists(p)]
print(json.dumps(found))
"""


class CheckFailed(Exception):
  """An item is missing: the message says what, and how to provide it."""


def check_devices():
  import jax  # pylint: disable=import-outside-toplevel
  devices = jax.devices()
  kinds = sorted({device.device_kind for device in devices})
  return (f"{jax.default_backend()}: {len(devices)} device(s) ({', '.join(kinds)}), "
          f"{jax.process_count()} process(es), jax {jax.__version__}")


def check_sandbox(allow_weak_sandbox=False, bwrap_path=""):
  """Runs the probe in a real confined process and checks what it saw."""
  from whale_jax.harness.tools import python_interpreter  # pylint: disable=import-outside-toplevel
  try:
    confinement = confinement_lib.confinement_for(allow_weak_sandbox, bwrap_path)
  except confinement_lib.SandboxUnavailable as error:
    raise CheckFailed(str(error)) from None
  if confinement.missing:
    return f"WEAK (runtime.allow_weak_sandbox=True): {confinement.missing}"
  import tempfile  # pylint: disable=import-outside-toplevel
  with tempfile.NamedTemporaryFile(prefix="whale_check_planted_") as planted:  # a host file
    result = python_interpreter.run_python(
        f"PLANTED = {planted.name!r}\n" + _PROBE, timeout_seconds=20.0,
        allowed_imports=python_interpreter.DEFAULT_ALLOWED_IMPORTS + ("os", "socket"))
  if result["status"] != "ok":
    raise CheckFailed(f"the confined probe ended with {result['status']}: "
                      f"{result['stderr'][-300:]}; run `python -m pytest "
                      "tests/harness/test_sandbox_native.py` to see which property fails")
  seen = json.loads(result["stdout"])
  problems = []
  if seen["uid"] != confinement_lib.SANDBOX_UID:
    problems.append(f"it ran as uid {seen['uid']}, not {confinement_lib.SANDBOX_UID}")
  if seen["pid"] > 16:
    problems.append(f"its pid {seen['pid']} is not of a fresh PID namespace")
  if seen["socket"] == "created":
    problems.append("it could create a socket (no seccomp program)")
  if seen["host_files"]:
    problems.append(f"it saw host files {seen['host_files']}")
  if problems:
    raise CheckFailed(f"the sandbox is not confining: {'; '.join(problems)}; "
                      "check the bwrap in use and libseccomp")
  return (f"bwrap {confinement.bwrap} (from {confinement.bwrap_source}): uid "
          f"{seen['uid']}, pid {seen['pid']}, socket refused ({seen['socket']}), no "
          f"host files, {result['seconds']:.2f} s")


def check_disk(workdir, min_free_gb=DEFAULT_MIN_FREE_GB):
  """Free space where the workdir is (its nearest existing parent)."""
  folder = os.path.abspath(workdir or ".")
  while not os.path.exists(folder):
    folder = os.path.dirname(folder)
  free_gb = shutil.disk_usage(folder).free / 1e9
  if free_gb < min_free_gb:
    raise CheckFailed(f"{folder} has {free_gb:.2f} GB free, under the {min_free_gb:g} GB a "
                      "run needs for checkpoints and traces; free space there, or point "
                      "--workdir at a larger disk")
  return f"{folder}: {free_gb:.1f} GB free (need {min_free_gb:g})"


def _strings(node, path):
  """(key path, string) of every string in a nested config."""
  if hasattr(node, "items"):
    for key, value in node.items():
      yield from _strings(value, f"{path}.{key}")
  elif isinstance(node, (list, tuple)):
    for index, value in enumerate(node):
      yield from _strings(value, f"{path}[{index}]")
  elif isinstance(node, str):
    yield path, node


def data_paths(config):
  """(key path, path) of the data files and checkpoints config names."""
  paths = []
  model = config.get("model", {}) or {}
  if model.get("source") == "hf" and model.get("path"):
    paths.append(("config.model.path", model["path"]))
  for key_path, value in _strings(config.get("domain", {}) or {}, "config.domain"):
    if "://" not in value and value.lower().endswith(DATA_EXTENSIONS):
      paths.append((key_path, value))
  return paths


def check_data(config):
  paths = data_paths(config)
  for key_path, path in paths:
    matches = glob.glob(path) if glob.has_magic(path) else [path]
    if not matches or not all(os.path.exists(match) for match in matches):
      raise CheckFailed(f"{key_path}={path!r} does not exist (working directory "
                        f"{os.getcwd()}); copy the file there or set {key_path} to where it is")
    for match in matches:
      if not os.access(match, os.R_OK):
        raise CheckFailed(f"{key_path}={path!r}: {match} is not readable by this user; "
                          "fix its permissions")
  return f"{len(paths)} file(s) present and readable" if paths else "the config names none"


def endpoints(config):
  """(key path, url) of the http(s) endpoints config names."""
  found = []
  for section in ("search", "domain", "harness_learning"):
    for key_path, value in _strings(config.get(section, {}) or {}, f"config.{section}"):
      if value.startswith(("http://", "https://")):
        found.append((key_path, value))
  return found


def check_endpoint(url, timeout_seconds=ENDPOINT_TIMEOUT_SECONDS):
  """The endpoint answers HTTP at all (any status: a 401 or 404 still proves it is there)."""
  parsed = urllib.parse.urlsplit(url)
  port = parsed.port or (443 if parsed.scheme == "https" else 80)
  try:
    socket.create_connection((parsed.hostname, port), timeout=timeout_seconds).close()
  except OSError as error:
    raise CheckFailed(f"{url} cannot be reached ({error}); start the server there or set the "
                      "config key to where it runs") from None
  try:
    with urllib.request.urlopen(url, timeout=timeout_seconds) as response:
      return response.status
  except urllib.error.HTTPError as error:
    return error.code
  except (OSError, ValueError) as error:
    raise CheckFailed(f"{url} accepted a connection but did not answer HTTP ({error}); "
                      "check that it is the server the config means") from None


def check_endpoints(config):
  found = endpoints(config)
  answers = []
  for key_path, url in found:
    try:
      answers.append(f"{url} ({check_endpoint(url)})")
    except CheckFailed as error:
      raise CheckFailed(f"{key_path}: {error}") from None
  return ", ".join(answers) if found else "the config names none"


def items(config=None, workdir=".", min_free_gb=DEFAULT_MIN_FREE_GB):
  """[(name, check)] of what a run of config in workdir needs, cheapest first."""
  runtime = dict((config or {}).get("runtime", {}) or {})
  weak, bwrap = runtime.get("allow_weak_sandbox", False), runtime.get("bwrap_path", "")
  found = [("devices", check_devices),
           ("sandbox", lambda: check_sandbox(weak, bwrap)),
           ("disk", lambda: check_disk(workdir, min_free_gb))]
  if config is not None:
    found += [("data", lambda: check_data(config)),
              ("endpoints", lambda: check_endpoints(config))]
  return found


def cheap_checks(config, workdir):
  """What whale_jax.main checks before it loads a model: sandbox, disk and data files.
  Raises CheckFailed with the fix."""
  wanted = ("disk", "data") if config.get("recipe") == "warm_start" else (
      "sandbox", "disk", "data")  # a warm start runs no harness code
  for name, check in items(config, workdir):
    if name in wanted:
      try:
        check()
      except CheckFailed as error:
        raise CheckFailed(f"{name}: {error}") from None


def run(checks, out=None):
  """Runs the checks in order; prints a line each (to out, default stdout); False at the
  first failure."""
  out = out or sys.stdout
  for name, check in checks:
    started = time.monotonic()
    try:
      found = check()
    except CheckFailed as error:
      out.write(f"FAIL {name}: {error}\n")
      return False
    out.write(f"ok   {name}: {found} [{time.monotonic() - started:.1f} s]\n")
  return True


def _load_config(spec):
  import importlib.util  # pylint: disable=import-outside-toplevel
  path, _, argument = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location("_whale_jax_config", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  config = module.get_config(argument) if argument else module.get_config()
  return config.to_dict() if hasattr(config, "to_dict") else dict(config)


def main(argv=None):
  import argparse  # pylint: disable=import-outside-toplevel
  parser = argparse.ArgumentParser(prog="python -m whale_jax.check", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--config", help="an experiment config (file[:argument]) whose data "
                      "files and endpoints to check")
  parser.add_argument("--workdir", default=".", help="where the run writes (its free disk)")
  parser.add_argument("--min_free_gb", type=float, default=DEFAULT_MIN_FREE_GB,
                      help="free disk the workdir needs, in GB")
  args = parser.parse_args(argv)
  config = None
  if args.config:
    try:
      config = _load_config(args.config)
    except Exception as error:  # pylint: disable=broad-except
      sys.stdout.write(f"FAIL config: {args.config} could not be loaded ({error}); "
                       "fix the file or the argument after ':'\n")
      return 1
  return 0 if run(items(config, args.workdir, args.min_free_gb)) else 1


if __name__ == "__main__":
  sys.exit(main())
