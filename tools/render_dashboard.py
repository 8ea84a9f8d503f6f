#!/usr/bin/env python3
"""Renders fracgpu's Grafana dashboard (k8s/monitoring/grafana-dashboard.json) into one
PNG without Grafana: every panel's queries are evaluated over a time range through a
Prometheus's /api/v1/query_range and drawn with matplotlib where the panel's gridPos puts
it, with its title, unit, stacking, threshold lines and legends from its legendFormat.

  tools/render_dashboard.py --prometheus http://127.0.0.1:9090 --start T0 --end T1 \\
      [--out docs/images/dashboard-sim.png] [--var gpu=GPU-...] [--scrape-interval 1]
      [--caption TEXT] [--save-json FILE] | --from-json FILE

T0/T1 are Unix times (tests/monitoring/prometheus_integration_test.py --keep-for prints
them). Grafana's variables become: $gpu/$namespace/$pod the --var value or ".*" (All);
$__interval the step (range/240, at least the scrape interval); $__rate_interval
max(step + scrape interval, 4 x scrape interval), as Grafana computes it; $__range the
range. --save-json keeps the fetched series, --from-json draws from them (no Prometheus).
Only "timeseries" panels (and rows, as headings) are drawn: that is all the dashboard has.
Needs python3-matplotlib (Debian). Cost: one query_range per target.
"""
import argparse
import datetime
import json
import math
import pathlib
import re
import sys
import textwrap
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MultipleLocator  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
GRID_COLUMNS = 24
INCH_PER_COLUMN = 0.85
INCH_PER_ROW = 0.36


# --- queries ------------------------------------------------------------------------------

def intervals(start, end, scrape):
    step = max(scrape, math.ceil((end - start) / 240))
    return {"__interval": f"{step}s", "__rate_interval": f"{max(step + scrape, 4 * scrape)}s",
            "__range": f"{int(end - start)}s"}, step


def fill(expr, values):
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), ".*"), expr)


def query_range(url, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=30) as reply:
        body = json.load(reply)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {expr}: {body}")
    return body["data"]["result"]


def panels_of(dash):
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels", [])


def fetch(dash, url, start, end, scrape, variables):
    values, step = intervals(start, end, scrape)
    values.update(variables)
    data = {}
    for panel in panels_of(dash):
        for target in panel.get("targets", []):
            expr = fill(target["expr"], values)
            data[f"{panel['id']}/{target['refId']}"] = query_range(url, expr, start, end, step)
    return {"start": start, "end": end, "step": step, "series": data}


# --- drawing ------------------------------------------------------------------------------

def iec(value, _pos=None):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def seconds(value, _pos=None):
    if value == 0:
        return "0"
    for unit, size in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def short(value, _pos=None):
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


FORMATTERS = {"bytes": iec, "percentunit": lambda v, _p=None: f"{v * 100:.0f}%", "s": seconds,
              "short": short}


def legend(target, metric):
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), target.get("legendFormat", ""))
    text = " ".join(text.split())
    return text or "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items())) + "}"


def ref_overrides(panel):
    """refIds drawn unstacked, and {refId: matplotlib line style}, from the panel's overrides."""
    unstacked, styles = set(), {}
    for override in panel["fieldConfig"].get("overrides", []):
        if override["matcher"].get("id") != "byFrameRefID":
            continue
        ref = override["matcher"]["options"]
        for prop in override["properties"]:
            if prop["id"] == "custom.stacking" and prop["value"].get("mode") == "none":
                unstacked.add(ref)
            if prop["id"] == "custom.lineStyle":
                styles[ref] = {"dash": "--", "dot": ":"}.get(prop["value"].get("fill"), "-")
    return unstacked, styles


def plot_series(ax, panel, fetched, times, x):
    """Draws the panel's series (stacked where it says so); returns how many."""
    stacked = panel["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get("mode") == "normal"
    lines_only, styles = ref_overrides(panel)
    stack_base = [0.0] * len(times)
    drawn = 0
    for target in panel["targets"]:
        # In tenant order, so that a tenant keeps its colour from panel to panel.
        found = fetched["series"].get(f"{panel['id']}/{target['refId']}", [])
        for series in sorted(found, key=lambda s: (s["metric"].get("tenant", ""), legend(target, s["metric"]))):
            points = {round(float(t)): float(v) for t, v in series["values"]}
            y = [points.get(round(t), math.nan) for t in times]
            label = legend(target, series["metric"])
            if stacked and target["refId"] not in lines_only:
                top = [b + (0.0 if math.isnan(v) else v) for b, v in zip(stack_base, y)]
                ax.fill_between(x, stack_base, top, alpha=0.55, linewidth=0.8, label=label, step=None)
                stack_base = top
            else:
                ax.plot(x, y, linewidth=1.4, linestyle=styles.get(target["refId"], "-"), label=label)
            drawn += 1
    return drawn


def style_axes(ax, panel, x, drawn):
    """Threshold lines, limits, units, time axis, title and legend, as the panel says."""
    defaults = panel["fieldConfig"]["defaults"]
    if defaults.get("custom", {}).get("thresholdsStyle", {}).get("mode") == "line":
        for step in defaults.get("thresholds", {}).get("steps", []):
            if step.get("value") is not None:
                ax.axhline(step["value"], color="tab:red", linestyle=":", linewidth=1.2)
    if drawn == 0:
        ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center", color="grey")
    if "min" in defaults:
        ax.set_ylim(bottom=defaults["min"])
    if "max" in defaults:  # a little above, so that a series at the maximum stays visible
        ax.set_ylim(top=defaults["max"] + 0.03 * (defaults["max"] - ax.get_ylim()[0]))
    if defaults.get("unit") == "bytes":  # ticks at powers of two (1 GiB, 512 MiB, ...)
        low, high = ax.get_ylim()
        ax.yaxis.set_major_locator(MultipleLocator(2 ** math.ceil(math.log2(max(high - low, 1) / 6))))
    ax.yaxis.set_major_formatter(FuncFormatter(FORMATTERS.get(defaults.get("unit"), short)))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=datetime.timezone.utc))
    ax.set_xlim(x[0], x[-1])
    ax.grid(True, alpha=0.3)
    ax.tick_params(labelsize=7)
    ax.set_title(panel["title"], fontsize=9, loc="left")
    if drawn:
        ax.legend(loc="upper left", bbox_to_anchor=(0, -0.12), ncol=3, fontsize=6.5, frameon=False)


def draw_panel(ax, panel, fetched):
    times = [fetched["start"] + i * fetched["step"]
             for i in range(int((fetched["end"] - fetched["start"]) // fetched["step"]) + 1)]
    x = [datetime.datetime.fromtimestamp(t, datetime.timezone.utc) for t in times]
    style_axes(ax, panel, x, plot_series(ax, panel, fetched, times, x))


def render(dash, fetched, out, caption):
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels_of(dash))
    width = GRID_COLUMNS * INCH_PER_COLUMN
    caption = textwrap.fill(caption, width=int(width * 14))  # about 14 characters an inch at 8.5 pt
    header = 0.75 + 0.16 * caption.count("\n")
    height = rows * INCH_PER_ROW + header
    fig = plt.figure(figsize=(width, height), dpi=100)
    fig.suptitle(dash["title"], x=0.01, y=1 - 0.25 / height, ha="left", fontsize=13, weight="bold")
    fig.text(0.01, 1 - 0.45 / height, caption, ha="left", va="top", fontsize=8.5, color="dimgrey")
    for panel in panels_of(dash):
        grid = panel["gridPos"]
        left, top = grid["x"] / GRID_COLUMNS, 1 - (header + grid["y"] * INCH_PER_ROW) / height
        if panel["type"] == "row":
            fig.text(left + 0.005, top - 0.5 * INCH_PER_ROW / height, panel["title"], fontsize=11, weight="bold",
                     va="center")
            continue
        if panel["type"] != "timeseries":
            continue
        box_w, box_h = grid["w"] / GRID_COLUMNS, grid["h"] * INCH_PER_ROW / height
        # The panel's box: title on top, the plot, then room for the legend underneath.
        margin = 0.65 / width  # room for the y axis's labels
        ax = fig.add_axes([left + margin, top - box_h * 0.62, box_w - 1.3 * margin, box_h * 0.52])
        draw_panel(ax, panel, fetched)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument("--start", type=float, help="Unix time of the range's start")
    parser.add_argument("--end", type=float, help="Unix time of the range's end")
    parser.add_argument("--dashboard", default=str(REPO / "k8s" / "monitoring" / "grafana-dashboard.json"))
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="a dashboard variable's value (regex; default .*, i.e. All)")
    parser.add_argument("--scrape-interval", type=int, default=15, help="Prometheus's scrape interval, s")
    parser.add_argument("--out", default="dashboard.png")
    parser.add_argument("--caption", default="")
    parser.add_argument("--save-json", help="also write the fetched series to this file")
    parser.add_argument("--from-json", help="draw from a --save-json file instead of a Prometheus")
    args = parser.parse_args()
    if not args.from_json and not (args.prometheus and args.start and args.end):
        parser.error("give --prometheus, --start and --end, or --from-json")
    return args


def main():
    args = parse_args()
    dash = json.loads(pathlib.Path(args.dashboard).read_text())
    if args.from_json:
        fetched = json.loads(pathlib.Path(args.from_json).read_text())
    else:
        variables = dict(v.split("=", 1) for v in args.var)
        fetched = fetch(dash, args.prometheus.rstrip("/"), args.start, args.end, args.scrape_interval, variables)
        if args.save_json:
            pathlib.Path(args.save_json).write_text(json.dumps(fetched))
    caption = args.caption or "{} - {} UTC".format(
        *(datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
          for t in (fetched["start"], fetched["end"])))
    render(dash, fetched, args.out, caption)
    series = sum(len(s) for s in fetched["series"].values())
    print(f"{args.out}: {len(fetched['series'])} queries, {series} series")
    return 0


if __name__ == "__main__":
    sys.exit(main())
