"""The benchmark's outputs, all in --out: results.json (machine, configuration, versions, the
time budget per phase (planned / allotted / actual), phases, every table's rows with their
spreads, and the series the plots are drawn from),
results.csv (every table's scalar columns), summary.txt (the tables, also printed on
stdout), the PNG plots (plots.py) and bench.tar.gz (all of it plus every process's log:
the GPU machine hands back only a few files)."""
import datetime
import os
import sys
import time

import plots

SCHEMA = "fracgpu-bench/1"

COLUMNS = {
    "overhead": [("metric", "metric", "%s"), ("unit", "unit", "%s"), ("native", "native", "%.3f"),
                 ("fracgpu", "fracgpu", "%.3f"), ("ratio", "ratio", "%.4f"),
                 ("ratio min-max", ("ratio_spread", "min", "max"), "%.4f"), ("HAMi ratio", "hami_ratio", "%.4f"),
                 ("shim-only ratio", "shim_ratio", "%.4f"), ("high-tenant ratio", "high_ratio", "%.4f"), ("shim-b ratio", "fracb_ratio", "%.4f")],
    "shares": [("setup", "setup", "%s"), ("split", "split", "%s"), ("workload", "workload", "%s"),
               ("tenant", "tenant", "%s"), ("target", "target", "%.3f"), ("measured", "measured", "%.3f"),
               ("1s min-max", ("windows_1s", "min", "max"), "%.3f"),
               ("100ms max err", ("windows_100ms", "max_abs_error"), "%.3f"),
               ("GPU time", "gpu_time", "%.3f"), ("efficiency", "efficiency", "%.3f")],
    "conserve": [("case", "case", "%s"), ("of alone", "of_alone", "%.3f"), ("target", "target", "%.2f"),
                 ("off min-max", ("off_spread", "min", "max"), "%.3f"),
                 ("share when on", "share_when_on", "%.3f")],
    "ceilings": [("setup", "setup", "%s"), ("limit", "limit", "%.2f"),
                 ("throughput/alone", "throughput_of_alone", "%.3f"), ("GPU time", "gpu_time", "%.3f"),
                 ("GPU time alone", "gpu_time_alone", "%.3f"), ("SM MHz", "sm_clock_mhz", "%.0f"),
                 ("SM MHz alone", "alone_sm_clock_mhz", "%.0f")],
    "latency": [("batch", "batch", "%s"), ("tenant", "tenant", "%s"), ("arrival", "arrival", "%s"), ("kernel ms", "batch_kernel_ms", "%.2f"),
                ("alone p99", "alone_p99_ms", "%.3f"), ("native p50/p99", ("native_p50_ms", "native_p99_ms"), "%.3f"),
                ("MPS p50/p99", ("mps_p50_ms", "mps_p99_ms"), "%.3f"),
                ("fracgpu p50/p99/p99.9", ("fracgpu_p50_ms", "fracgpu_p99_ms", "fracgpu_p999_ms"), "%.3f"),
                ("fracgpu-mps p50/p99", ("fracgpu_mps_p50_ms", "fracgpu_mps_p99_ms"), "%.3f"),
                ("HAMi p99", "hami_p99_ms", "%.3f"), ("batch ratio", "batch_ratio", "%.3f"),
                ("fracgpu-mps ratio", "fracgpu_mps_batch_ratio", "%.3f"), ("goal", "meets_goal_by", "%s")],
    "memory": [("check", "check", "%s"), ("expected", "expected", "num"), ("measured", "measured", "num"),
               ("ok", "ok", "%s")],
    "faults": [("fault", "fault", "%s"), ("waiting tenant runs again s", "resume_s", "%.3f"),
               ("broker restart s", "broker_restart_s", "%.2f"), ("other / alone while stopped", "other_of_alone", "%.3f"),
               ("same, first 0.5 s", "other_first_500ms_of_alone", "%.3f")],
}


DICT_COLUMNS = ("off_spread", "ratio_spread", "windows_1s", "windows_100ms")


def cell(row, key, fmt):
    """One table cell: a value; (a, b, ...) = several values joined by "/"; (dict, k, ...) =
    entries of a spread dict joined by "-"; fmt "num" = integers as they are, others %.4g."""
    if isinstance(key, tuple):
        if key[0] in DICT_COLUMNS:
            d = row.get(key[0])
            return "-".join(cell(d, k, fmt) for k in key[1:]) if isinstance(d, dict) else "-"
        return "/".join(cell(row, k, fmt) for k in key)
    v = row.get(key)
    if v is None:
        return "-"
    if isinstance(v, bool) or "%s" in fmt:
        return str(v)
    if fmt == "num":
        return str(v) if isinstance(v, int) or float(v).is_integer() else "%.4g" % v
    try:
        return fmt % v
    except TypeError:
        return str(v)


def skipped_line(row, cols):
    """A skipped row: its identifying columns, then "skipped: why" in the first figure's."""
    out, said = [], False
    for _, k, f in cols:
        if "%s" in f and not isinstance(k, tuple):
            out.append(str(row.get(k) if row.get(k) is not None else "-"))
        else:
            out.append("" if said else "skipped: %s" % row["skipped"])
            said = True
    return out


def table_text(name, rows):
    cols = COLUMNS[name]
    body = [skipped_line(r, cols) if r.get("skipped") else [cell(r, k, f) for _, k, f in cols] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, (h, _, _) in enumerate(cols)]
    lines = ["## %s" % name, "  ".join(h.ljust(w) for (h, _, _), w in zip(cols, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def write(b, machine):
    names = ["results.json", "results.csv", "summary.txt"]
    top = {"schema": SCHEMA, "machine": machine,
           "config": {"quick": b.quick, "budget_s": b.args.budget, "phases": b.args.phases, "gpu": b.pf.kind,
                      "window_s": b.win, "client": b.client, "build": b.pf.build, "hami": b.args.hami or None,
                      "argv": b.args.argv, "modes": b.modes(),
                      "torch": b.torch_ok, "impl": {k: b.wl.impl(k) for k in ("compute", "memory", "train", "decode",
                                                                               "graph", "eager")}},
           "versions": b.versions(), "budget": b.budget.to_json(), "worker_waves": b.pool.waves,
           "started": datetime.datetime.fromtimestamp(b.t0, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "seconds": round(time.time() - b.t0, 1), "series": b.series}
    for t in COLUMNS:
        b.rec.tables.setdefault(t, [])
    doc = b.rec.to_json(os.path.join(b.out, "results.json"), **top)
    paths, why = plots.draw(doc, b.out)
    if why:
        b.rec.note("plots skipped: " + why)
    doc["plots"] = [os.path.basename(p) for p in paths]
    doc = b.rec.to_json(os.path.join(b.out, "results.json"), plots=doc["plots"], **top)
    b.rec.to_csv(os.path.join(b.out, "results.csv"))
    text = ["# fracgpu bench: %s, %s (%s), %.0f s" % (machine.get("gpu"), machine.get("driver"),
                                                       "quick" if b.quick else "full", doc["seconds"])]
    for t in COLUMNS:
        if doc.get(t):
            text.append(table_text(t, doc[t]))
    plan = doc["budget"]["phases"]
    text.append("## phases (budget %.0f s)\n" % doc["budget"]["total_s"] + "\n".join(
        "%-9s %-8s %6.1f s of %5.1f planned  %s" % (
            p["phase"], p["status"], p["seconds"], plan.get(p["phase"], {}).get("planned_s") or 0,
            p["detail"].splitlines()[0] if p["detail"] else "") for p in doc["phases"]))
    text += ["note: " + n for n in doc["notes"]]
    summary = "\n\n".join(text) + "\n"
    with open(os.path.join(b.out, "summary.txt"), "w") as f:
        f.write(summary)
    sys.stdout.write(summary)
    from bench import archive
    archive(b, names + doc["plots"])
    return all(p["status"] != "failed" for p in doc["phases"])
