#!/usr/bin/env python3
"""The benchmark's PNG plots, from results.json alone (so they can be redrawn on another
machine: `plots.py results.json DIR`): shares.png (each tenant's share over time, 100 ms
windows, one panel per share run, targets dashed), latency_cdf.png (CDF of the latency
tenant's request latency (submission to completion) per batch kind and arrival pattern:
alone, native, MPS, fracgpu, fracgpu-mps, HAMi-core) and overhead.png (fracgpu / native per metric: median of paired ratios, min-max
bars). Needs matplotlib (Agg); without it, returns no files and says why."""
import json
import math
import os
import sys

COLORS = {"alone": "#888888", "native": "#d62728", "mps": "#ff7f0e", "fracgpu": "#1f77b4", "fracgpu_mps": "#9467bd",
          "hami": "#2ca02c"}


def _grid(plt, n, cols=4, w=4.0, h=2.6):
    rows = max(1, math.ceil(n / cols))
    cols = min(cols, max(1, n))
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows), squeeze=False)
    flat = [a for r in axes for a in r]
    for a in flat[n:]:
        a.axis("off")
    return fig, flat


def shares_plot(plt, doc, path):
    series = doc.get("series", {}).get("shares", {})
    if not series:
        return None
    fig, axes = _grid(plt, len(series))
    for ax, (key, s) in zip(axes, sorted(series.items())):
        t = [p[0] for p in s["over_time"]]
        for i, name in enumerate(s["tenants"]):
            ys = [p[1][i] if p[1][i] is not None else float("nan") for p in s["over_time"]]
            line, = ax.plot(t, ys, lw=1, label=name)
            if s["targets"][i] is not None:
                ax.axhline(s["targets"][i], color=line.get_color(), ls="--", lw=0.8)
        ax.set_title(key, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_xlabel("s", fontsize=7)
        ax.set_ylabel("share (100 ms)", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=5, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def latency_plot(plt, doc, path):
    series = doc.get("series", {}).get("latency", {})
    panels = [(b, a, c) for b, per in series.items() for a, c in sorted(per.items())]
    if not panels:
        return None
    fig, axes = _grid(plt, len(panels))
    for ax, (batch, arrival, curves) in zip(axes, panels):
        for mode, pts in curves.items():
            if pts:
                ys = [i / (len(pts) - 1) if len(pts) > 1 else 1.0 for i in range(len(pts))]
                ax.plot(pts, ys, lw=1.1, color=COLORS.get(mode), label=mode)
        ax.set_xscale("log")
        ax.set_title("batch %s, %s arrivals" % (batch, arrival), fontsize=8)
        ax.set_xlabel("request latency (ms)", fontsize=7)
        ax.set_ylabel("CDF", fontsize=7)
        ax.axhline(0.99, color="#cccccc", lw=0.6)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def overhead_plot(plt, doc, path):
    rows = [r for r in doc.get("overhead", []) if r.get("ratio") is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6, 3))
    xs = range(len(rows))
    for off, key, spread_key, label, color in ((-0.18, "ratio", "ratio_spread", "fracgpu", COLORS["fracgpu"]),
                                               (0.18, "hami_ratio", "hami_ratio_spread", "HAMi-core", COLORS["hami"])):
        vals = [r.get(key) for r in rows]
        if all(v is None for v in vals):
            continue
        lo = [max(0.0, (v or 0) - ((r.get(spread_key) or {}).get("min") or v or 0)) for v, r in zip(vals, rows)]
        hi = [max(0.0, ((r.get(spread_key) or {}).get("max") or v or 0) - (v or 0)) for v, r in zip(vals, rows)]
        ax.bar([x + off for x in xs], [v or 0 for v in vals], width=0.36, yerr=[lo, hi], capsize=3, label=label,
               color=color)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["metric"] for r in rows], fontsize=8)
    ax.set_ylabel("time with / without (ratio)", fontsize=8)
    ax.set_title("overhead: median of paired ratios (bars: min-max)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def draw(doc, outdir):
    """Returns (paths written, reason when none could be)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return [], "no matplotlib here (%s): redraw with bench/gpu/plots.py results.json DIR" % e
    out = []
    for fn, name in ((shares_plot, "shares.png"), (latency_plot, "latency_cdf.png"), (overhead_plot, "overhead.png")):
        try:
            p = fn(plt, doc, os.path.join(outdir, name))
            if p:
                out.append(p)
        except Exception as e:  # noqa: BLE001 - one plot failing leaves the others
            print("plots: %s failed: %s" % (name, e), file=sys.stderr)
    return out, None


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plots.py results.json OUTDIR")
    with open(sys.argv[1]) as f:
        paths, why = draw(json.load(f), sys.argv[2])
    print("\n".join(paths) or why or "nothing to draw (no share, latency or overhead rows)")
