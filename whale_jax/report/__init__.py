"""One self-contained HTML report of a run, rewritten while the run goes on.

  python -m whale_jax.report WORKDIR        # writes WORKDIR/report.html (and report_files/)
  report.write_report(workdir)              # the same; RunLog calls it after each phase

WORKDIR/report.html opens in any current browser from disk (one with DecompressionStream:
Chrome 80, Firefox 113, Safari 16.4 or later): no server, no network, style and script
inline, plots as inline SVG. It shows the phases on the rollout axis (weight phases with
their training reward and RSFT/GRPO metrics, harness searches, gates, test evaluations), the
test and best-so-far curves (per subset where task ids carry one), rollouts and tokens per
phase, the validation gate's decisions, VACE's pairs and blocks, Harness Learning's
adaptation rounds and each harness archive as a tree (parent -> child). A candidate's diff to
its parent and its episodes' traces, a test evaluation's outcomes and a VACE block's traces
are in WORKDIR/report_files/*.js, one small file each, loaded when clicked; candidate and
test-evaluation files are written once (their sources never change), so rewriting the page
after each phase costs a read of the summaries. For a compare run (workdir/<method>/ per
method) the page puts the methods side by side, with table.md's paired differences, and
links each method's own report.

What never reaches a report file: validation and test gold (report/workdir.py says which
files are read, and what is kept of test episodes).

Every file is written atomically (whale_jax.atomic_files): data files first, the page last.
"""
import base64
import gzip
import json
import os
import shutil

from absl import logging

from whale_jax import atomic_files
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.report import page
from whale_jax.report import workdir as workdir_lib

PAGE = "report.html"
FILES = "report_files"
# The data files' format: report_files/FORMAT holds it; a folder written in another format is
# removed and written again.
FORMAT = "gzip-base64/1"


def _data_file(workdir, relative, key, build, sources):
  """Writes report_files/<relative> (window.__traces[key] = build()) unless it is newer than
  every path in sources; returns relative's path from the workdir."""
  path = os.path.join(workdir, FILES, relative)
  if os.path.exists(path):
    written = os.path.getmtime(path)
    if all(not os.path.exists(s) or os.path.getmtime(s) <= written for s in sources):
      return f"{FILES}/{relative}"
  atomic_files.write_text(path, data_file_text(key, build()))
  return f"{FILES}/{relative}"


def data_file_text(key, value):
  """window.__traces[key] = value's JSON, gzip-compressed and in base64 (the page inflates it
  with the browser's DecompressionStream): traces repeat their prompts, so this is about a
  tenth of the plain JSON."""
  data = gzip.compress(json.dumps(value, separators=(",", ":"), default=str).encode("utf-8"),
                       mtime=0)
  return (f"window.__traces=window.__traces||{{}};window.__traces[{json.dumps(key)}]="
          f"\"{base64.b64encode(data).decode('ascii')}\";\n")


def read_data_file(path):
  """The value a data file holds (data_file_text's inverse; for tests and readers)."""
  with open(path, encoding="utf-8") as file:
    text = file.read()
  encoded = text[text.rindex("]=") + 2:].strip().rstrip(";").strip('"')
  return json.loads(gzip.decompress(base64.b64decode(encoded)))


def _write_data_files(workdir, run):
  """The data files of run's candidates, test evaluations and VACE blocks: {key: path}."""
  marker = os.path.join(workdir, FILES, "FORMAT")
  written = None
  if os.path.exists(marker):
    with open(marker, encoding="utf-8") as file:
      written = file.read()
  if written != FORMAT:
    shutil.rmtree(os.path.join(workdir, FILES), ignore_errors=True)
    atomic_files.write_text(marker, FORMAT)
  files = {}
  for archive in run["archives"]:
    directory = os.path.join(workdir, archive["path"])
    folder = workdir_lib.slug(archive["path"])
    traced_ids = workdir_lib.search_task_ids(directory)
    for candidate in archive["candidates"]:
      key = f"{archive['path']}/{candidate['id']}"
      source = os.path.join(directory, "candidates", candidate["id"], "candidate.json")
      files[key] = _data_file(
          workdir, f"{folder}/{candidate['id']}.js", key,
          lambda c=candidate, d=directory: workdir_lib.candidate_data(d, c, traced_ids), [source])
  for evaluation in run["evaluations"]:
    if evaluation["episodes_file"]:
      key = f"test/{evaluation['name']}"
      path = os.path.join(workdir, "test_trajectories", evaluation["name"] + ".jsonl.gz")
      files[key] = _data_file(workdir, f"test/{evaluation['name']}.js", key,
                              lambda p=path: workdir_lib.evaluation_data(p),
                              trajectory_lib.shard_paths(path))
  for name, paths in workdir_lib.vace_blocks(workdir):
    key = f"block/{name}"
    files[key] = _data_file(workdir, f"vace/{name}.js", key,
                            lambda p=paths: workdir_lib.block_data(p), paths)
  return files


def write_report(workdir, title=None):
  """Writes workdir/report.html and its data files; returns the page's path."""
  workdir = os.fspath(workdir)
  title = title or f"Run report: {os.path.basename(os.path.abspath(workdir))}"
  if not os.path.exists(os.path.join(workdir, "metrics.jsonl")):
    methods = workdir_lib.method_folders(workdir) if os.path.isdir(workdir) else []
    if methods:
      return _write_compare(workdir, methods, title)
  run = workdir_lib.read_run(workdir)
  text = page.run_page(run, _write_data_files(workdir, run), title)
  path = os.path.join(workdir, PAGE)
  atomic_files.write_text(path, text)
  return path


def _write_compare(workdir, methods, title):
  runs = []
  for name in methods:
    write_report(os.path.join(workdir, name), title=f"{title} / {name}")
    runs.append((name, workdir_lib.read_run(os.path.join(workdir, name))))
  table = ""
  table_path = os.path.join(workdir, "table.md")
  if os.path.exists(table_path):
    with open(table_path, encoding="utf-8") as file:
      table = file.read()
  summary = workdir_lib.read_json(os.path.join(workdir, "summary.json"))
  path = os.path.join(workdir, PAGE)
  atomic_files.write_text(path, page.compare_page(runs, table, title, done=bool(summary)))
  return path


def try_write_report(workdir):
  """write_report, for a running recipe: a failure is logged, never raised (a report must not
  stop a run)."""
  try:
    return write_report(workdir)
  except Exception:  # pylint: disable=broad-except
    logging.exception("Could not write the run report of %s; the run goes on.", workdir)
    return None
