"""Multi-step business workflows over simulated apps (AutomationBench-style) as a domain.

  domain = toolflow_domain()                                   # generated HR/marketing/finance
  domain = toolflow_domain(tasks="automationbench.jsonl", domains=("hr", "marketing", "finance"))

Instances: public {"trigger", "domain", "tools"} (the trigger message and the tools' JSON
schemas); reference {"initial_state", "assertions", "traps"}. The apps' state lives on the
host: one Environment per episode, reached only through the one tool
  call(tool, arguments) -> the JSON answer of toolflow_apps (an {"error": ...} object for a
      call its schema refuses, an unknown record or an unknown tool).
The policy documents the task depends on are inside the apps (e.g. in the inbox); the
assertions never leave the host.
Verifier: the episode's calls are replayed on a fresh Environment from the initial state
(deterministic, so this is the end state the episode left), and its assertions are checked
(toolflow_assertions). reward="partial" (default) scores the fraction satisfied, "binary" 1
only when all are. The returned text is not scored.
Extra metrics: all_assertions_passed_rate, partial_credit, tool_call_validity_rate (calls
answered without an error object), tool_calls_by_app_<app>, assertion_pass_rate_<kind>,
trap_assertion_pass_rate_<trap> (assertions a trap targets, generated tasks only).
"""
import collections
import os

from absl import logging

from whale_jax.harness import static_checks
from whale_jax.tasks import behaviour
from whale_jax.tasks import seed_harnesses
from whale_jax.tasks import splits as splits_lib
from whale_jax.tasks.domain import Domain
from whale_jax.tasks.domain import Instance
from whale_jax.tasks.record_files import as_paths
from whale_jax.tasks.toolflow import apps as toolflow_apps
from whale_jax.tasks.toolflow import assertions as toolflow_assertions
from whale_jax.tasks.toolflow import edits
from whale_jax.tasks.toolflow import files as toolflow_files
from whale_jax.tasks.toolflow import generator as toolflow_generator

EDIT_CATALOGUE = edits.CATALOGUE  # the Domain's edit_catalogue (registry.edit_catalogue)
REWARDS = ("partial", "binary")
DEFAULT_DOMAINS = ("hr", "marketing", "finance")
DEFAULT_SPLIT_SIZES = {"weight": -1, "harness": 24, "validation": 24, "test": 48}
DESCRIPTION = """\
Task: carry out a business workflow in a small simulated company's apps (CRM, inbox,
calendar, spreadsheets, chat, ticketing), as an operations assistant acting alone.
task = {"trigger": the request (str), "domain": "hr" | "marketing" | "finance" | ...,
        "tools": the apps' tools as JSON function schemas}.
tools.call(tool, arguments) -> dict: runs one app tool with a dict of arguments and returns
its JSON answer; a refused call returns {"error": {"status": 400 | 404 | 409, "type",
"message"}} and changes nothing. Policies and reference data the request depends on are
somewhere in the apps (often an e-mail); beware near-duplicate records and outdated rows.
Score: the fraction of hidden checks on the apps' final state that hold ({reward}); what run
returns is not scored.
"""


def task_instance(task):
  """An Instance of one toolflow task dict (toolflow_generator / toolflow_files)."""
  return Instance(id=task["id"],
                  public={"trigger": task["trigger"], "domain": task["domain"],
                          "tools": toolflow_apps.tool_schemas()},
                  reference={"initial_state": task["initial_state"],
                             "assertions": task["assertions"], "traps": task.get("traps", {})})


def environment_tools(instance):
  """A fresh environment for one episode, behind {"call": ...}."""
  environment = toolflow_apps.Environment(instance.reference["initial_state"])

  def call(tool, arguments=None):
    return environment.call(tool, arguments)
  return {"call": call}


def app_calls(trajectory):
  """[(tool, arguments, result)] of the episode's tools.call events, in order."""
  return [(event.arguments.get("tool"), event.arguments.get("arguments"), event.result)
          for event in behaviour.tool_events(trajectory, "call") if not event.error]


def final_state(instance, trajectory):
  """The state the episode left: its calls replayed on the initial state."""
  environment = toolflow_apps.Environment(instance.reference["initial_state"])
  for tool, arguments, _ in app_calls(trajectory) if trajectory is not None else []:
    environment.call(tool, arguments)
  return environment.state


def assertion_results(instance, trajectory):
  initial = toolflow_apps.Environment(instance.reference["initial_state"]).state
  return toolflow_assertions.evaluate(instance.reference["assertions"], initial,
                                      final_state(instance, trajectory))


def _scorer(reward, exclude_initially_satisfied):
  if reward not in REWARDS:
    raise ValueError(f"reward={reward!r}; choose one of {', '.join(REWARDS)}.")

  def verify(instance, answer, trajectory=None):
    results = assertion_results(instance, trajectory)
    initial = toolflow_apps.Environment(instance.reference["initial_state"]).state
    counts = toolflow_assertions.counted(instance.reference["assertions"], initial, results,
                                         exclude_initially_satisfied)
    credit = toolflow_assertions.partial_credit(results, counts)
    return credit if reward == "partial" else float(credit == 1.0)
  return verify


def toolflow_metrics(instances, trajectories, scores):
  metrics = behaviour.episode_metrics(trajectories, scores, lambda answer: answer is not None)
  count = max(len(trajectories), 1)
  calls = [app_calls(t) for t in trajectories]
  all_calls = [c for episode in calls for c in episode]
  valid = [not (isinstance(result, dict) and "error" in result) for _, _, result in all_calls]
  metrics["tool_call_validity_rate"] = sum(valid) / len(valid) if valid else 0.0
  for app, prefix in toolflow_apps.APPS.items():
    metrics[f"tool_calls_by_app_{app}"] = sum(
        str(tool).startswith(prefix) for tool, _, _ in all_calls) / count
  by_kind, by_trap, passed_all, credits = {}, {}, [], []
  for instance, trajectory in zip(instances, trajectories):
    results = assertion_results(instance, trajectory)
    passed_all.append(all(results))
    credits.append(toolflow_assertions.partial_credit(results))
    for assertion, result in zip(instance.reference["assertions"], results):
      by_kind.setdefault(assertion["kind"], []).append(result)
    for trap, indices in instance.reference.get("traps", {}).items():
      by_trap.setdefault(trap, []).extend(results[i] for i in indices)
  metrics["all_assertions_passed_rate"] = sum(passed_all) / count
  metrics["partial_credit"] = sum(credits) / count
  for kind, results in sorted(by_kind.items()):
    metrics[f"assertion_pass_rate_{kind}"] = sum(results) / len(results)
  for trap, results in sorted(by_trap.items()):
    if results:
      metrics[f"trap_assertion_pass_rate_{trap}"] = sum(results) / len(results)
  return metrics


def _report_dropped(path, domains, tasks, dropped, counts):
  """Logs, per domain, how many of path's tasks unsupported="skip" left out and why (one
  line each), and adds them to counts: dropped_tasks_<domain> (a count) and
  dropped_reasons_<domain> ("reason (n); ...", most frequent first)."""
  for domain in domains:
    reasons = collections.Counter(d["reason"] for d in dropped if d["domain"] == domain)
    kept = sum(task["domain"] == domain for task in tasks)
    total = sum(reasons.values())
    why = "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common())
    logging.info("toolflow: %s: %s: dropped %d of %d tasks (unsupported state or "
                 "assertions)%s", path, domain, total, kept + total, f": {why}" if why else "")
    counts[f"dropped_tasks_{domain}"] = counts.get(f"dropped_tasks_{domain}", 0) + total
    if why:
      previous = counts.get(f"dropped_reasons_{domain}")
      counts[f"dropped_reasons_{domain}"] = f"{previous}; {why}" if previous else why


def toolflow_domain(tasks=None, split_tasks=None, domains=DEFAULT_DOMAINS, tasks_per_domain=48,
                    split_sizes=None, seed=0, reward="partial", exclude_initially_satisfied=False,
                    unsupported="error", seed_harness="toolflow", split_sizes_by_domain=None):
  """Toolflow tasks from AutomationBench files, or generated per domain without files.

  Args:
    tasks: AutomationBench task file(s) (.json/.jsonl) of the shared pool.
    split_tasks: {split: file(s)} for splits with their own tasks.
    domains: the task domains to keep (files) or to generate (offline: hr, marketing, finance).
    tasks_per_domain: tasks generated per domain offline.
    split_sizes: {split: size}, -1 for the rest (default DEFAULT_SPLIT_SIZES).
    split_sizes_by_domain: {domain: {split: size}} instead of split_sizes: each domain's
      tasks split on their own (toolflow_files.split_by_domain; VACE's Table 1 split).
    seed: split seed, and generator seed offline.
    reward: "partial" (fraction of assertions) or "binary" (all of them).
    exclude_initially_satisfied: leave assertions true from the start and at the end out of
      the partial credit (AutomationBench's "excluded" assertions).
    unsupported: for files, "error" or "skip" tasks using unsupported state or assertions.
    seed_harness: "toolflow" (JSON schemas, Qwen tool calls) or "toolflow_compact" (tool names
      and <call> tags, short results, for tiny models).
  """
  if split_sizes_by_domain is not None:
    if split_sizes is not None or split_tasks:
      raise ValueError("toolflow: give split_sizes_by_domain or split_sizes/split_tasks, "
                       "not both.")
    split_sizes_by_domain = {d: dict(s) for d, s in dict(split_sizes_by_domain).items()}
    if set(split_sizes_by_domain) != set(domains):
      raise ValueError(f"toolflow: split_sizes_by_domain names {sorted(split_sizes_by_domain)}"
                       f" but domains={tuple(domains)}; name the same domains in both.")
  split_sizes = dict(DEFAULT_SPLIT_SIZES if split_sizes is None else split_sizes)
  if seed_harness not in ("toolflow", "toolflow_compact"):
    raise ValueError(f"seed_harness={seed_harness!r}; use 'toolflow' or 'toolflow_compact'.")
  domains = tuple(domains)
  offline = not as_paths(tasks) and not split_tasks
  verify = _scorer(reward, exclude_initially_satisfied)
  if offline:
    unknown = [d for d in domains if d not in toolflow_generator.DOMAINS]
    if unknown:
      raise ValueError(f"domains={domains}: no generator for {', '.join(unknown)}; generated "
                       f"domains are {', '.join(toolflow_generator.DOMAINS)}.")

  dropped_counts = {}   # counters: tasks left out at load time, per domain, and why

  def load(files):
    instances = []
    for path in as_paths(files):
      dropped = []
      tasks = toolflow_files.load_automationbench_tasks(path, domains, unsupported, dropped)
      instances += [task_instance(task) for task in tasks]
      _report_dropped(path, domains, tasks, dropped, dropped_counts)
    return instances

  def make_splits():
    if offline:
      pool = [task_instance(task) for domain in domains for task in
              toolflow_generator.generate_tasks(domain, tasks_per_domain, seed)]
    else:
      pool = load(tasks)
    if split_sizes_by_domain is not None:
      return toolflow_files.split_by_domain(pool, split_sizes_by_domain, seed)
    if offline:
      return splits_lib.split_instances(pool, split_sizes, seed)
    fixed = {split: load(files) for split, files in (split_tasks or {}).items()}
    return splits_lib.split_instances(pool, split_sizes, seed, fixed=fixed)

  config = {"tasks": [os.fspath(p) for p in as_paths(tasks)],
            "split_tasks": {k: [os.fspath(p) for p in as_paths(v)]
                            for k, v in (split_tasks or {}).items()},
            "domains": list(domains), "tasks_per_domain": tasks_per_domain if offline else None,
            "split_sizes": None if split_sizes_by_domain is not None else split_sizes,
            "split_sizes_by_domain": split_sizes_by_domain,
            "seed": seed, "reward": reward,
            "exclude_initially_satisfied": exclude_initially_satisfied,
            "seed_harness": seed_harness}
  return Domain(name="toolflow", description=DESCRIPTION.replace("{reward}", reward),
                seed_harness=seed_harnesses.source(seed_harness), splits=make_splits,
                verify=verify, tools=environment_tools, metrics=toolflow_metrics,
                counters=lambda: dict(dropped_counts),
                allowed_imports=static_checks.DEFAULT_ALLOWED_IMPORTS, config=config,
                edit_catalogue=EDIT_CATALOGUE)
