r"""The run report at scale: write, rewrite, size on disk and time to open in headless Chromium.

  python bench/report_scale.py                                  # 1,000 candidates x 100 episodes
  python bench/report_scale.py --candidates=20 --episodes=10    # a quick look
  python bench/report_scale.py --measure_only=runs/demo/whale   # an existing run's report

Builds a synthetic run in --workdir with the project's own writers (RunLog rows, one harness
archive through search.archive.Archive, test trace files through harness.trajectory): weight
steps, harness searches and test evaluations on a rollout axis, and one archive whose
candidates each derive from a random earlier one, each evaluated on --episodes harness-split
episodes shaped like the demo's (two model calls, one search tool call with passages; its
search.json lists them as the search split, so the report keeps their traces). Then
writes the report twice (the first writes every data file; the second is what a live run
pays after each phase) and opens it in headless Chromium (Selenium): milliseconds to the load
event, then from a click on a candidate to its episodes shown. Prints one JSON line.
"""
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags

from whale_jax import atomic_files
from whale_jax import report
from whale_jax.algorithms import run_log
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import collector
from whale_jax.search import archive as archive_lib
from whale_jax.search import meta_harness

_WORKDIR = flags.DEFINE_string("workdir", "/tmp/report_scale", "Where the synthetic run goes "
                               "(replaced).")
_CANDIDATES = flags.DEFINE_integer("candidates", 1000, "Candidates in the archive.")
_EPISODES = flags.DEFINE_integer("episodes", 100, "Episodes per evaluated candidate.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Page openings to take the median of.")
_MEASURE_ONLY = flags.DEFINE_string("measure_only", None, "Write and open this run's report "
                                    "instead of building a synthetic run.")
CHROMIUM = "/usr/bin/chromium"
SEED = "def run(task, llm, tools):\n" + "".join(f"  step_{i} = {i}\n" for i in range(40))
WORDS = ("passage river bridge author city founded year museum painting river valley north "
         "published novel team league").split()


def _text(rng, words):
  return " ".join(rng.choice(WORDS) for _ in range(words))


def _trajectory(rng, task_id):
  """Two model calls around one search tool call, sized like the demo's episodes."""
  question = f"Question {task_id}: {_text(rng, 14)}?"
  system = "You answer questions with the search tool. " + _text(rng, 60)
  passages = "\n".join(f"[{i}] {_text(rng, 12)}" for i in range(3))
  first = [{"role": "system", "content": system}, {"role": "user", "content": question}]
  second = first + [{"role": "assistant", "content": "search: " + _text(rng, 5)},
                    {"role": "user", "content": passages}]
  calls = []
  for messages in (first, second):
    length = 40 * len(messages)
    calls.append(trajectory_lib.LLMCall(
        "chat", messages, None, [rng.randrange(1000) for _ in range(length)], {"n": 1},
        [trajectory_lib.RecordedCompletion([rng.randrange(1000) for _ in range(8)],
                                           [-0.5] * 8, _text(rng, 6), "stop")], 0.0, 0.05))
  outcome = "ok" if rng.random() < 0.9 else "harness_error"
  return trajectory_lib.Trajectory(
      f"e-{task_id}", task_id, "h", outcome, answer=_text(rng, 3) if outcome == "ok" else None,
      error="" if outcome == "ok" else "Traceback (most recent call last): ValueError",
      calls=calls, tool_events=[trajectory_lib.ToolEvent("search", {"query": _text(rng, 5)},
                                                         passages, "", 0.01, 0.01)])


def build(workdir, num_candidates, num_episodes):
  rng = random.Random(0)
  shutil.rmtree(workdir, ignore_errors=True)
  log = run_log.RunLog(workdir, tensorboard=False)
  log.write_report = lambda: None  # this build times the writes below, not the live ones
  log.write_config({"recipe": "whale", "domain": {"name": "synthetic_qa"}})
  archive = archive_lib.Archive(os.path.join(workdir, "archive", "cycle_000"))
  task_ids = [f"synthetic:{i}" for i in range(num_episodes)]
  atomic_files.write_json(archive.path(meta_harness.RUN_FILE), {"task_ids": task_ids})
  sources = {}
  rollouts = 0
  for index in range(num_candidates):
    parent = None if index == 0 else f"c{rng.randrange(index):04d}"
    source = (SEED if parent is None else
              sources[parent].replace(f"step_{rng.randrange(40)} =", f"step_{index}_edit =", 1)
              + f"  # edit {index}\n")
    sources[f"c{index:04d}"] = source
    trajectories = [_trajectory(rng, task_id) for task_id in task_ids]
    scores = [float(t.ok and rng.random() < 0.4) for t in trajectories]
    evaluation = collector.Evaluation(tuple(task_ids), tuple(range(num_episodes)),
                                      tuple(scores), tuple(trajectories), num_episodes)
    archive.add(archive_lib.Candidate(
        id=f"c{index:04d}", iteration=1 + index // 8, index=index % 8, hash=str(index),
        parent=parent, origin="incoming" if parent is None else "patch",
        mechanism=f"axis {'ABCDEF'[index % 6]}: {_text(rng, 3)}", hypothesis=_text(rng, 20),
        status="evaluated", weights_id=f"step_{index // 100}"), source=source,
        raw_output=_text(rng, 80), evaluation=evaluation)
    rollouts += num_episodes
    if index % 100 == 99:  # a weight step and a search row per 100 candidates
      log.log("weight", rollouts, kind="rsft", reward=rng.random(), accept_rate=rng.random())
      log.log("harness", rollouts, label="cycle_000", iterations=index // 8,
              search_rollouts=100 * num_episodes, accepted=f"c{index:04d}", stop_reason="")
      log.log("evaluation", rollouts, test_mean=rng.random(), label="")
  log.close()


def _size(path):
  if os.path.isfile(path):
    return os.path.getsize(path)
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def measure(workdir, repeats):
  """Report write times, sizes and Chromium's open and click times (milliseconds)."""
  start = time.perf_counter()
  page = report.write_report(workdir)
  first_seconds = time.perf_counter() - start
  start = time.perf_counter()
  report.write_report(workdir)
  rewrite_seconds = time.perf_counter() - start
  result = {"workdir": workdir, "write_seconds": round(first_seconds, 2),
            "rewrite_seconds": round(rewrite_seconds, 3),
            "page_bytes": _size(page), "data_bytes": _size(os.path.join(workdir, "report_files")),
            "all_report_bytes": sum(_size(os.path.join(d, name)) for d, _, _ in os.walk(workdir)
                                    for name in ("report.html", "report_files")
                                    if os.path.exists(os.path.join(d, name))),
            "data_files": sum(len(f) for _, _, f in os.walk(os.path.join(workdir,
                                                                        "report_files"))),
            "run_bytes": _size(workdir) - _size(page) - _size(os.path.join(workdir,
                                                                          "report_files"))}
  from selenium import webdriver  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  loads, clicks = [], []
  for _ in range(repeats):
    profile = tempfile.mkdtemp()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}",
                 "--window-size=1400,1000"):
      options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(
        executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    try:
      driver.get("file://" + os.path.abspath(page))
      loads.append(driver.execute_script(
          "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd;"))
      candidates = driver.find_elements(By.CSS_SELECTOR, ".cand")
      if candidates:  # a compare run's page has none (each method's page has its own)
        start = time.perf_counter()
        candidates[len(candidates) // 2].click()
        WebDriverWait(driver, 30).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#panel .episodes"))
        clicks.append(1000 * (time.perf_counter() - start))
    finally:
      driver.quit()
      shutil.rmtree(profile, ignore_errors=True)
  result.update(candidates=len(candidates), load_event_ms=round(statistics.median(loads)),
                click_to_episodes_ms=round(statistics.median(clicks)) if clicks else None)
  return result


def main(argv):
  del argv
  if not os.path.exists(CHROMIUM):
    sys.exit(f"needs {CHROMIUM}: apt-get install -y -q chromium chromium-driver")
  workdir = _MEASURE_ONLY.value
  build_seconds = None
  if workdir is None:
    workdir = _WORKDIR.value
    start = time.perf_counter()
    build(workdir, _CANDIDATES.value, _EPISODES.value)
    build_seconds = round(time.perf_counter() - start, 1)
  result = measure(workdir, _REPEATS.value)
  result["build_seconds"] = build_seconds
  print(json.dumps(result))


if __name__ == "__main__":
  app.run(main)
