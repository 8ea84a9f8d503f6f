#!/usr/bin/env python3
"""Result comparison and report of fracgpu's real-GPU checks (tests/gpu/).

  compare_results.py compare NATIVE.out SHIM.out
      Compares the last JSON line of two client outputs: same keys, same strings, ints and
      booleans; floats within a relative difference of 1e-6. The top-level "info" object
      (versions, timings, free memory) is not compared. Exit 0 if equal, 1 if not.

  compare_results.py report --work DIR --shim PATH --summary FILE [--table FILE]
      Reads DIR/runs.tsv written by run_gpu_checks.sh (one line per process run), the
      client outputs and the shim's hook-statistics files, prints the final table and
      writes the summary JSON. Exit 0 only if every check passed.

Standard library only (runs with any python3 >= 3.8).
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys

REL_TOL = 1e-6
IGNORED_TOP_LEVEL = ("info",)

LAUNCH_PREFIXES = ("cuLaunch", "cuGraphLaunch")
ALLOC_NAMES = ("cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemCreate")
ALLOC_PREFIXES = ("cuMemAllocAsync", "cuMemAllocFromPoolAsync")

# What each client's shim run must show in the hook statistics. "launch"/"alloc": the
# sums above > 0; "min": per hook name (a trailing * sums every name with that prefix).
CLIENTS = {
    "cuda_client": {
        "need": ("launch", "alloc"),
        "min": {"cuGraphLaunch*": 10, "cuMemAlloc_v2": 2, "cuGetProcAddress*": 1, "cuInit": 1,
                "cuMemGetInfo_v2": 1},
    },
    "cuda_python": {"need": ("alloc",), "min": {"cuInit": 1}},
    "torch": {"need": ("launch", "alloc"), "min": {}},
    "torch_vmm": {"need": ("launch", "alloc"), "min": {"cuMemCreate": 1, "cuMemMap": 1}},
    # cuda_client --mode launch-rate: empty kernels only, nothing allocated
    "launch_rate": {"need": ("launch",), "min": {}},
    "jax": {"need": ("launch", "alloc"), "min": {}},
    "cupy": {"need": ("launch", "alloc"), "min": {}},
    "triton": {"need": ("launch", "alloc"), "min": {}},
}
CLIENT_ORDER = ["cuda_client", "cuda_python", "torch", "triton", "cupy", "jax", "torch_vmm"]


# ------------------------------------------------------------------ comparison
def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def compare_values(a, b, path="", diffs=None, rel_tol=REL_TOL):
    if diffs is None:
        diffs = []
    where = path or "<top>"
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if not path and key in IGNORED_TOP_LEVEL:
                continue
            sub = "%s.%s" % (path, key) if path else str(key)
            if key not in a:
                diffs.append("%s: only in the second" % sub)
            elif key not in b:
                diffs.append("%s: only in the first" % sub)
            else:
                compare_values(a[key], b[key], sub, diffs, rel_tol)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            diffs.append("%s: length %d vs %d" % (where, len(a), len(b)))
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                compare_values(x, y, "%s[%d]" % (path, i), diffs, rel_tol)
    elif is_number(a) and is_number(b):
        if isinstance(a, int) and isinstance(b, int):
            if a != b:
                diffs.append("%s: %d vs %d" % (where, a, b))
        else:
            fa, fb = float(a), float(b)
            if math.isnan(fa) and math.isnan(fb):
                return diffs
            if fa == fb:
                return diffs
            if math.isinf(fa) or math.isinf(fb) or math.isnan(fa) or math.isnan(fb):
                diffs.append("%s: %r vs %r" % (where, a, b))
                return diffs
            rel = abs(fa - fb) / max(abs(fa), abs(fb))
            if rel > rel_tol:
                diffs.append("%s: %r vs %r (relative difference %.3g)" % (where, a, b, rel))
    else:
        if type(a) is not type(b) or a != b:
            diffs.append("%s: %r vs %r" % (where, a, b))
    return diffs


def last_json_line(path):
    """(object, error) from the last non-empty line of a file."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    except OSError as exc:
        return None, "cannot read %s: %s" % (path, exc)
    if not lines:
        return None, "no output"
    try:
        obj = json.loads(lines[-1])
    except ValueError as exc:
        return None, "last line is not JSON (%s): %.120s" % (exc, lines[-1])
    if not isinstance(obj, dict):
        return None, "last line is not a JSON object"
    return obj, None


def cmd_compare(args):
    a, ea = last_json_line(args.first)
    b, eb = last_json_line(args.second)
    if ea or eb:
        print("cannot compare: %s" % "; ".join(e for e in (ea, eb) if e))
        return 1
    diffs = compare_values(a, b)
    if diffs:
        print("DIFFERENT (%d):" % len(diffs))
        for d in diffs[:50]:
            print("  " + d)
        return 1
    print("same")
    return 0


# ------------------------------------------------------------------ hook statistics
def load_stats(stats_dir):
    """Sums every stats file of one run: hooks, proc_address, driver paths."""
    agg = {"files": 0, "bad_files": [], "hooks": {}, "proc_address": {}, "drivers": []}
    if not stats_dir or not os.path.isdir(stats_dir):
        return agg
    for path in sorted(glob.glob(os.path.join(stats_dir, "*.json"))):
        try:
            with open(path, "r", encoding="utf-8") as f:
                obj = json.load(f)
            hooks = obj.get("hooks", {})
            if not isinstance(hooks, dict):
                raise ValueError("hooks is not an object")
        except (OSError, ValueError) as exc:
            agg["bad_files"].append("%s: %s" % (os.path.basename(path), exc))
            continue
        agg["files"] += 1
        for name, count in hooks.items():
            if is_number(count):
                agg["hooks"][name] = agg["hooks"].get(name, 0) + int(count)
        pa = obj.get("proc_address", {})
        if isinstance(pa, dict):
            for key, count in pa.items():
                if is_number(count):
                    agg["proc_address"][key] = agg["proc_address"].get(key, 0) + int(count)
        drv = obj.get("driver")
        if isinstance(drv, str) and drv not in agg["drivers"]:
            agg["drivers"].append(drv)
    return agg


def hook_sum(hooks, pattern):
    if pattern.endswith("*"):
        prefix = pattern[:-1]
        return sum(v for k, v in hooks.items() if k.startswith(prefix))
    return hooks.get(pattern, 0)


def launch_count(hooks):
    return sum(v for k, v in hooks.items() if k.startswith(LAUNCH_PREFIXES))


def alloc_count(hooks):
    return sum(v for k, v in hooks.items() if k in ALLOC_NAMES or k.startswith(ALLOC_PREFIXES))


def same_file(a, b):
    try:
        return os.path.realpath(a) == os.path.realpath(b) or os.path.samefile(a, b)
    except OSError:
        return False


def check_via_shim(client, stats, shim_path, min_launches=0):
    """(passed, short text, problems)."""
    spec = CLIENTS.get(client, {"need": ("launch", "alloc"), "min": {}})
    hooks = stats["hooks"]
    problems = []
    if stats["files"] == 0:
        problems.append("no hook-stats file written")
    for bad in stats["bad_files"]:
        problems.append("unreadable stats file " + bad)
    nl, na = launch_count(hooks), alloc_count(hooks)
    if "launch" in spec["need"] and nl <= 0:
        problems.append("no launch hook called")
    if min_launches and nl < min_launches:
        problems.append("launch hooks %d < expected %d" % (nl, min_launches))
    if "alloc" in spec["need"] and na <= 0:
        problems.append("no allocation hook called")
    for pattern, minimum in spec.get("min", {}).items():
        got = hook_sum(hooks, pattern)
        if got < minimum:
            problems.append("%s called %d time(s), expected >= %d" % (pattern, got, minimum))
    for drv in stats["drivers"]:
        if not drv:
            problems.append("stats name no real driver")
        elif shim_path and same_file(drv, shim_path):
            problems.append("real driver is the shim itself: " + drv)
    text = "launch=%d alloc=%d hooks=%d" % (nl, na, len(hooks))
    if stats["files"] != 1:
        text += " files=%d" % stats["files"]
    return not problems, text, problems


# ------------------------------------------------------------------ report
def read_runs(work):
    runs = []
    path = os.path.join(work, "runs.tsv")
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 9:
                    continue
                client, variant, idx, rc, elapsed, limit, out, err, stats = parts[:9]
                try:
                    rc_i = int(rc)
                except ValueError:
                    rc_i = -1
                try:
                    elapsed_f = float(elapsed)
                except ValueError:
                    elapsed_f = float("nan")
                runs.append({"client": client, "variant": variant, "idx": idx, "rc": rc_i,
                             "elapsed_s": elapsed_f, "limit_s": limit, "out": out, "err": err,
                             "stats_dir": stats})
    except OSError:
        pass
    return runs


def tail(path, n=8, width=300):
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            lines = [ln.rstrip()[:width] for ln in f.read().splitlines() if ln.strip()]
        return lines[-n:]
    except OSError:
        return []


def count_shim_log_lines(path):
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return sum(1 for ln in f if "fracgpu" in ln.lower())
    except OSError:
        return 0


def describe_run(run):
    """Parses one run: ok flag, parsed result, reason."""
    if run is None:
        return {"ran": False, "ok": False, "result": None, "reason": "not run"}
    if run["rc"] == 125 and run["variant"] != "build":
        return {"ran": False, "ok": False, "result": None, "reason": "skipped (%s)" % (
            "; ".join(tail(run["err"], 1)) or "no time left")}
    obj, err = last_json_line(run["out"])
    reason = None
    if run["rc"] in (124, 137):
        reason = "timed out after %ss" % run["limit_s"]
    elif run["rc"] != 0:
        reason = "exit status %d" % run["rc"]
    if obj is None:
        reason = (reason + "; " if reason else "") + err
    elif obj.get("ok") is not True:
        reason = (reason + "; " if reason else "") + "client says not ok" + (
            ": " + str(obj.get("error"))[:300] if obj.get("error") else "")
    return {"ran": True, "ok": reason is None, "result": obj, "reason": reason}


def median(values):
    return statistics.median(values) if values else None


def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


def cmd_report(args):
    work = args.work
    runs = read_runs(work)
    summary = {"clients": {}, "launch_rate": {}, "proc_address_torch": None, "failures": []}
    lines = []
    all_ok = True

    # build / environment lines recorded by the runner
    build = next((r for r in runs if r["client"] == "build"), None)
    if build is not None:
        summary["build"] = {"rc": build["rc"], "elapsed_s": build["elapsed_s"]}
        if build["rc"] != 0:
            all_ok = False
            summary["failures"].append("build of cuda_client failed (rc=%d)" % build["rc"])
            lines.append("BUILD FAILED (rc=%d):" % build["rc"])
            lines.extend("    " + t for t in tail(build["err"], 12))

    clients_run = [c for c in CLIENT_ORDER if any(r["client"] == c for r in runs)]
    clients_run += sorted({r["client"] for r in runs} - set(CLIENT_ORDER) - {"build", "launch_rate"})
    rows = []
    for client in clients_run:
        native_run = next((r for r in runs if r["client"] == client and r["variant"] == "native"), None)
        shim_run = next((r for r in runs if r["client"] == client and r["variant"] == "shim"), None)
        native = describe_run(native_run)
        shim = describe_run(shim_run)
        if native["result"] is not None and shim["result"] is not None:
            diffs = compare_values(native["result"], shim["result"])
            same = not diffs and native["ok"] and shim["ok"]
            same_text = "yes" if same else "NO"
        else:
            diffs, same, same_text = ["no result to compare"], False, "-"
        stats = load_stats(shim_run["stats_dir"]) if shim_run else load_stats(None)
        if shim_run and shim["ran"]:
            via_ok, via_text, via_problems = check_via_shim(client, stats, args.shim)
        else:
            via_ok, via_text, via_problems = False, "-", ["shim run did not run"]
        passed = native["ok"] and shim["ok"] and same and via_ok
        all_ok = all_ok and passed
        problems = []
        if not native["ok"]:
            problems.append("native: " + str(native["reason"]))
        if not shim["ok"]:
            problems.append("shim: " + str(shim["reason"]))
        if native["result"] is not None and shim["result"] is not None and diffs:
            problems.append("results differ: " + "; ".join(diffs[:5]))
        if shim["ran"] and not via_ok:
            problems.append("via shim: " + "; ".join(via_problems))
        def state(d):
            return "ok" if d["ok"] else ("FAIL" if d["ran"] else "skip")

        rows.append((client, state(native), state(shim),
                     same_text, ("yes " if via_ok else "NO ") + "(" + via_text + ")"))
        entry = {
            "passed": passed,
            "native_ok": native["ok"], "shim_ok": shim["ok"], "same_result": same, "via_shim": via_ok,
            "native_elapsed_s": native_run["elapsed_s"] if native_run else None,
            "shim_elapsed_s": shim_run["elapsed_s"] if shim_run else None,
            "problems": problems,
            "hooks": stats["hooks"], "proc_address": stats["proc_address"], "drivers": stats["drivers"],
            "stats_files": stats["files"],
            "shim_stderr_fracgpu_lines": count_shim_log_lines(shim_run["err"]) if shim_run else 0,
            "native_result": native["result"], "shim_result": shim["result"],
        }
        if problems:
            native_tail = tail(native_run["err"], 6) if native_run and native["ran"] and not native["ok"] else []
            shim_tail = tail(shim_run["err"], 6) if shim_run and shim["ran"] else []
            entry["native_stderr_tail"] = native_tail
            entry["shim_stderr_tail"] = [] if shim_tail == native_tail else shim_tail
            summary["failures"].append("%s: %s" % (client, " | ".join(problems)))
        summary["clients"][client] = entry
        if client == "torch" and shim_run:
            summary["proc_address_torch"] = dict(stats["proc_address"], hooks_seen=len(stats["hooks"]))

    # launch rate
    lr_runs = [r for r in runs if r["client"] == "launch_rate"]
    lr_line = "launch-rate: not run"
    if lr_runs:
        n = args.launch_n
        per = {"native": [], "shim": []}
        pairs = {}
        lr_problems = []
        for r in lr_runs:
            d = describe_run(r)
            if not d["ok"]:
                lr_problems.append("%s #%s: %s" % (r["variant"], r["idx"], d["reason"]))
                continue
            ns = d["result"].get("ns_per_launch")
            if not is_number(ns):
                lr_problems.append("%s #%s: no ns_per_launch" % (r["variant"], r["idx"]))
                continue
            if r["variant"] == "shim":
                st = load_stats(r["stats_dir"])
                want = 5 * int(d["result"].get("n", n) or 0)
                ok_via, via_text, via_problems = check_via_shim("launch_rate", st, args.shim, min_launches=want)
                if not ok_via:
                    lr_problems.append("shim #%s: %s" % (r["idx"], "; ".join(via_problems)))
            per.setdefault(r["variant"], []).append(float(ns))
            pairs.setdefault(r["idx"], {})[r["variant"]] = float(ns)
        planned = args.launch_pairs
        for variant in ("native", "shim"):
            if len(per[variant]) < planned:
                lr_problems.append("%s: %d of %d runs succeeded" % (variant, len(per[variant]), planned))
        med_n, med_s = median(per["native"]), median(per["shim"])
        ratio = med_s / med_n if med_n and med_s else None
        paired = [p["shim"] / p["native"] for p in pairs.values() if "shim" in p and "native" in p and p["native"] > 0]
        paired_med = median(paired)
        lr_ok = not lr_problems
        all_ok = all_ok and lr_ok
        summary["launch_rate"] = {
            "passed": lr_ok, "n": n, "runs_each_planned": planned,
            "native_ns": per["native"], "shim_ns": per["shim"],
            "native_median_ns": med_n, "shim_median_ns": med_s,
            "ratio_shim_over_native": ratio, "paired_ratio_median": paired_med,
            "overhead_percent": (ratio - 1.0) * 100.0 if ratio else None,
            "problems": lr_problems,
        }
        if lr_problems:
            summary["failures"].append("launch-rate: " + " | ".join(lr_problems))
        lr_line = ("launch-rate (%d empty launches, median of %d/%d runs): native %s ns, shim %s ns, "
                   "ratio %s (paired median %s) -> %s" % (
                       n, len(per["native"]), len(per["shim"]), fmt(med_n), fmt(med_s),
                       fmt(ratio, "%.4f"), fmt(paired_med, "%.4f"), "ok" if lr_ok else "FAIL"))

    # table
    header = ("client", "native ok", "shim ok", "same result", "via shim (hooks seen)")
    widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
    sep = "-+-".join("-" * w for w in widths)
    table = [" | ".join(str(header[i]).ljust(widths[i]) for i in range(len(header))), sep]
    for row in rows:
        table.append(" | ".join(str(row[i]).ljust(widths[i]) for i in range(len(row))))
    out = []
    out.extend(lines)
    out.extend(table)
    out.append(lr_line)
    pa = summary["proc_address_torch"]
    if pa is not None:
        out.append("proc_address (torch, shim run): by_pointer=%s by_name=%s passed_through=%s, %s hooks seen" % (
            pa.get("by_pointer", "-"), pa.get("by_name", "-"), pa.get("passed_through", "-"), pa.get("hooks_seen")))
    if summary["failures"]:
        out.append("failures:")
        for f in summary["failures"]:
            out.append("  - " + f[:600])
        for client, entry in summary["clients"].items():
            for key in ("native_stderr_tail", "shim_stderr_tail"):
                if entry.get(key):
                    out.append("  %s %s:" % (client, key.replace("_", " ")))
                    out.extend("      " + t for t in entry[key])
    summary["passed"] = bool(all_ok and rows)
    if not rows:
        summary["failures"].append("no client ran")
    out.append("RESULT: %s" % ("PASS" if summary["passed"] else "FAIL"))
    text = "\n".join(out)
    print(text)
    summary["table"] = table + [lr_line]
    if args.env:
        try:
            with open(args.env, "r", encoding="utf-8", errors="replace") as f:
                summary["environment"] = [ln.rstrip() for ln in f if ln.strip()][:200]
        except OSError as exc:
            summary["environment"] = ["cannot read %s: %s" % (args.env, exc)]
    try:
        with open(args.summary, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1, sort_keys=True, default=str)
            f.write("\n")
        if args.table:
            with open(args.table, "w", encoding="utf-8") as f:
                f.write(text + "\n")
    except OSError as exc:
        print("cannot write summary: %s" % exc, file=sys.stderr)
        return 1
    return 0 if summary["passed"] else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd")
    c = sub.add_parser("compare", help="compare two client outputs")
    c.add_argument("first")
    c.add_argument("second")
    r = sub.add_parser("report", help="final table and summary of a run_gpu_checks.sh run")
    r.add_argument("--work", required=True)
    r.add_argument("--shim", default="")
    r.add_argument("--summary", required=True)
    r.add_argument("--table", default="")
    r.add_argument("--env", default="", help="text file of environment facts to embed")
    r.add_argument("--launch-n", type=int, default=200000)
    r.add_argument("--launch-pairs", type=int, default=7)
    args = p.parse_args(argv)
    if args.cmd == "compare":
        return cmd_compare(args)
    if args.cmd == "report":
        return cmd_report(args)
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
