"""What a run's work directory holds, read into the plain dicts the report page shows.

  run = read_run(workdir)          # summaries only: what report.html embeds
  run["segments"], run["evaluations"], run["gates"], run["adaptation"], run["archives"]
  candidate_data(workdir, archive, candidate, parent)   # one candidate's data file
  evaluation_data(path)                                   # one test evaluation's data file

Sources (each optional: a run still going has only some of them):
  config.json, summary.json       the recipe, the rollout and token counts, VACE's pairs
  metrics.jsonl                   the timeline: weight steps, harness searches, gates,
                                  adaptation rounds, test evaluations (algorithms/run_log.py)
  <any>/summary.jsonl + candidates/   a harness archive (search/archive.py): found by walking
                                  the workdir (archive/<label>, harness_learning/...)
  test_trajectories/evaluation_NNN.jsonl.gz    test episodes (algorithms/loop.py)
  vace/cycle_NNN/step_NNNN.jsonl.gz            VACE's GRPO block episodes (weight split)
On a multi-host run each trace file is split into its hosts' shards (NAME.host_<i>.jsonl.gz,
harness/trajectory.py), and an archive's candidates keep theirs in traces/; all are read.

Never read: an archive's evaluations/ folder (the evaluation cache also holds validation
episodes) and hosts/ (Harness Learning's per-host copies). Test episodes keep only their task id, outcome
and score: their answers, prompts and tool results could hold held-out gold. A candidate's
episode keeps its trace only when its task is in the search split its archive's search.json
lists (Meta-Harness searches write it); elsewhere (e.g. Harness Learning's revision archives,
whose diagnostic tasks may be validation tasks) only task id, outcome, score and turns.
Search-split gold answers are not shown: trajectories carry none.
"""
import difflib
import json
import os
import re

from whale_jax.harness import trajectory as trajectory_lib

MAX_TEXT_CHARS = 2000     # one message, completion, tool result, error or stdout in a trace
MAX_ANSWER_CHARS = 500
SKIPPED_FOLDERS = ("evaluations", "hosts", "tensorboard", "checkpoints", "report_files",
                   "vace_selected", "proposer_checkpoints", "candidates", "test_trajectories")
CANDIDATE_FIELDS = ("id", "iteration", "parent", "origin", "proposer", "mechanism",
                    "hypothesis", "status", "reasons", "duplicate_of", "weights_id", "success",
                    "mean_turns", "num_examples", "outcomes", "rollouts", "generated_tokens",
                    "static_check")


def read_jsonl(path):
  """The rows of a JSON-lines file ([] when absent; a torn line is skipped)."""
  rows = []
  if os.path.exists(path):
    with open(path, encoding="utf-8") as file:
      for line in file:
        try:
          rows.append(json.loads(line))
        except ValueError:
          continue
  return rows


def read_json(path):
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as file:
      return json.load(file)
  except ValueError:
    return None


def trim(text, limit=MAX_TEXT_CHARS):
  text = "" if text is None else text if isinstance(text, str) else json.dumps(text, default=str)
  return text if len(text) <= limit else text[:limit] + f" ... [{len(text) - limit} more chars]"


# --- the timeline ----------------------------------------------------------------------------

def segments(rows):
  """Consecutive metrics rows of one phase and label, as timeline segments: phase, label,
  kind, first and last rollouts (the training rollouts before the segment and at its end),
  the number of rows and, for weight phases, the step rows' numbers (reward etc.)."""
  result, previous = [], 0
  for row in rows:
    phase, label = row.get("phase"), row.get("label", "")
    kind = row.get("kind", "")
    if phase == "evaluation":
      previous = row.get("rollouts", previous)
      continue
    last = result[-1] if result else None
    if (last is None or last["phase"] != phase or last["label"] != label or
        (phase != "weight" and last["kind"] != kind)):
      last = {"phase": phase, "label": label, "kind": kind, "start": previous,
              "end": row.get("rollouts", previous), "rows": []}
      result.append(last)
    last["end"] = row.get("rollouts", last["end"])
    last["rows"].append({name: value for name, value in row.items()
                         if isinstance(value, (int, float, str, bool)) or value is None})
    previous = last["end"]
  return result


def accounting(rows, timeline):
  """{phase: {"rollouts", "generated_tokens"}} so far, from the metrics rows: training
  rollouts by the phase of the timeline segment that used them (weight; harness for the
  others: searches, gates, Harness Learning's proposer), test rollouts and every phase's
  tokens from the rows' evaluation_rollouts and generated_tokens (rows written before those
  existed count no tokens)."""
  totals = {phase: {"rollouts": 0, "generated_tokens": 0}
            for phase in ("weight", "harness", "evaluation")}
  for segment in timeline:
    phase = "weight" if segment["phase"] == "weight" else "harness"
    totals[phase]["rollouts"] += segment["end"] - segment["start"]
    totals[phase]["generated_tokens"] += sum(row.get("generated_tokens") or 0
                                             for row in segment["rows"])
  for row in rows:
    if row.get("phase") == "evaluation":
      totals["evaluation"]["rollouts"] += row.get("evaluation_rollouts") or 0
      totals["evaluation"]["generated_tokens"] += row.get("generated_tokens") or 0
  return totals


def evaluations(workdir, rows):
  """One entry per test evaluation row: rollouts, test mean, label, per-subset means (the
  row's, else from its test episodes' task ids) and its episode file when there is one."""
  entries = []
  for index, row in enumerate(row for row in rows if row.get("phase") == "evaluation"):
    name = f"evaluation_{index:03d}"
    path = os.path.join(workdir, "test_trajectories", name + ".jsonl.gz")
    per_subset = row.get("per_subset")
    exists = bool(trajectory_lib.shard_paths(path))  # the file, or its hosts' shards
    if per_subset is None and exists:
      per_subset = _per_subset(_test_episodes(path))
    entries.append({"rollouts": row.get("rollouts", 0), "test_mean": row.get("test_mean"),
                    "label": row.get("label", ""), "per_subset": per_subset or {},
                    "name": name, "episodes_file": exists})
  return entries


def _per_subset(episodes):
  """{subset: mean score} over episodes whose task id has a "<subset>:" prefix."""
  groups = {}
  for episode in episodes:
    subset, separator, _ = str(episode["task_id"]).partition(":")
    if separator:
      groups.setdefault(subset, []).append(episode["score"])
  return {subset: sum(scores) / len(scores) for subset, scores in sorted(groups.items())}


def _test_episodes(path):
  """Task id, outcome and score of each test episode; nothing else leaves the file (or, on a
  multi-host run, its hosts' shards)."""
  episodes = []
  for record in trajectory_lib.read_shards(path, decode=False):
    trajectory = record["trajectory"]
    episodes.append({"task_id": record.get("instance_id", trajectory.get("task_id")),
                     "outcome": trajectory.get("outcome"), "score": record.get("score")})
  return episodes


def evaluation_data(path):
  return {"kind": "test", "episodes": _test_episodes(path)}


def gates(rows):
  return [{name: row.get(name) for name in (
      "label", "rollouts", "gate_accepted", "gate_n", "gate_mean_difference", "gate_p_value",
      "incumbent_validation", "candidate_validation")}
          for row in rows if row.get("phase") == "harness" and "gate_accepted" in row]


def adaptation(rows):
  return [{name: row.get(name) for name in (
      "label", "round", "rollouts", "previous_score", "current_score", "changed", "candidates",
      "runnable", "best_candidate_score")}
          for row in rows if row.get("kind") == "adaptation"]


# --- archives --------------------------------------------------------------------------------

def find_archives(workdir):
  """Relative paths of the harness archives under workdir (folders holding summary.jsonl and
  candidates/), sorted."""
  found = []
  for directory, folders, files in os.walk(workdir):
    folders[:] = sorted(name for name in folders if name not in SKIPPED_FOLDERS and
                        not name.startswith(".tmp-"))
    if "summary.jsonl" in files and os.path.isdir(os.path.join(directory, "candidates")):
      found.append(os.path.relpath(directory, workdir))
  return sorted(found)


def archive_candidates(archive_dir):
  """The candidates' summary fields, in id order (summary.jsonl, else the folders)."""
  rows = {row["id"]: row for row in read_jsonl(os.path.join(archive_dir, "summary.jsonl"))
          if "id" in row}
  folder = os.path.join(archive_dir, "candidates")
  for name in os.listdir(folder) if os.path.isdir(folder) else ():
    if name not in rows and not name.startswith(".tmp-"):
      row = read_json(os.path.join(folder, name, "candidate.json"))
      if row is not None:
        rows[name] = row
  return [{name: rows[key].get(name) for name in CANDIDATE_FIELDS}
          for key in sorted(rows, key=lambda key: int(key[1:]) if key[1:].isdigit() else 0)]


def read_source(archive_dir, candidate_id):
  path = os.path.join(archive_dir, "candidates", candidate_id, "harness.py")
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as file:
    return file.read()


def diff(parent_source, source, parent_id, candidate_id):
  """The unified diff of a candidate's source against its parent's ("" when either is
  missing or they are equal)."""
  if parent_source is None or source is None:
    return ""
  return "".join(difflib.unified_diff(
      parent_source.splitlines(keepends=True), source.splitlines(keepends=True),
      fromfile=f"{parent_id}/harness.py", tofile=f"{candidate_id}/harness.py"))


def search_task_ids(archive_dir):
  """The task ids of the search split of a Meta-Harness archive (its search.json), else an
  empty set."""
  return set((read_json(os.path.join(archive_dir, "search.json")) or {}).get("task_ids") or ())


def candidate_data(archive_dir, candidate, traced_ids=frozenset()):
  """One candidate's data file: its diff to its parent (or its source when it has no
  parent), the proposer's reply, and its evaluation's episodes; those on tasks in
  traced_ids with their traces, the others with task id, outcome, score and turns only."""
  source = read_source(archive_dir, candidate["id"])
  parent = candidate.get("parent")
  data = {"kind": "candidate", "id": candidate["id"],
          "diff": diff(read_source(archive_dir, parent), source, parent, candidate["id"])
                  if parent else "",
          "source": source if not parent else None, "episodes": []}
  proposal = os.path.join(archive_dir, "candidates", candidate["id"], "proposal.txt")
  if os.path.exists(proposal):
    with open(proposal, encoding="utf-8") as file:
      data["proposal"] = trim(file.read(), 4 * MAX_TEXT_CHARS)
  folder = os.path.join(archive_dir, "candidates", candidate["id"])
  scores = {row.get("task_id"): row.get("score")
            for row in read_jsonl(os.path.join(folder, "examples.jsonl"))}
  shards = os.path.join(archive_dir, "traces", candidate["id"] + ".jsonl.gz")  # multi-host
  for path in (os.path.join(folder, "trajectories.jsonl.gz"),
               os.path.join(folder, "trajectories.jsonl"), shards):
    if trajectory_lib.shard_paths(path):
      for record in trajectory_lib.read_shards(path):
        trajectory = record["trajectory"]
        shown = episode(trajectory, scores.get(trajectory.task_id, record.get("score")))
        if trajectory.task_id not in traced_ids:
          shown = {name: shown[name] for name in ("task_id", "outcome", "score", "turns")}
        data["episodes"].append(shown)
      break
  return data


def episode(trajectory, score):
  """A trace for the page: outcome, score, answer, error, each model call's new messages and
  completions, each tool call (long texts trimmed)."""
  calls, seen = [], 0
  for call in trajectory.calls:
    messages = call.messages or []
    new = messages[seen:] if len(messages) >= seen else messages
    seen = len(messages)
    calls.append({
        "method": call.method,
        "messages": [{"role": m.get("role", "") if isinstance(m, dict) else "",
                      "content": trim(m.get("content") if isinstance(m, dict) else m)}
                     for m in new],
        "prompt": trim(call.prompt) if call.prompt else None,
        "prompt_tokens": len(call.prompt_token_ids),
        "completions": [{"text": trim(c.text), "tokens": len(c.token_ids),
                         "finish_reason": c.finish_reason} for c in call.completions]})
  return {"task_id": trajectory.task_id, "outcome": trajectory.outcome, "score": score,
          "turns": trajectory.num_turns, "answer": trim(trajectory.answer, MAX_ANSWER_CHARS),
          "error": trim(trajectory.error), "stdout": trim(trajectory.stdout),
          "wall_seconds": trajectory.wall_seconds, "calls": calls,
          "tools": [{"name": event.name, "arguments": trim(event.arguments, 500),
                     "result": trim(event.result), "error": trim(event.error)}
                    for event in trajectory.tool_events]}


def vace_blocks(workdir):
  """[(cycle folder name, [step files])] of VACE's recorded GRPO blocks."""
  root = os.path.join(workdir, "vace")
  if not os.path.isdir(root):
    return []
  return [(name, sorted(os.path.join(root, name, f) for f in os.listdir(os.path.join(root, name))
                        if f.endswith(".jsonl.gz")))
          for name in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, name))]


def block_data(paths):
  episodes = []
  for path in paths:
    for record in trajectory_lib.read_records(path):
      episodes.append(episode(record["trajectory"], record.get("score")))
  return {"kind": "block", "episodes": episodes}


# --- the whole run ---------------------------------------------------------------------------

def method_folders(workdir):
  """The methods of a compare run (workdir/<method>/ with its own metrics), in the config's
  order (config.methods, which each method's config.json holds)."""
  names = [name for name in sorted(os.listdir(workdir))
           if os.path.exists(os.path.join(workdir, name, "metrics.jsonl"))]
  order = []
  for name in names:
    order = list((read_json(os.path.join(workdir, name, "config.json")) or {}).get("methods")
                 or ())
    if order:
      break
  return [name for name in order if name in names] + [n for n in names if n not in order]


def read_run(workdir, metrics_rows=None):
  """Everything the page embeds (summaries only; traces go to data files)."""
  rows = read_metrics(workdir) if metrics_rows is None else metrics_rows
  config = read_json(os.path.join(workdir, "config.json")) or {}
  summary = read_json(os.path.join(workdir, "summary.json")) or {}
  timeline = segments(rows)
  recipe = config.get("recipe")
  if recipe == "compare":  # a method's folder of a compare run: the folder names the method
    recipe = os.path.basename(os.path.abspath(workdir))
  archives = []
  for relative in find_archives(workdir):
    directory = os.path.join(workdir, relative)
    accepted = read_json(os.path.join(directory, "accepted.json")) or {}
    archives.append({"path": relative, "accepted": accepted.get("id"),
                     "traced": bool(search_task_ids(directory)),
                     "stop_reason": accepted.get("stop_reason"),
                     "candidates": archive_candidates(directory)})
  _add_search_iterations(timeline, archives)
  return {
      "workdir": os.path.abspath(workdir), "recipe": summary.get("recipe") or recipe,
      "domain": (config.get("domain") or {}).get("name") if isinstance(config.get("domain"), dict)
                else None,
      "done": bool(summary), "counts": summary.get("counts"),
      "final_test_mean": summary.get("final_test_mean"),
      "best_test_mean": summary.get("best_test_mean"),
      "pairs": summary.get("pairs") or [],
      "selected": (summary.get("selected_by_validation") or {}).get("label"),
      "adaptation_summary": summary.get("adaptation") or {},
      "segments": timeline, "accounting": accounting(rows, timeline),
      "evaluations": evaluations(workdir, rows),
      "gates": gates(rows), "adaptation": adaptation(rows), "archives": archives,
      "blocks": [name for name, _ in vace_blocks(workdir)], "num_rows": len(rows)}


def _add_search_iterations(timeline, archives):
  """Gives each harness-search segment its iterations: [{"iteration", "end", "best"}], end
  being where on the rollout axis the iteration's episodes end (the segment's start plus the
  rollouts of the search's candidates so far) and best the best score so far."""
  by_path = {archive["path"]: archive for archive in archives}
  for segment in timeline:
    archive = by_path.get(f"archive/{segment['label']}")
    if segment["phase"] != "harness" or archive is None or not any(
        "iterations" in row for row in segment["rows"]):
      continue
    iterations, position, best = {}, segment["start"], None
    for candidate in sorted(archive["candidates"], key=lambda c: (c["iteration"] or 0)):
      position = min(position + (candidate["rollouts"] or 0), segment["end"])
      if candidate["success"] is not None:
        best = candidate["success"] if best is None else max(best, candidate["success"])
      iterations[candidate["iteration"]] = {"iteration": candidate["iteration"],
                                            "end": position, "best": best}
    segment["iterations"] = list(iterations.values())


def read_metrics(workdir):
  return read_jsonl(os.path.join(workdir, "metrics.jsonl"))


def slug(text):
  """A file-name-safe form of an archive path or label."""
  return re.sub(r"[^A-Za-z0-9_.-]+", "_", text.replace(os.sep, "__")) or "_"
