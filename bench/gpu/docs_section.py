#!/usr/bin/env python3
"""The "latest run" section of docs/benchmarks.md, generated from a run's results.json (or
several partial runs' files, merged: each phase from the first file where it ran), so that the
page shows exactly what the suite measured: the command, date, machine, versions, the time
budget per phase, every phase's table with its spread, the plots, and a "where fracgpu loses"
list derived from the rows (every row where a peer beats fracgpu).

    docs_section.py RESULTS.json [MORE.json ...] [--plots-dir REL] [--out FILE]
    docs_section.py RESULTS.json [...] --plots-dir REL --update-doc docs/benchmarks.md

--update-doc replaces the text between <!-- bench:latest:begin --> and <!-- bench:latest:end -->
(inserted, with the section, before the first "## The benchmark suite" heading, else before
the first "## " heading, when the markers are missing) and leaves the rest of the page as it
is; the output depends on the results alone, so running it again changes nothing.
Standard library only; never on a measured path."""
import argparse
import json
import os
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

import losses  # noqa: E402
from tables import TABLES, md_table  # noqa: E402

BEGIN, END = "<!-- bench:latest:begin -->", "<!-- bench:latest:end -->"
WAY_NAMES = {"native": "native", "frac": "fracgpu", "fmps": "fracgpu-mps", "mps": "MPS", "hami": "HAMi-core"}
PHASE_TABLES = ["overhead", "shares", "conserve", "ceilings", "latency", "memory", "faults"]
PLOT_TITLES = {"shares.png": "each tenant's share over time (100 ms windows, targets dashed)",
               "latency_cdf.png": "request-latency CDF per batch kind and arrival pattern",
               "overhead.png": "overhead: fracgpu / native per metric (median of paired ratios, min-max)"}


def load(paths):
    docs = []
    for p in paths:
        with open(p) as f:
            docs.append(json.load(f))
    return docs


def merge(docs):
    """One document: each phase's rows from the first file where that phase ran ok (else the
    first where it ran at all), machine and versions from the first, every file's command."""
    out = {"machine": docs[0].get("machine", {}), "versions": docs[0].get("versions") or {},
           "started": docs[0].get("started"), "runs": [], "notes": [], "plots": [], "phases": []}
    for d in docs:
        out["runs"].append({"argv": (d.get("config") or {}).get("argv") or reconstruct_argv(d),
                            "seconds": d.get("seconds"), "started": d.get("started"), "budget": d.get("budget"),
                            "phases": d.get("phases", []), "config": d.get("config", {}),
                            "worker_waves": d.get("worker_waves")})
        for n in d.get("notes", []):
            n = "call %d: %s" % (len(out["runs"]), n) if len(docs) > 1 else n
            if n not in out["notes"]:
                out["notes"].append(n)
    for ph in PHASE_TABLES:
        src = next((d for d in docs if _status(d, ph) == "ok"), None) or next(
            (d for d in docs if _status(d, ph) not in (None, "skipped")), None)
        out[ph] = (src or {}).get(ph, [])
        entry = {"phase": ph, "status": _status(src, ph) if src else "not run", "seconds": None}
        if src:
            entry.update(next(p for p in src["phases"] if p["phase"] == ph))
            for plot in src.get("plots", []):
                if plot not in out["plots"] and _plot_phase(plot) == ph:
                    out["plots"].append(plot)
            out.setdefault("alone", src.get("alone", []))
        out["phases"].append(entry)
    return out


def _status(doc, phase):
    for p in (doc or {}).get("phases", []):
        if p["phase"] == phase:
            return p["status"]
    return None


def _plot_phase(name):
    return {"shares.png": "shares", "latency_cdf.png": "latency", "overhead.png": "overhead"}.get(name)


def reconstruct_argv(d):
    """Runs from before config.argv was recorded: the command their configuration implies."""
    c = d.get("config", {})
    argv = ["bench/gpu/run.sh", "--build", "devrun", "--out", "$OUT"]
    if c.get("quick"):
        argv.append("--quick")
    if c.get("budget_s"):
        argv += ["--budget", "%g" % c["budget_s"]]
    if c.get("hami"):
        argv += ["--hami", c["hami"]]
    phases = c.get("phases") or []
    if phases and len(phases) < 7:
        argv += ["--only", " ".join(phases)]
    return argv


# ---------------------------------------------------------------- the section
def section(doc, plots_dir=None):
    m = doc["machine"]
    day = (doc.get("started") or "")[:10] or "undated"
    out = [BEGIN, "## The benchmark suite (`bench/gpu/run.sh`), latest run: %s, %s" % (m.get("gpu") or "?", day), "",
           "Generated from the run's `results.json` by `bench/gpu/docs_section.py` (the next run replaces this "
           "section; edit the generator, not the text).", ""]
    out += command_lines(doc) + [""] + machine_lines(doc) + [""] + budget_lines(doc) + [""]
    for ph in PHASE_TABLES:
        out += phase_block(doc, ph)
    out += plot_lines(doc, plots_dir)
    out += ["### Where fracgpu loses", "", "Every row where a peer beats fracgpu (shares: by more than %.1f points "
            "of the worst tenant's error or %.2f of efficiency), and where fracgpu wins at the price of its batch's "
            "throughput." % (losses.SHARE_POINTS * 100, losses.EFFICIENCY), ""] + (
        losses.bullets(doc) or ["- nothing in this run: no peer beat fracgpu on any row"]) + [""]
    if doc["notes"]:
        out += ["Notes of the run: " + "; ".join(doc["notes"]) + ".", ""]
    out.append(END)
    return "\n".join(out) + "\n"


def shell_words(argv):
    """argv as a shell command line: quoted where needed (an --only list), $VARIABLES left bare."""
    return " ".join(a if a.startswith("$") and a[1:].replace("_", "").isalnum() else shlex.quote(a) for a in argv)


def command_lines(doc):
    runs = doc["runs"]
    head = "**Command** (one call):" if len(runs) == 1 else "**Commands** (%d calls, merged: each phase from " \
                                                             "the call where it ran):" % len(runs)
    lines = [head, ""]
    for r in runs:
        secs = " # %.0f s" % r["seconds"] if r.get("seconds") is not None else ""
        lines.append("    " + shell_words(r["argv"]) + secs)
    return lines


def machine_lines(doc):
    m, v = doc["machine"], doc["versions"]
    c0, c1 = m.get("clocks") or {}, m.get("clocks_end") or {}
    clocks = "SM clock %s MHz at the start, %s MHz at the end (max %s), memory %s MHz" % (
        _n(c0.get("sm_mhz")), _n(c1.get("sm_mhz")), _n(c0.get("sm_max_mhz")), _n(c0.get("mem_mhz"))) if c0 else \
        "clocks: not reported"
    lines = ["**Machine:** %s (%s MiB), driver %s, CUDA %s, compute mode %s; %s; power limit %s W." % (
        m.get("gpu"), _n(m.get("memory_total_mib")), m.get("driver"), m.get("cuda") or "-",
        m.get("compute_mode") or "-", clocks, _n(m.get("power_limit_w")))]
    cfg = doc["runs"][0].get("config", {})
    ver = ["fracgpu %s" % (v.get("fracgpu_repo_commit") or "-")]
    if v.get("fracgpu_packed"):
        ver.append("packed %s" % v["fracgpu_packed"])
    if v.get("bench_commit"):
        ver.append("suite %s" % v["bench_commit"])
    ver.append("PyTorch %s" % (v.get("torch") or ("yes" if cfg.get("torch") else "no")))
    if v.get("python"):
        ver.append("Python %s" % v["python"])
    ways = cfg.get("modes")
    if ways:
        ver.append("ways compared: %s" % ", ".join(WAY_NAMES.get(w, w) for w in ways))
    ver.append("HAMi-core: %s" % (v.get("hami") or cfg.get("hami") or "not given"))
    lines.append("**Versions:** " + "; ".join(ver) + ".")
    return lines


def budget_lines(doc):
    rows, several = [], len(doc["runs"]) > 1
    for i, r in enumerate(doc["runs"]):
        plan = (r.get("budget") or {}).get("phases", {})
        for p in r["phases"]:
            if several and p["status"] == "skipped":
                continue  # another call ran it
            b = plan.get(p["phase"], {})
            rows.append(([str(i + 1)] if several else []) + [
                         p["phase"], p["status"], _f(b.get("planned_s"), "%.0f"), _f(b.get("allotted_s"), "%.0f"),
                         _f(p.get("seconds"), "%.1f"),
                         "%s of %s (scale >= %s)" % (b["rounds_shortened"], b["rounds"], _f(b.get("scale_min"), "%.2f"))
                         if b.get("rounds") else "-"])
    total = sum(p.get("seconds") or 0 for r in doc["runs"] for p in r["phases"])
    budgets = [r.get("budget") for r in doc["runs"] if r.get("budget")]
    head = "**Time budget**: %s; the phases took %.0f s together." % (
        ", ".join("%.0f s" % b["total_s"] for b in budgets) if budgets else "not recorded (the run predates the plan)",
        total)
    return [head, ""] + md_table((["call"] if several else []) + ["phase", "status", "planned s", "allotted s",
                                                                  "actual s", "rounds shortened"], rows)


def phase_block(doc, ph):
    rows = doc.get(ph) or []
    title = TABLES[ph]["title"]
    status = next((p["status"] for p in doc["phases"] if p["phase"] == ph), "not run")
    if not rows:
        return ["### %s" % title, "", "Not in this run (%s)." % status, ""]
    return ["### %s" % title, ""] + TABLES[ph]["render"](rows, doc) + [""]


def plot_lines(doc, plots_dir):
    if not doc["plots"]:
        return []
    out = ["### Plots", ""]
    for p in doc["plots"]:
        path = "%s/%s" % (plots_dir.rstrip("/"), p) if plots_dir else p
        out += ["![%s](%s)" % (PLOT_TITLES.get(p, p), path), ""]
    return out


def _n(v):
    if v is None:
        return "-"
    return "%d" % v if float(v).is_integer() else "%g" % v


def _f(v, spec):
    return "-" if v is None else spec % v


# ---------------------------------------------------------------- the page
def update_doc(path, text):
    """Replaces the marked section of `path` with `text` (markers included); inserts it when the
    markers are missing. Returns whether the file changed."""
    with open(path) as f:
        page = f.read()
    if BEGIN in page and END in page and page.index(BEGIN) < page.index(END):
        a, z = page.index(BEGIN), page.index(END) + len(END)
        if page[z:z + 1] == "\n":
            z += 1
        new = page[:a] + text + page[z:]
    else:
        lines = page.splitlines(keepends=True)
        at = next((i for i, l in enumerate(lines) if l.startswith("## The benchmark suite")), None)
        if at is None:
            at = next((i for i, l in enumerate(lines) if l.startswith("## ")), len(lines))
        new = "".join(lines[:at]) + text + "\n" + "".join(lines[at:])
    if new != page:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(new)
        os.replace(tmp, path)
    return new != page


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="results.json of a run (several: partial runs, merged)")
    ap.add_argument("--plots-dir", default="", help="where the page finds the run's PNGs, relative to the page")
    ap.add_argument("--out", default="", help="write the section here (default: stdout)")
    ap.add_argument("--update-doc", default="", help="replace the marked section of this page")
    args = ap.parse_args(argv)
    text = section(merge(load(args.results)), args.plots_dir or None)
    if args.update_doc:
        changed = update_doc(args.update_doc, text)
        print("%s: %s" % (args.update_doc, "updated" if changed else "unchanged"))
    elif args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
