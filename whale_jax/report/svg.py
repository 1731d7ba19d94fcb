"""Line plots and the phase timeline as inline SVG text, on a shared rollout axis.

  line_plot({"test": [(0, 0.31), (1024, 0.42)]}, x_label="training rollouts", y_label="...")
  timeline(segments, evaluations, x_max)

Every data point is a <circle class="point" data-series=... data-x=... data-y=...> with a
<title> (the browser's own tooltip), so tests and readers recover the plotted numbers.
"""
import html
import math

WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 52, 150, 14, 34
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
PHASE_COLORS = {"weight": "#9ecae1", "harness": "#fdae6b", "proposer": "#c7b9e0"}


def _number(value):
  return f"{value:.4g}" if isinstance(value, float) else str(value)


def _ticks(low, high, count=5):
  if high <= low:
    return [low]
  step = 10 ** math.floor(math.log10((high - low) / count))
  for multiple in (1, 2, 5, 10):
    if (high - low) / (step * multiple) <= count:
      step *= multiple
      break
  first = math.ceil(low / step) * step
  return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _frame(x_range, y_range, x_label, y_label, height=HEIGHT):
  """(svg opening + axes, x scale, y scale)."""
  (x_low, x_high), (y_low, y_high) = x_range, y_range
  plot_width, plot_height = WIDTH - LEFT - RIGHT, height - TOP - BOTTOM

  def x_scale(x):
    return LEFT + (x - x_low) / ((x_high - x_low) or 1) * plot_width

  def y_scale(y):
    return TOP + plot_height - (y - y_low) / ((y_high - y_low) or 1) * plot_height

  parts = [f'<svg class="plot" viewBox="0 0 {WIDTH} {height}"'
           f' width="{WIDTH}" height="{height}" role="img">',
           f'<rect x="{LEFT}" y="{TOP}" width="{plot_width}" height="{plot_height}" '
           f'fill="none" stroke="#999"/>']
  for tick in _ticks(x_low, x_high):
    x = x_scale(tick)
    parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + plot_height}" '
                 f'stroke="#eee"/><text x="{x:.1f}" y="{TOP + plot_height + 13}" '
                 f'text-anchor="middle" class="tick">{_number(tick)}</text>')
  if y_label:
    for tick in _ticks(y_low, y_high, 4):
      y = y_scale(tick)
      parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_width}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#eee"/><text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" '
                   f'class="tick">{_number(round(tick, 6))}</text>')
    parts.append(f'<text x="12" y="{TOP + plot_height / 2}" class="label" text-anchor="middle" '
                 f'transform="rotate(-90 12 {TOP + plot_height / 2})">{html.escape(y_label)}'
                 f'</text>')
  parts.append(f'<text x="{LEFT + plot_width / 2}" y="{height - 4}" class="label" '
               f'text-anchor="middle">{html.escape(x_label)}</text>')
  return parts, x_scale, y_scale


def _range(values, pad=0.0):
  low, high = min(values), max(values)
  if low == high:
    low, high = low - 0.5 if low else 0.0, high + 0.5 if high else 1.0
  return low - pad * (high - low), high + pad * (high - low)


def line_plot(series, x_label, y_label, steps=(), x_range=None, y_range=None, empty=""):
  """One SVG with a line per series ({name: [(x, y)]}); names in steps are drawn as
  step lines (best so far). Returns "" (or the empty text in a <p>) without points."""
  points = [(x, y) for values in series.values() for x, y in values if y is not None]
  if not points:
    return f'<p class="empty">{html.escape(empty)}</p>' if empty else ""
  x_range = x_range or _range([x for x, _ in points])
  y_range = y_range or _range([y for _, y in points], 0.05)
  parts, x_scale, y_scale = _frame(x_range, y_range, x_label, y_label)
  for index, (name, values) in enumerate(series.items()):
    values = sorted((x, y) for x, y in values if y is not None)
    if not values:
      continue
    color = COLORS[index % len(COLORS)]
    coordinates = []
    for position, (x, y) in enumerate(values):
      if name in steps and position:
        coordinates.append(f"{x_scale(x):.1f},{y_scale(values[position - 1][1]):.1f}")
      coordinates.append(f"{x_scale(x):.1f},{y_scale(y):.1f}")
    dash = ' stroke-dasharray="4 3"' if name in steps else ""
    parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5"{dash} '
                 f'points="{" ".join(coordinates)}"/>')
    for x, y in values:
      parts.append(f'<circle class="point" data-series="{html.escape(name)}" data-x="{x}" '
                   f'data-y="{y!r}" cx="{x_scale(x):.1f}" cy="{y_scale(y):.1f}" r="2.5" '
                   f'fill="{color}"><title>{html.escape(name)}: {_number(y)} at {x}</title>'
                   f'</circle>')
    legend_y = TOP + 12 + 14 * index
    parts.append(f'<line x1="{WIDTH - RIGHT + 8}" x2="{WIDTH - RIGHT + 24}" y1="{legend_y - 4}" '
                 f'y2="{legend_y - 4}" stroke="{color}" stroke-width="2"{dash}/>'
                 f'<text x="{WIDTH - RIGHT + 28}" y="{legend_y}" class="legend">'
                 f'{html.escape(name[:22])}</text>')
  parts.append("</svg>")
  return "".join(parts)


def timeline(segments, evaluations, x_max):
  """Phase bands on the rollout axis (weight, harness search, gate, ...; each a rect with its
  label as tooltip) and a tick per test evaluation."""
  height = 86
  parts, x_scale, _ = _frame((0, max(x_max, 1)), (0, 1), "training rollouts (weight + harness)",
                             "", height)
  lanes = {"weight": 0, "harness": 1, "proposer": 1}
  lane_height = (height - TOP - BOTTOM - 8) / 3
  for index, segment in enumerate(segments):
    x0, x1 = x_scale(segment["start"]), x_scale(segment["end"])
    lane = lanes.get(segment["phase"], 1)
    y = TOP + 2 + lane * lane_height
    name = f'{segment["phase"]} {segment["label"] or segment["kind"]}'.strip()
    parts.append(f'<rect class="segment" data-index="{index}" x="{x0:.1f}" y="{y:.1f}" '
                 f'width="{max(x1 - x0, 2):.1f}" height="{lane_height - 2:.1f}" '
                 f'fill="{PHASE_COLORS.get(segment["phase"], "#ccc")}" stroke="#666" '
                 f'stroke-width="0.5"><title>{html.escape(name)}: rollouts {segment["start"]}'
                 f'-{segment["end"]}, {len(segment["rows"])} rows</title></rect>')
    for iteration in segment.get("iterations", ()):  # a harness search's iterations
      x = x_scale(iteration["end"])
      best = "–" if iteration["best"] is None else _number(iteration["best"])
      parts.append(f'<line class="iteration" x1="{x:.1f}" x2="{x:.1f}" y1="{y:.1f}" '
                   f'y2="{y + lane_height - 2:.1f}" stroke="#7f3b08" stroke-width="1">'
                   f'<title>{html.escape(segment["label"])} iteration {iteration["iteration"]}: '
                   f'best score so far {best}</title></line>')
  y = TOP + 2 + 2 * lane_height
  for evaluation in evaluations:
    x = x_scale(evaluation["rollouts"])
    parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y:.1f}" y2="{y + lane_height:.1f}" '
                 f'stroke="#2ca02c" stroke-width="2"><title>test evaluation at '
                 f'{evaluation["rollouts"]}: {_number(evaluation["test_mean"])}</title></line>')
  for lane, name in enumerate(("weight", "harness", "test")):
    parts.append(f'<text x="{WIDTH - RIGHT + 8}" y="{TOP + (lane + 0.7) * lane_height + 2:.1f}" '
                 f'class="legend">{name}</text>')
  parts.append("</svg>")
  return "".join(parts)
