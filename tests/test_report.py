"""The run report: a synthetic run written with the project's own writers (run log, archive,
trace files), its page and data files checked as text, and (slow) opened in headless
Chromium: a click shows a candidate's diff and episodes, and the page asks for nothing over
the network."""
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse

import pytest

from whale_jax import atomic_files
from whale_jax import report
from whale_jax.algorithms import run_log
from whale_jax.harness import trajectory as trajectory_lib
from whale_jax.rollouts import collector
from whale_jax.search import archive as archive_lib
from whale_jax.search import meta_harness

# Gold that must never reach a report file: validation and test references.
VALIDATION_GOLD = "Quetzalcoatlus-validation-gold"
TEST_GOLD = "Hallucigenia-test-gold"
SEED_SOURCE = "def run(task, llm, tools):\n  return llm.chat([{'role': 'user', 'content': task}])\n"
LABEL = "archive/whale_cycle_000"
REVISION_LABEL = "harness_learning/adapt_final_strict/round_000"
MARKUP = "</script><script>window.__injected = 1</script><b>"  # in a hypothesis: text only
CHROMIUM = "/usr/bin/chromium"


def _trajectory(task_id, answer, tool_result="a passage", outcome="ok"):
  call = trajectory_lib.LLMCall(
      method="chat", messages=[{"role": "user", "content": f"question {task_id}"}], prompt=None,
      prompt_token_ids=[1, 2, 3], sampling={"n": 1},
      completions=[trajectory_lib.RecordedCompletion([4, 5], [-0.5, -0.25], f"say {answer}",
                                                     "stop")],
      started_seconds=0.0, duration_seconds=0.1)
  event = trajectory_lib.ToolEvent("search", {"query": task_id}, tool_result, "", 0.1, 0.01)
  return trajectory_lib.Trajectory(
      episode_id=f"e-{task_id}", task_id=task_id, harness_hash="h", outcome=outcome,
      answer=answer if outcome == "ok" else None,
      error="" if outcome == "ok" else "Traceback: ZeroDivisionError", calls=[call],
      tool_events=[event])


def _evaluation(task_ids, scores):
  trajectories = [_trajectory(task_id, f"answer-{task_id}",
                              outcome="ok" if score else "harness_error")
                  for task_id, score in zip(task_ids, scores)]
  return collector.Evaluation(tuple(task_ids), tuple(range(len(task_ids))), tuple(scores),
                              tuple(trajectories), rollouts=len(task_ids))


def _archive(directory, num_candidates=5, num_episodes=4):
  """A Meta-Harness archive: c0000 the seed, each later one a child of an earlier one (c0003
  rejected with no source, c0004 a duplicate), each evaluated one with its own source."""
  archive = archive_lib.Archive(directory)
  task_ids = [f"nq:{i}" for i in range(num_episodes)]
  atomic_files.write_json(os.path.join(directory, meta_harness.RUN_FILE), {"task_ids": task_ids})
  for index in range(num_candidates):
    parent = None if index == 0 else f"c{(index - 1) // 2:04d}"
    status = {3: "rejected", 4: "duplicate"}.get(index, "evaluated")
    source = None if status == "rejected" else SEED_SOURCE + f"# edit {index}\n" * index
    candidate = archive_lib.Candidate(
        id=f"c{index:04d}", iteration=1 + index // 2, index=index, hash=f"hash{index}",
        parent=parent, origin="incoming" if index == 0 else "patch", proposer="edit_library",
        mechanism=f"axis B: turn_budget {index}",
        hypothesis=f"more turns help {index}" + (MARKUP if index == 2 else ""),
        status=status,
        reasons=[{"code": "static_check", "message": "bad import"}] if status == "rejected" else [],
        duplicate_of="c0001" if status == "duplicate" else None, weights_id="step_4")
    scores = [float((index + i) % 2) for i in range(num_episodes)]
    archive.add(candidate, source=source, raw_output=f"proposal {index}",
                evaluation=_evaluation(task_ids, scores) if status == "evaluated" else None)
  return archive


def make_run(workdir):
  """A small whale-like run: weight steps, a harness search with its archive, a gate, test
  evaluations (per subset, with test episodes), an adaptation row, the summary."""
  log = run_log.RunLog(str(workdir), tensorboard=False)
  log.write_config({"recipe": "whale", "domain": {"name": "searchqa"}})
  for step, rollouts in enumerate((8, 16, 24)):
    log.log("weight", rollouts, kind="rsft", reward=0.1 * step, accept_rate=0.2 + 0.1 * step,
            loss=1.0 - 0.1 * step, weight_step=step + 1)
  archive = _archive(os.path.join(workdir, LABEL))
  log.log("harness", 40, label="whale_cycle_000", iterations=2, search_rollouts=16,
          accepted="c0002", stop_reason="iterations")
  log.log("harness", 56, label="whale_cycle_000", gate_accepted=True, gate_n=8,
          gate_mean_difference=0.125, gate_p_value=0.03, incumbent_validation=0.5,
          candidate_validation=0.625, validation_note=VALIDATION_GOLD)
  log.log("harness", 60, kind="adaptation", label="final_strict", round=0, previous_score=0.5,
          current_score=0.75, changed=True, candidates=1, runnable=1, best_candidate_score=0.75)
  # A revision archive (Harness Learning) whose diagnostic episodes are validation tasks.
  revision = archive_lib.Archive(os.path.join(workdir, REVISION_LABEL))
  revision.add(archive_lib.Candidate(id="c0000", iteration=1, index=0, hash="h", parent=None,
                                     origin="incoming", status="evaluated"), source=SEED_SOURCE,
               evaluation=collector.Evaluation(
                   ("val:0",), (0,), (1.0,), (_trajectory("val:0", VALIDATION_GOLD,
                                                         VALIDATION_GOLD),), 1))
  # A VACE GRPO block (weight-split episodes).
  trajectory_lib.write_records(os.path.join(workdir, "vace", "cycle_000", "step_0001.jsonl.gz"),
                               [{"score": 1.0, "trajectory": _trajectory("w:0", "answer-w")}])
  # Validation episodes in the search's evaluation cache: the report must not read them.
  trajectory_lib.write_records(os.path.join(workdir, LABEL, "evaluations", "cache.jsonl.gz"),
                               [{"score": 1.0, "trajectory": _trajectory("val:0", VALIDATION_GOLD,
                                                                         VALIDATION_GOLD)}])
  test_ids = ["nq:0", "nq:1", "hotpotqa:0", "hotpotqa:1"]
  for index, (rollouts, scores) in enumerate(((0, [1.0, 0.0, 0.0, 0.0]),
                                              (60, [1.0, 1.0, 1.0, 0.0]))):
    trajectory_lib.write_records(
        os.path.join(workdir, "test_trajectories", f"evaluation_{index:03d}.jsonl.gz"),
        [{"instance_id": task_id, "score": score, "rollouts": rollouts,
          "trajectory": _trajectory(task_id, TEST_GOLD, f"the answer is {TEST_GOLD}")}
         for task_id, score in zip(test_ids, scores)])
    per_subset = {"hotpotqa": sum(scores[2:]) / 2, "nq": sum(scores[:2]) / 2}
    log.log("evaluation", rollouts, test_mean=sum(scores) / 4, label="", per_subset=per_subset)
  log.write_summary({"recipe": "whale", "counts": {"weight": 24, "harness": 36, "evaluation": 8,
                                                   "weight_tokens": 480, "harness_tokens": 720,
                                                   "evaluation_tokens": 160},
                     "final_test_mean": 0.75, "best_test_mean": 0.75,
                     "pairs": [{"cycle": 0, "label": "vace_cycle_000", "weights_id": "step_4",
                                "weight_steps": 4, "harness_hash": "abc",
                                "validation_mean": 0.625}],
                     "selected_by_validation": {"label": "vace_cycle_000"},
                     "final_per_task": {"nq:0": 1.0}, "curve": [[0, 0.25], [60, 0.75]]})
  log.close()
  return archive


def _data(path):
  return report.read_data_file(path)


def _report_files(workdir):
  return [os.path.join(workdir, "report.html")] + glob.glob(
      os.path.join(workdir, "report_files", "**", "*.js"), recursive=True)


@pytest.fixture(name="run_dir")
def _run_dir(tmp_path):
  workdir = tmp_path / "run"
  archive = make_run(str(workdir))
  return str(workdir), archive


def test_the_run_log_keeps_the_page_current(run_dir):
  workdir, _ = run_dir
  page = open(os.path.join(workdir, "report.html"), encoding="utf-8").read()
  assert "finished" in page and "Run report: run" in page


def test_the_tree_holds_every_candidate_and_each_data_file_its_diff(run_dir):
  workdir, archive = run_dir
  page = open(report.write_report(workdir), encoding="utf-8").read()
  keys = [key for key in re.findall(r'class="cand[^"]*" data-key="([^"]+)"', page)
          if key.startswith(LABEL)]
  assert keys == [f"{LABEL}/{c.id}" for c in (archive.get(i) for i in
                                              ("c0000", "c0001", "c0003", "c0004", "c0002"))]
  assert len(keys) == len(archive.candidates)
  for candidate in archive.candidates:
    data = _data(os.path.join(workdir, "report_files", "archive__whale_cycle_000",
                              candidate.id + ".js"))
    source, parent = archive.source(candidate.id), candidate.parent
    if parent and source and archive.source(parent):
      assert data["diff"] == "".join(__import__("difflib").unified_diff(
          archive.source(parent).splitlines(True), source.splitlines(True),
          f"{parent}/harness.py", f"{candidate.id}/harness.py"))
      assert f"+# edit {int(candidate.id[1:])}" in data["diff"]
    episodes = archive.examples(candidate.id)
    assert [(e["task_id"], e["score"], e["outcome"]) for e in data["episodes"]] == [
        (e["task_id"], e["score"], e["outcome"]) for e in episodes]
    if episodes:
      first = data["episodes"][0]
      assert first["calls"][0]["messages"][0]["content"] == "question nq:0"
      assert first["tools"][0]["name"] == "search"


def _points(page, series):
  return [(int(x), float(y)) for s, x, y in re.findall(
      r'data-series="([^"]+)" data-x="([^"]+)" data-y="([^"]+)"', page) if s == series]


def test_curve_points_are_the_metrics_rows(run_dir):
  workdir, _ = run_dir
  page = open(os.path.join(workdir, "report.html"), encoding="utf-8").read()
  rows = run_log.read_metrics(workdir)
  evaluations = [r for r in rows if r["phase"] == "evaluation"]
  assert _points(page, "test mean@k") == [(r["rollouts"], r["test_mean"]) for r in evaluations]
  assert _points(page, "best so far") == run_log.best_so_far(
      [(r["rollouts"], r["test_mean"]) for r in evaluations])
  for subset in ("nq", "hotpotqa"):
    assert _points(page, f"test {subset}") == [(r["rollouts"], r["per_subset"][subset])
                                              for r in evaluations]
  weights = [r for r in rows if r["phase"] == "weight"]
  assert _points(page, "training reward") == [(r["rollouts"], r["reward"]) for r in weights]
  assert _points(page, "accept_rate") == [(r["rollouts"], r["accept_rate"]) for r in weights]


def test_the_timeline_marks_each_search_iteration(run_dir):
  workdir, archive = run_dir
  page = open(os.path.join(workdir, "report.html"), encoding="utf-8").read()
  marks = re.findall(r'<line class="iteration"[^>]*><title>whale_cycle_000 iteration (\d+)', page)
  assert marks == sorted({str(c.iteration) for c in archive.candidates})


def test_a_long_run_plots_every_kth_weight_step_and_the_last(tmp_path):
  log = run_log.RunLog(str(tmp_path), tensorboard=False)
  for step in range(2500):
    log.log("weight", 4 * (step + 1), kind="grpo", reward=step / 2500)
  page = open(report.write_report(str(tmp_path)), encoding="utf-8").read()
  points = _points(page, "training reward")
  assert len(points) <= 1001 and points[0] == (4, 0.0) and points[-1] == (10000, 2499 / 2500)


def test_gate_adaptation_and_accounting_are_shown(run_dir):
  workdir, _ = run_dir
  page = open(os.path.join(workdir, "report.html"), encoding="utf-8").read()
  assert "Validation gate decisions" in page and "0.625" in page and "0.030" in page
  assert "Harness Learning adaptation rounds" in page and "final_strict" in page
  assert "<td>harness</td><td><span class=\"num\">36</span></td>" in page


def test_vace_pairs_and_blocks_are_shown(run_dir):
  workdir, _ = run_dir
  page = open(os.path.join(workdir, "report.html"), encoding="utf-8").read()
  assert "VACE (weights, harness) pairs" in page and "<td>0.625</td><td>selected</td>" in page
  assert 'data-key="block/cycle_000"' in page
  block = _data(os.path.join(workdir, "report_files", "vace", "cycle_000.js"))
  assert block["episodes"][0]["answer"] == "answer-w" and block["episodes"][0]["calls"]


def test_a_live_run_counts_rollouts_and_tokens_from_its_rows(tmp_path):
  log = run_log.RunLog(str(tmp_path), tensorboard=False)
  log.log("evaluation", 0, test_mean=0.5, evaluation_rollouts=8, generated_tokens=80)
  log.log("weight", 16, kind="grpo", reward=0.5, generated_tokens=160)
  log.log("weight", 32, kind="grpo", reward=0.5, generated_tokens=150)
  log.log("harness", 44, label="cycle_000", gate_rollouts=12, generated_tokens=120,
          gate_accepted=False, gate_p_value=-1.0, incumbent_validation=0.5,
          candidate_validation=0.5)
  page = open(os.path.join(tmp_path, "report.html"), encoding="utf-8").read()
  assert "running (reload for the latest)" in page and "so far, from the metrics rows" in page
  for phase, rollouts, tokens in (("weight", 32, 310), ("harness", 12, 120),
                                  ("evaluation", 8, 80)):
    assert (f'<td>{phase}</td><td><span class="num">{rollouts}</span></td>'
            f'<td><span class="num">{tokens}</span></td>') in page


def test_text_from_the_run_stays_text(run_dir):
  workdir, _ = run_dir
  page = open(os.path.join(workdir, "report.html"), encoding="utf-8").read()
  assert MARKUP not in page and "__injected" in page  # escaped in the tree and in the JSON


def test_no_network_reference_and_no_held_out_gold(run_dir):
  workdir, _ = run_dir
  report.write_report(workdir)
  files = _report_files(workdir)
  assert len(files) == 1 + 5 + 1 + 2 + 1  # the page, 5 + 1 candidates, 2 tests, 1 block
  for path in files:
    text = open(path, encoding="utf-8").read()
    if path.endswith(".js"):  # its value: gzip'ed JSON in base64
      text += json.dumps(report.read_data_file(path))
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:)?//""", text), path
    assert "@import" not in text and "url(" not in text, path
    assert VALIDATION_GOLD not in text and TEST_GOLD not in text, path
  test_data = _data(os.path.join(workdir, "report_files", "test", "evaluation_001.js"))
  assert test_data["episodes"] == [{"task_id": t, "outcome": "ok", "score": s} for t, s in
                                   zip(["nq:0", "nq:1", "hotpotqa:0", "hotpotqa:1"],
                                       [1.0, 1.0, 1.0, 0.0])]


def test_only_search_split_episodes_show_their_traces(run_dir):
  workdir, _ = run_dir
  revision = _data(os.path.join(workdir, "report_files",
                                "harness_learning__adapt_final_strict__round_000", "c0000.js"))
  assert revision["episodes"] == [{"task_id": "val:0", "outcome": "ok", "score": 1.0,
                                   "turns": 1}]


def test_data_files_are_written_once(run_dir):
  workdir, _ = run_dir
  path = os.path.join(workdir, "report_files", "archive__whale_cycle_000", "c0001.js")
  before = os.stat(path).st_mtime_ns
  report.write_report(workdir)
  assert os.stat(path).st_mtime_ns == before


def test_data_files_of_another_format_are_written_again(run_dir):
  workdir, _ = run_dir
  path = os.path.join(workdir, "report_files", "archive__whale_cycle_000", "c0001.js")
  with open(path, "w", encoding="utf-8") as file:
    file.write("window.__traces['old'] = {};")
  with open(os.path.join(workdir, "report_files", "FORMAT"), "w", encoding="utf-8") as file:
    file.write("plain/0")
  report.write_report(workdir)
  assert _data(path)["id"] == "c0001"


def test_a_compare_run_puts_its_methods_side_by_side(tmp_path):
  for method in ("whale", "weight_only"):
    make_run(str(tmp_path / method))
  (tmp_path / "table.md").write_text(
      "| method | final test mean@k |\n|---|---|\n| whale | 0.750 |\n| weight_only | 0.750 |\n"
      "\nwhale - weight_only: +0.0 points (paired standard error 0.0 over 4 test questions)\n")
  (tmp_path / "summary.json").write_text(json.dumps({"methods": {"whale": {},
                                                                 "weight_only": {}}}))
  page = open(report.write_report(str(tmp_path)), encoding="utf-8").read()
  assert 'href="whale/report.html"' in page and 'href="weight_only/report.html"' in page
  assert "whale - weight_only: +0.0 points" in page
  assert _points(page, "weight_only") == [(0, 0.25), (60, 0.75)]
  assert os.path.exists(tmp_path / "weight_only" / "report.html")


def test_the_command_line_writes_the_page(run_dir):
  workdir, _ = run_dir
  os.remove(os.path.join(workdir, "report.html"))
  result = subprocess.run([sys.executable, "-m", "whale_jax.report", workdir],
                          capture_output=True, text=True, check=True)
  assert result.stdout.strip() == os.path.join(workdir, "report.html")
  imported = subprocess.run(
      [sys.executable, "-c", "import sys, whale_jax.report; print('jax' in sys.modules)"],
      capture_output=True, text=True, check=True).stdout
  assert imported.strip() == "False"  # the report imports no jax


# --- in a browser ------------------------------------------------------------------------------

def chromium_flags(profile):
  return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}"]


def _chromium(profile):
  """A Selenium driver of Debian's headless Chromium logging its network events (fails in CI
  where Chromium is missing, skips elsewhere)."""
  if not os.path.exists(CHROMIUM):
    if os.environ.get("WHALE_JAX_CI") or os.environ.get("CI"):
      pytest.fail(f"{CHROMIUM} is missing in CI; .ci/run installs it where it runs as root "
                  "(apt-get install -y -q chromium chromium-driver).")
    pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install -y -q chromium "
                "chromium-driver)")
  webdriver = pytest.importorskip("selenium.webdriver")
  options = webdriver.ChromeOptions()
  options.binary_location = CHROMIUM
  options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
  for flag in chromium_flags(profile):
    options.add_argument(flag)
  service = webdriver.ChromeService(executable_path=shutil.which("chromedriver") or
                                    "/usr/bin/chromedriver")
  return webdriver.Chrome(options=options, service=service)


def _requested_urls(driver):
  """Every URL the page asked for, from the DevTools network events."""
  events = [json.loads(entry["message"])["message"] for entry in driver.get_log("performance")]
  return [event["params"]["request"]["url"] for event in events
          if event["method"] == "Network.requestWillBeSent"]


def _only_local(requested, workdir):
  # Chromium's own start page asks for chrome:// resources; nothing may leave the machine.
  local = ("file", "chrome", "chrome-untrusted", "chrome-search", "data", "about", "blob")
  return ([url for url in requested if urllib.parse.urlsplit(url).scheme not in local] == [] and
          [url for url in requested if url.startswith("file://") and
           not url.startswith("file://" + workdir)] == [])


@pytest.mark.slow
def test_the_demo_smoke_run_s_report_in_headless_chromium(tmp_path):
  """The report of a real run (configs/demo.py:smoke, WHALE): the tree has the archive's
  candidates, a click shows a candidate's diff and episodes, the test curve has the run's
  points, no request leaves the machine, and test episodes carry no answers."""
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  from whale_jax.algorithms import experiment  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  spec = importlib.util.spec_from_file_location("demo_config", os.path.join(root, "configs",
                                                                             "demo.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config("smoke")
  config.methods = ("whale",)
  workdir = str(tmp_path / "run")
  experiment.run(config, workdir, show_progress=False)
  run = os.path.join(workdir, "whale")
  report.write_report(run)
  candidates = [json.loads(line)["id"] for path in sorted(glob.glob(
      os.path.join(run, "archive", "*", "summary.jsonl"))) for line in open(path)]
  assert len(candidates) >= 2
  # Test episodes show outcome and score only (the planted-gold canary is
  # test_no_network_reference_and_no_held_out_gold: this world's answers are names that its
  # passages, which search episodes show, also hold).
  for path in glob.glob(os.path.join(run, "report_files", "test", "*.js")):
    for episode in report.read_data_file(path)["episodes"]:
      assert set(episode) == {"task_id", "outcome", "score"}, episode
  driver = _chromium(tmp_path / "profile")
  try:
    driver.get("file://" + os.path.join(run, "report.html"))
    keys = driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-key^=\"archive/\"]'))"
        ".map(e => e.dataset.key);")
    assert len(keys) == len(candidates), (keys, candidates)
    points = driver.execute_script(
        "return Array.from(document.querySelectorAll('circle.point'))"
        ".filter(c => c.dataset.series === 'test mean@k')"
        ".map(c => [Number(c.dataset.x), Number(c.dataset.y)]);")
    rows = [r for r in run_log.read_metrics(run) if r["phase"] == "evaluation"]
    assert points == [[r["rollouts"], r["test_mean"]] for r in rows] and points
    child = next(key for key in keys if not key.endswith("/c0000"))
    driver.find_element(By.CSS_SELECTOR, f'[data-key="{child}"]').click()
    WebDriverWait(driver, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#panel pre.diff"))
    assert "harness.py" in driver.find_element(By.CSS_SELECTOR, "#panel pre.diff").text
    WebDriverWait(driver, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#panel .episode"))
    assert _only_local(_requested_urls(driver), run)
  finally:
    driver.quit()


@pytest.mark.slow
def test_in_headless_chromium_a_click_shows_the_diff_and_episodes(run_dir, tmp_path):
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  workdir, archive = run_dir
  driver = _chromium(tmp_path / "profile")
  try:
    driver.get("file://" + os.path.join(workdir, "report.html"))
    points = driver.execute_script(
        "return Array.from(document.querySelectorAll('circle.point'))"
        ".filter(c => c.dataset.series === 'test mean@k')"
        ".map(c => [Number(c.dataset.x), Number(c.dataset.y)]);")
    rows = [r for r in run_log.read_metrics(workdir) if r["phase"] == "evaluation"]
    assert points == [[r["rollouts"], r["test_mean"]] for r in rows]
    driver.find_element(By.CSS_SELECTOR, f'[data-key="{LABEL}/c0002"]').click()
    WebDriverWait(driver, 10).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#panel pre.diff"))
    diff = driver.find_element(By.CSS_SELECTOR, "#panel pre.diff").text
    assert "+# edit 2" in diff and "c0000/harness.py" in diff
    assert MARKUP in driver.find_element(By.ID, "panel").text  # shown as text, never run
    assert driver.execute_script("return window.__injected === undefined;")
    episodes = driver.find_elements(By.CSS_SELECTOR, "#panel .episode")
    assert len(episodes) == len(archive.examples("c0002"))
    episodes[0].find_element(By.TAG_NAME, "summary").click()
    WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#panel .call"))
    driver.find_element(By.CSS_SELECTOR, '[data-key="test/evaluation_001"]').click()
    WebDriverWait(driver, 10).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#panel .episode")) == 4)
    assert TEST_GOLD not in driver.page_source
    # Every request the page made, from the DevTools network events: files beside it only.
    requested = _requested_urls(driver)
    assert any(url.endswith("/report.html") for url in requested), requested
    assert any(url.endswith("/c0002.js") for url in requested), requested
    assert _only_local(requested, workdir), requested
  finally:
    driver.quit()
