"""The report page: HTML with its style and script inline, summaries only.

  page.run_page(run, files)            # one run (workdir.read_run), files: {key: data file}
  page.compare_page(methods, table)    # a compare run: methods side by side

The page needs no server and no network: plots are inline SVG (report/svg.py); a
candidate's diff and episodes, a test evaluation's outcomes and a VACE block's traces are in
small data files beside it (report_files/*.js, each setting window.__traces[key] to its
gzip'ed JSON in base64), loaded with a <script> tag when clicked, since pages opened from
file:// may not fetch() files, and inflated with the browser's DecompressionStream.
"""
import html
import json
import time

from whale_jax.report import svg

MAX_STEP_POINTS = 1000  # weight steps plotted per series; a longer run shows every k-th

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1400px;padding:12px 20px;
color:#222}
h1{font-size:20px;margin:4px 0}h2{font-size:16px;margin:22px 0 6px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:4px 0}td,th{border:1px solid #ddd;padding:2px 6px;
text-align:left;vertical-align:top}th{background:#f4f4f4}.num{text-align:right}
.plot{max-width:100%;height:auto}.plot .tick{font-size:10px;fill:#555}
.plot .label,.plot .legend{font-size:11px;fill:#333}.plots{display:flex;flex-wrap:wrap;gap:8px}
.muted,.empty{color:#777}.live{color:#b35900}.ok{color:#227722}.bad{color:#aa2222}
#layout{display:flex;gap:16px;align-items:flex-start}#main{flex:1 1 55%;min-width:0}
#panel{flex:1 1 45%;position:sticky;top:8px;max-height:96vh;overflow:auto;
border:1px solid #ccc;padding:8px;min-width:0;background:#fcfcfc}#panel:empty{display:none}
ul.tree,ul.tree ul{list-style:none;margin:0;padding-left:14px}ul.tree{padding-left:0}
ul.tree li{margin:1px 0;white-space:nowrap}
.cand,.open{cursor:pointer;border-radius:3px;padding:0 3px}
.cand:hover,.open:hover{background:#e8f0fe}.cand.selected{background:#cfe0fc}
.st-rejected{color:#999}.st-duplicate{color:#999;font-style:italic}
.accepted{font-weight:bold}.hyp{color:#555;display:inline-block;max-width:48ch;overflow:hidden;
text-overflow:ellipsis;vertical-align:bottom}
pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f7;padding:4px;margin:2px 0;
font-size:12px}pre.diff{background:#fff;border:1px solid #eee}
.add{background:#e6ffed;display:block}
.del{background:#ffeef0;display:block}.hunk{color:#6f42c1;display:block}
details{margin:2px 0}summary{cursor:pointer}.role{font-weight:bold;color:#555}
"""

SCRIPT = r"""
(function () {
  "use strict";
  var run = window.__run;
  window.__traces = window.__traces || {};
  function node(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function add(parent, child) { parent.appendChild(child); return child; }
  function fmt(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    return Number.isInteger(v) ? String(v) : v.toFixed(3);
  }
  var loaded = {};
  function inflate(text) {  // base64 of gzip'ed JSON -> the value (report/__init__.py)
    var bytes = Uint8Array.from(atob(text), function (c) { return c.charCodeAt(0); });
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(JSON.parse);
  }
  function load(key, file, done) {  // a data file, by a <script> tag (file:// has no fetch)
    if (loaded[key]) { done(loaded[key]); return; }
    function ready() {
      var value = window.__traces[key];
      if (typeof value !== "string") { done(null); return; }
      inflate(value).then(function (data) { loaded[key] = data; done(data); },
                          function () { done(null); });
    }
    if (window.__traces[key]) { ready(); return; }
    var s = document.createElement("script");
    s.src = file;
    s.onload = ready;
    s.onerror = function () { done(null); };
    document.head.appendChild(s);
  }
  function diffBlock(text) {
    var pre = node("pre", null, "diff");
    text.split("\n").forEach(function (line) {
      var cls = line.startsWith("@@") ? "hunk" :
          line.startsWith("+") && !line.startsWith("+++") ? "add" :
          line.startsWith("-") && !line.startsWith("---") ? "del" : null;
      add(pre, node("span", line + "\n", cls));
    });
    return pre;
  }
  function labelled(label, text) {
    var pre = node("pre");
    add(pre, node("span", label, "role"));
    add(pre, document.createTextNode(text));
    return pre;
  }
  function trace(ep) {
    var box = node("div");
    if (ep.answer) add(box, node("div", "answer: " + ep.answer));
    if (ep.error) add(box, labelled("error: ", ep.error));
    (ep.calls || []).forEach(function (call, i) {
      var d = add(box, node("details", null, "call"));
      add(d, node("summary", "model call " + (i + 1) + " (" + call.method + ", " +
                  call.prompt_tokens + " prompt tokens)"));
      (call.messages || []).forEach(function (m) { add(d, labelled(m.role + ": ", m.content)); });
      if (call.prompt) add(d, node("pre", call.prompt));
      (call.completions || []).forEach(function (c) {
        add(d, labelled("completion (" + c.tokens + " tokens, " + c.finish_reason + "): ",
                        c.text));
      });
    });
    (ep.tools || []).forEach(function (t) {
      var d = add(box, node("details", null, "tool"));
      add(d, node("summary", "tool " + t.name + "(" + t.arguments + ")" +
                  (t.error ? " error" : "")));
      add(d, node("pre", t.error ? t.error : t.result));
    });
    if (ep.stdout) add(box, labelled("stdout: ", ep.stdout));
    return box;
  }
  function episodes(list, withTrace) {
    var box = node("div", null, "episodes");
    add(box, node("div", list.length + " episodes", "muted"));
    list.forEach(function (ep) {
      var line = ep.task_id + "  " + ep.outcome + "  score " + fmt(ep.score) +
          (ep.turns !== undefined ? "  turns " + ep.turns : "");
      if (!withTrace) { add(box, node("div", line, "episode")); return; }
      var d = add(box, node("details", null, "episode"));
      add(d, node("summary", line));
      d.addEventListener("toggle", function () {  // traces are built when first opened
        if (d.open && d.children.length === 1) add(d, trace(ep));
      });
    });
    return box;
  }
  function field(table, name, value) {
    var tr = add(table, node("tr"));
    add(tr, node("th", name));
    add(tr, node("td", value));
  }
  function showCandidate(key, element) {
    var c = run.candidates[key], panel = document.getElementById("panel");
    document.querySelectorAll(".cand.selected").forEach(function (e) {
      e.classList.remove("selected");
    });
    if (element) element.classList.add("selected");
    panel.innerHTML = "";
    add(panel, node("h2", key));
    var t = add(panel, node("table"));
    field(t, "status", c.status + (c.duplicate_of ? " (of " + c.duplicate_of + ")" : ""));
    field(t, "score at its weights", fmt(c.success) + (c.weights_id ? " at " + c.weights_id : ""));
    field(t, "parent", c.parent || "–");
    field(t, "iteration", c.iteration);
    field(t, "axis / components", c.mechanism || "–");
    field(t, "hypothesis", c.hypothesis || "–");
    field(t, "proposer", c.proposer || "–");
    field(t, "reasons", (c.reasons || []).map(function (r) {
      return r.code + ": " + r.message;
    }).join("\n") || "–");
    if (c.static_check && c.static_check.length) {
      field(t, "static check", JSON.stringify(c.static_check));
    }
    field(t, "episodes", c.num_examples + " (" + JSON.stringify(c.outcomes || {}) +
          "), mean turns " + fmt(c.mean_turns));
    var body = add(panel, node("div", "loading " + c.file + " ...", "muted"));
    load(key, c.file, function (data) {
      body.innerHTML = "";
      body.className = "";
      if (!data) { add(body, node("div", "could not load " + c.file, "bad")); return; }
      add(body, node("h3", data.diff ? "diff to " + c.parent : data.source ? "source" :
          c.parent ? "no diff (no source, or the same as " + c.parent + "'s)" : "no source"));
      if (data.diff) add(body, diffBlock(data.diff));
      else if (data.source) add(body, node("pre", data.source));
      if (data.proposal) {
        var d = add(body, node("details"));
        add(d, node("summary", "proposer's reply"));
        add(d, node("pre", data.proposal));
      }
      add(body, node("h3", c.traced ? "episodes (search split)" : "episodes"));
      if (!c.traced) {
        add(body, node("div", "outcome and score only: this archive does not list its search " +
                       "split (search.json), so its episodes may be on held-out tasks", "muted"));
      }
      add(body, episodes(data.episodes, c.traced));
    });
  }
  function showEpisodes(key, file, title, withTrace) {
    var panel = document.getElementById("panel");
    panel.innerHTML = "";
    add(panel, node("h2", title));
    if (!withTrace) add(panel, node("div", "test episodes: outcome and score only", "muted"));
    var body = add(panel, node("div", "loading " + file + " ...", "muted"));
    load(key, file, function (data) {
      body.innerHTML = "";
      if (!data) { add(body, node("div", "could not load " + file, "bad")); return; }
      add(body, episodes(data.episodes, withTrace));
    });
  }
  document.addEventListener("click", function (event) {
    var target = event.target.closest("[data-key]");
    if (!target) return;
    var key = target.getAttribute("data-key");
    if (run.candidates[key]) {
      showCandidate(key, target);
      history.replaceState(null, "", "#" + encodeURIComponent(key));
    } else if (run.files[key]) {
      showEpisodes(key, run.files[key], target.getAttribute("data-title") || key,
                   target.getAttribute("data-trace") === "1");
    }
  });
  var hash = decodeURIComponent(location.hash.slice(1));  // report.html#<archive>/<candidate>
  if (hash && run.candidates[hash]) {
    showCandidate(hash, document.querySelector('[data-key="' + CSS.escape(hash) + '"]'));
  }
})();
"""


def _script_json(value):
  """JSON safe inside a <script> element (no "<" left to open or close a tag or comment)."""
  return json.dumps(value, separators=(",", ":"), default=str).replace("<", "\\u003c")


def _text(value):
  if value is None:
    return "–"
  if isinstance(value, float):
    return f"{value:.3f}"
  return html.escape(str(value))


def _table(header, rows, classes=None):
  """An HTML table; rows are lists of already-escaped cell HTML."""
  parts = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
  for row in rows:
    parts.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
  parts.append("</table>")
  return "".join(parts)


def _document(title, body, data):
  return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
          f"</title><style>{STYLE}</style></head><body>{body}"
          f"<script>window.__run={_script_json(data)};</script><script>{SCRIPT}</script>"
          f"</body></html>\n")


def _header(run, title):
  state = ("<span class=\"ok\">finished</span>" if run.get("done") else
           "<span class=\"live\">running (reload for the latest)</span>")
  stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
  return (f"<h1>{html.escape(title)}</h1><div>recipe <b>{_text(run.get('recipe'))}</b>, domain "
          f"<b>{_text(run.get('domain'))}</b>, {state}; written {stamp} from "
          f"<code>{html.escape(run.get('workdir', ''))}</code> ({run.get('num_rows', 0)} metrics "
          f"rows)</div>")


def _accounting(run):
  counts, so_far = run.get("counts"), run["accounting"]
  parts = []
  rows = []
  for name in ("weight", "harness", "evaluation"):
    rollouts, tokens = so_far[name]["rollouts"], so_far[name]["generated_tokens"]
    if counts:  # the summary's counts (this process's, all included) once the run is done
      rollouts, tokens = counts.get(name, 0), counts.get(name + "_tokens", 0)
    rows.append([name, f'<span class="num">{rollouts}</span>',
                 f'<span class="num">{tokens}</span>'])
  parts.append(_table(["phase", "rollouts", "generated tokens"], rows))
  parts.append('<div class="muted">' + (
      "from summary.json" if counts else "so far, from the metrics rows") + "</div>")
  rows = []
  for segment in run["segments"]:
    last = segment["rows"][-1]
    first = segment["rows"][0]
    if segment["phase"] == "weight":
      what = (f"{len(segment['rows'])} {html.escape(str(last.get('kind', '')))} steps, reward "
              f"{_text(first.get('reward'))} &rarr; {_text(last.get('reward'))}")
      for name in ("accept_rate", "loss", "clip_fraction", "kl_to_reference", "grad_norm"):
        if name in last:
          what += f", {name} {_text(last[name])}"
    else:
      bits = []
      for row in segment["rows"]:
        if "iterations" in row:
          bits.append(f"search: {row['iterations']} iterations, accepted "
                      f"{_text(row.get('accepted'))} ({_text(row.get('stop_reason'))}), "
                      f"{row.get('search_rollouts', 0)} rollouts, proposer tokens "
                      f"{row.get('proposer_prompt_tokens', 0)} + "
                      f"{row.get('proposer_completion_tokens', 0)}")
        elif "gate_accepted" in row:
          bits.append(f"gate: {'accepted' if row['gate_accepted'] else 'rejected'}, p "
                      f"{_text(row.get('gate_p_value'))}")
        elif row.get("kind"):
          bits.append(html.escape(str(row["kind"])) + (
              f" round {row['round']}" if "round" in row else ""))
      what = "; ".join(bits)
    tokens = sum(row.get("generated_tokens") or 0 for row in segment["rows"])
    rows.append([html.escape(segment["phase"]), _text(segment["label"] or segment["kind"]),
                 f'{segment["start"]}&ndash;{segment["end"]}',
                 f'<span class="num">{segment["end"] - segment["start"]}</span>',
                 f'<span class="num">{tokens}</span>', what])
  if rows:
    parts.append(_table(["phase", "label", "training rollouts", "used", "generated tokens",
                         "what happened"], rows))
  return "".join(parts)


def _curves(run):
  evaluations = run["evaluations"]
  test = [(e["rollouts"], e["test_mean"]) for e in evaluations]
  best, series = [], {"test mean@k": test}
  for x, y in sorted(test):
    best.append((x, max(y, best[-1][1]) if best else y))
  series["best so far"] = best
  subsets = sorted({s for e in evaluations for s in e["per_subset"]})
  for subset in subsets if len(subsets) > 1 else ():  # one subset is the test mean itself
    series[f"test {subset}"] = [(e["rollouts"], e["per_subset"].get(subset))
                                for e in evaluations]
  x_max = max([s["end"] for s in run["segments"]] + [x for x, _ in test] + [1])
  plots = [svg.line_plot(series, "training rollouts", "test mean@k", steps=("best so far",),
                         x_range=(0, x_max), empty="no test evaluation yet")]
  weight_rows = [row for s in run["segments"] if s["phase"] == "weight" for row in s["rows"]]
  if len(weight_rows) > MAX_STEP_POINTS:  # every k-th step (and the last) of a long run
    stride = -(-len(weight_rows) // MAX_STEP_POINTS)
    weight_rows = weight_rows[::stride] + ([weight_rows[-1]] if len(weight_rows) % stride != 1
                                           else [])
  if weight_rows:
    plots.append(svg.line_plot({"training reward": [(r["rollouts"], r.get("reward"))
                                                    for r in weight_rows]},
                               "training rollouts", "reward", x_range=(0, x_max)))
    extra = {name: [(r["rollouts"], r.get(name)) for r in weight_rows]
             for name in ("accept_rate", "clip_fraction", "kl_to_reference", "entropy")
             if any(name in r for r in weight_rows)}
    if extra:
      plots.append(svg.line_plot(extra, "training rollouts", "RSFT / GRPO", x_range=(0, x_max)))
  return (svg.timeline(run["segments"], evaluations, x_max) +
          '<div class="plots">' + "".join(plots) + "</div>")


def _tree(archive, candidates):
  """The archive as nested lists, parent -> child (a candidate whose parent is not in the
  archive is a root)."""
  children, ids = {}, {c["id"] for c in candidates}
  for candidate in candidates:
    parent = candidate["parent"] if candidate["parent"] in ids else None
    children.setdefault(parent, []).append(candidate)
  parts = []

  def render(candidate):
    key = f"{archive['path']}/{candidate['id']}"
    accepted = " accepted" if candidate["id"] == archive["accepted"] else ""
    reasons = ",".join(r.get("code", "") for r in candidate.get("reasons") or [])
    parts.append(f'<li><span class="cand st-{html.escape(candidate["status"] or "")}{accepted}" '
                 f'data-key="{html.escape(key)}" tabindex="0">{html.escape(candidate["id"])} '
                 f'<span class="muted">i{candidate.get("iteration")}</span> '
                 f'{_text(candidate["success"])} {html.escape(candidate["status"] or "")}'
                 f'{" (" + html.escape(reasons) + ")" if reasons else ""}</span> <span class="hyp">'
                 f'{html.escape((candidate.get("mechanism") or "")[:60])} '
                 f'{html.escape((candidate.get("hypothesis") or "")[:100])}</span>')
    below = children.get(candidate["id"], [])
    if below:
      parts.append("<ul>")
      stack.append(below)
    else:
      parts.append("</li>")

  # Iterative depth-first walk: a long chain of candidates must not hit Python's recursion limit.
  stack = [children.get(None, [])]
  while stack:
    if not stack[-1]:
      stack.pop()
      if stack:
        parts.append("</ul></li>")
      continue
    render(stack[-1].pop(0))
  return '<ul class="tree">' + "".join(parts) + "</ul>"


def run_page(run, files, title):
  """The page of one run; files: {data key: relative path of its data file}."""
  candidates = {}
  body = [_header(run, title), '<div id="layout"><div id="main">',
          "<h2>Timeline, curves</h2>", _curves(run),
          "<h2>Rollouts and tokens per phase</h2>", _accounting(run)]
  if run["evaluations"]:
    rows = []
    for evaluation in run["evaluations"]:
      key = f"test/{evaluation['name']}"
      link = (f'<span class="open" data-key="{key}" data-title="test {evaluation["name"]}">'
              f'episodes</span>' if key in files else "")
      subsets = ", ".join(f"{k} {v:.3f}" for k, v in evaluation["per_subset"].items())
      rows.append([str(evaluation["rollouts"]), _text(evaluation["label"]),
                   _text(evaluation["test_mean"]), html.escape(subsets), link])
    body += ["<h2>Test evaluations</h2>",
             _table(["rollouts", "label", "test mean@k", "per subset", ""], rows)]
  if run["gates"]:
    body += ["<h2>Validation gate decisions</h2>", _table(
        ["label", "rollouts", "incumbent mean", "candidate mean", "difference", "p-value", "n",
         "verdict"],
        [[_text(g["label"]), str(g["rollouts"]), _text(g["incumbent_validation"]),
          _text(g["candidate_validation"]), _text(g["gate_mean_difference"]),
          _text(g["gate_p_value"]) if (g["gate_p_value"] or 0) >= 0 else "–", _text(g["gate_n"]),
          '<span class="ok">accepted</span>' if g["gate_accepted"] else
          '<span class="bad">rejected</span>'] for g in run["gates"]])]
  if run["pairs"]:
    body += ["<h2>VACE (weights, harness) pairs</h2>", _table(
        ["label", "cycle", "weights", "weight steps", "harness", "validation mean", ""],
        [[_text(p.get("label")), _text(p.get("cycle")), _text(p.get("weights_id")),
          _text(p.get("weight_steps")), _text((p.get("harness_hash") or "")[:12]),
          _text(p.get("validation_mean")),
          "selected" if p.get("label") == run["selected"] else ""] for p in run["pairs"]])]
  if run["blocks"]:
    links = " ".join(f'<span class="open" data-key="block/{html.escape(name)}" data-trace="1" '
                     f'data-title="VACE GRPO block {html.escape(name)}">{html.escape(name)}</span>'
                     for name in run["blocks"] if f"block/{name}" in files)
    body += ["<h2>VACE GRPO blocks (weight split episodes)</h2>", f"<div>{links}</div>"]
  if run["adaptation"]:
    body += ["<h2>Harness Learning adaptation rounds</h2>", _table(
        ["label", "round", "rollouts", "score before", "score after", "changed", "candidates",
         "runnable", "best candidate"],
        [[_text(a["label"]), _text(a["round"]), _text(a["rollouts"]), _text(a["previous_score"]),
          _text(a["current_score"]), _text(a["changed"]), _text(a["candidates"]),
          _text(a["runnable"]), _text(a["best_candidate_score"])] for a in run["adaptation"]])]
  for archive in run["archives"]:
    for candidate in archive["candidates"]:
      key = f"{archive['path']}/{candidate['id']}"
      candidates[key] = {**candidate, "file": files.get(key, ""), "traced": archive["traced"]}
    statuses = {}
    for candidate in archive["candidates"]:
      statuses[candidate["status"]] = statuses.get(candidate["status"], 0) + 1
    opened = " open" if len(run["archives"]) <= 12 else ""
    stop = f', stop: {html.escape(str(archive["stop_reason"]))}' if archive["stop_reason"] else ""
    body += [f'<details{opened}><summary><h2 style="display:inline">Harness archive '
             f'{html.escape(archive["path"])}</h2></summary>'
             f'<div class="muted">{len(archive["candidates"])} candidates '
             f'({html.escape(", ".join(f"{n} {s}" for s, n in sorted(statuses.items())))}); '
             f'accepted {_text(archive["accepted"])}{stop}. Click a candidate for its diff and '
             f'episodes.</div>',
             _tree(archive, archive["candidates"]), "</details>"]
  body.append('</div><div id="panel"></div></div>')
  return _document(title, "".join(body), {"candidates": candidates, "files": files})


def _markdown_table(text):
  """The first markdown table of text as HTML, then its other lines as paragraphs."""
  rows, other = [], []
  for line in text.splitlines():
    if line.startswith("|") and not set(line) <= set("|-: "):
      rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    elif line.strip() and not line.startswith("|"):
      other.append(line.strip())
  table = _table(rows[0], [[html.escape(cell) for cell in row] for row in rows[1:]]) if rows else ""
  return table + "".join(f"<p>{html.escape(line)}</p>" for line in other)


def compare_page(methods, table, title, done):
  """The page of a compare run: methods: [(name, read_run dict)]; table: table.md's text."""
  curves, best = {}, {}
  for name, run in methods:
    points = [(e["rollouts"], e["test_mean"]) for e in run["evaluations"]]
    curves[name] = points
    running = []
    for x, y in sorted(points):
      running.append((x, max(y, running[-1][1]) if running else y))
    best[f"{name} best"] = running
  rows = []
  for name, run in methods:
    counts = run.get("counts") or {  # a method still running: its rows so far
        key: value for phase, totals in run["accounting"].items()
        for key, value in ((phase, totals["rollouts"]),
                           (phase + "_tokens", totals["generated_tokens"]))}
    rows.append([f'<a href="{html.escape(name)}/report.html">{html.escape(name)}</a>',
                 _text(run.get("final_test_mean")), _text(run.get("best_test_mean"))] +
                [str(counts.get(phase, "–")) for phase in ("weight", "harness", "evaluation")] +
                [str(counts.get(phase + "_tokens", "–")) for phase in ("weight", "harness")] +
                [str(sum(len(a["candidates"]) for a in run["archives"])),
                 "finished" if run.get("done") else "running"])
  header = _header({"recipe": "compare", "domain": methods[0][1].get("domain") if methods else None,
                    "done": done, "workdir": methods[0][1]["workdir"].rsplit("/", 1)[0]
                    if methods else "", "num_rows": sum(r["num_rows"] for _, r in methods)}, title)
  body = [header, "<h2>Methods</h2>",
          _table(["method (its report)", "final test mean@k", "best test mean@k",
                  "weight rollouts", "harness rollouts", "evaluation rollouts", "weight tokens",
                  "harness tokens", "candidates", "state"], rows),
          "<h2>Paired comparison (table.md)</h2>",
          _markdown_table(table) if table else '<p class="empty">written when every method '
                                               'has finished</p>',
          "<h2>Test curves</h2>", '<div class="plots">',
          svg.line_plot(curves, "training rollouts", "test mean@k", empty="no evaluation yet"),
          svg.line_plot(best, "training rollouts", "best so far", steps=tuple(best)), "</div>"]
  return _document(title, "".join(body), {"candidates": {}, "files": {}})
