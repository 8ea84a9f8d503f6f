#!/usr/bin/env python3
"""Summarises the per-piece launch timing of a FRACGPU_LAUNCH_PROFILE build of the shim
(interpose/core/launch_profile.h): each process's launch-<pid>.json in PROFILE_DIR, split into
tenants and processes without a tenant, as the median over processes of each piece's median and
mean in ns (TSC cycles over the process's measured TSC rate). Optionally also the launchtime
JSON lines of fracgpu-bench-client runs named WAY-N.json in CLIENT_DIR (median shallow p50 per way)
and the overhead rows of a bench results.json.

    tools/launch_profile_summary.py PROFILE_DIR [--clients DIR] [--results results.json]
"""
import argparse
import glob
import json
import os
import statistics

PIECES = ["prologue", "tenant", "gate", "section_in", "driver", "section_out", "after_launch", "return",
          "total"]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec="%.1f"):
    return "-" if x is None else spec % x


def profiles(d):
    groups = {"tenant": [], "no tenant": []}
    for path in sorted(glob.glob(os.path.join(d, "launch-*.json"))):
        try:
            with open(path) as f:
                p = json.load(f)
        except (OSError, ValueError):
            continue
        if p.get("calls", 0) < 1000 or not p.get("tsc_ghz"):
            continue
        groups["tenant" if p["pieces"]["tenant"]["n"] > 0 else "no tenant"].append(p)
    return groups


def show_profiles(groups):
    for name, ps in groups.items():
        if not ps:
            continue
        ghz = med([p["tsc_ghz"] for p in ps])
        print("\n## shim pieces, %s: %d processes, %d launches each (median), TSC %.3f GHz, one rdtsc %s cycles"
              % (name, len(ps), med([p["calls"] for p in ps]), ghz, fmt(med([p["rdtsc_cycles"] for p in ps]), "%.0f")))
        print("| piece | launches | median ns (median over processes, min-max) | mean ns |")
        print("| --- | --- | --- | --- |")
        for piece in PIECES:
            rows = [(p["pieces"][piece], p["tsc_ghz"]) for p in ps if p["pieces"][piece]["n"] > 0]
            if not rows:
                continue
            p50 = [r["p50"] / g for r, g in rows]
            mean = [r["mean"] / g for r, g in rows]
            print("| %s | %d | %.1f (%.1f-%.1f) | %.1f |" % (piece, med([r["n"] for r, _ in rows]), med(p50),
                                                          min(p50), max(p50), med(mean)))


def show_clients(d):
    ways = {}
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        way = os.path.basename(path).rsplit("-", 1)[0]
        try:
            with open(path) as f:
                r = json.loads(f.read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            continue
        passes = r.get("passes") or []
        if passes:
            ways.setdefault(way, []).append(med([p.get("shallow_p50_ns") for p in passes]))
    if not ways:
        return
    print("\n## direct launchtime runs (fresh processes, alternated): shallow p50 ns per call")
    base = ways.get("native")
    for way, xs in ways.items():
        diff = ""
        if base and way != "native":
            diff = ", paired difference to native median %+.1f ns" % med([x - b for x, b in zip(xs, base)])
        print("- %s: median %.1f over %d (%s)%s" % (way, med(xs), len(xs), " ".join("%.0f" % x for x in xs), diff))


def show_results(path):
    with open(path) as f:
        res = json.load(f)
    rows = [r for r in res.get("rows", res.get("records", [])) if isinstance(r, dict) and r.get("metric")]
    if not rows and isinstance(res.get("overhead"), list):
        rows = res["overhead"]
    print("\n## bench overhead rows (fracb: the --shim-b build)")
    print("| metric | native | fracgpu | ratio | shim ratio | high ratio | fracb | fracb ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["metric"], fmt(r.get("native")), fmt(r.get("fracgpu")), fmt(r.get("ratio"), "%.4f"),
            fmt(r.get("shim_ratio"), "%.4f"), fmt(r.get("high_ratio"), "%.4f"), fmt(r.get("fracb")),
            fmt(r.get("fracb_ratio"), "%.4f")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile_dir")
    ap.add_argument("--clients")
    ap.add_argument("--results")
    a = ap.parse_args()
    if a.results and os.path.exists(a.results):
        try:
            show_results(a.results)
        except (OSError, ValueError, KeyError) as e:
            print("results: %s" % e)
    show_profiles(profiles(a.profile_dir))
    if a.clients:
        show_clients(a.clients)


if __name__ == "__main__":
    main()
