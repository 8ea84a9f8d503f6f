#!/usr/bin/env python3
"""fracgpu compute benchmark: the report of run_compute_checks.sh (tables and PASS/FAIL).

Reads the per-tenant JSON results that run_compute_checks.sh left in DIR (PHASE.TAG.json from
matmul_tenant.py / latency_tenant.py, p9.VARIANT.I.json from `cuda_client --mode launch-rate`,
runs.tsv with every process's exit status) and writes DIR/summary.md (printed too) and
DIR/summary.json. Shares are computed over the window all tenants of a phase were measuring
at once (from each tenant's samples, interpolated), not over each tenant's own window; the
batch tenant of a latency phase is measured over the latency tenant's window. Criteria
(issue "Compute quotas", items 5 and 6): fracgpu 70/30 and 50/30/20 shares within 3 points
of the weights and their sum >= 0.95 of one tenant alone; a lone --compute 30 tenant >= 0.95
of alone; a --compute-limit 30 tenant at 0.30 +- 0.03 of alone; the high-priority latency
tenant's p99 <= alone p99 + one 8192^2 kernel time (from the alone run) + 0.3 ms and strictly
below native and MPS p99, with the batch tenant keeping >= 0.80 of its native-sharing
throughput; the launch rate under `fracgpu run` within 1% of the shim without a broker
(ratio of medians <= 1.01). Native and MPS rows are baselines (no criterion).
Exit status: 0 when every criterion passed, 1 otherwise. Needs only the standard library.
"""
import argparse
import csv
import glob
import json
import os
import statistics
import sys


def load(d, name):
    try:
        with open(os.path.join(d, name), "r", encoding="utf-8") as f:
            obj = json.loads(f.read().strip().splitlines()[-1])
        return obj if isinstance(obj, dict) else None
    except (OSError, ValueError, IndexError):
        return None


def count_at(samples, t):
    if not samples:
        return 0.0
    if t <= samples[0][0]:
        return float(samples[0][1])
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        if t <= t1:
            return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)
    return float(samples[-1][1])


def tflops_between(r, a, b):
    """TFLOP/s of matmul result r between absolute times a < b (None if r has no samples)."""
    if not r or not r.get("ok") or not r.get("samples") or b <= a:
        return None
    s, t0 = r["samples"], r["t_start"]
    done = count_at(s, b - t0) - count_at(s, a - t0)
    return done * r["flop_per_matmul"] / (b - a) / 1e12


def common(results):
    """(TFLOP/s of each over their common window, window seconds); Nones if any failed."""
    if not results or any(not r or not r.get("ok") for r in results):
        return [None] * len(results), None
    a = max(r["t_start"] for r in results)
    b = min(r["t_end"] for r in results)
    if b - a <= 0:
        return [None] * len(results), None
    return [tflops_between(r, a, b) for r in results], b - a


def fmt(v, spec="%.1f", none="-"):
    return none if v is None else spec % v


class Report(object):
    def __init__(self, d, seconds, only=""):
        self.d, self.seconds = d, seconds
        self.only = set(only.split())
        self.rows, self.lat_rows, self.criteria, self.notes = [], [], [], []
        self.alone = load(d, "p1.alone.json")
        self.alone_tf = self.alone.get("tflops") if self.alone and self.alone.get("ok") else None
        self.kernel_ms = self.alone.get("ms_per_matmul") if self.alone_tf else None

    def crit(self, name, expected, measured, passed):
        """name starts with its phase id; phases left out by --only give SKIP, not FAIL."""
        phase = name.split()[0]
        result = "PASS" if passed else "FAIL"
        if self.only and phase not in self.only:
            result = "SKIP"
        self.criteria.append({"criterion": name, "expected": expected, "measured": measured, "result": result})

    def of_alone(self, v):
        return v / self.alone_tf if v is not None and self.alone_tf else None

    def share_phase(self, phase, setup, tenants, judged):
        """tenants: [(tag, weight or None)]. Adds rows; judged phases add criteria."""
        results = [load(self.d, "%s.%s.json" % (phase, tag)) for tag, _ in tenants]
        tfs, window = common(results)
        ok = all(v is not None for v in tfs)
        total = sum(tfs) if ok else None
        wsum = float(sum(w for _, w in tenants if w)) or None
        shares_ok = True
        for (tag, w), r, v in zip(tenants, results, tfs):
            share = v / total if ok and total and len(tenants) > 1 else None
            target = w / wsum if w and wsum and len(tenants) > 1 else None
            if target is not None and (share is None or abs(share - target) > 0.03):
                shares_ok = False
            per = r.get("per_window_tflops") if r else None
            self.rows.append({"phase": phase, "setup": setup, "tenant": tag, "tflops": v, "share": share,
                              "target": target, "of_alone": self.of_alone(v), "window_s": window,
                              "per_second": per, "error": (r or {}).get("error", None if r else "no result")})
        if len(tenants) > 1:
            self.rows.append({"phase": phase, "setup": setup, "tenant": "sum", "tflops": total, "share": None,
                              "target": None, "of_alone": self.of_alone(total), "window_s": window})
        if judged:
            shown = " / ".join(fmt(v / total * 100 if ok and total else None, "%.1f") for v in tfs)
            want = " / ".join("%d" % w for _, w in tenants)
            self.crit("%s shares (%s)" % (phase, setup), "%s, each +-3 points" % want, shown, ok and shares_ok)
            eff = self.of_alone(total)
            self.crit("%s sum / alone" % phase, ">= 0.95", fmt(eff, "%.3f"), eff is not None and eff >= 0.95)
        return tfs

    def latency_phase(self, phase, setup):
        lat = load(self.d, "%s.lat.json" % phase)
        batch = load(self.d, "%s.batch.json" % phase)
        bt = None
        if lat and lat.get("ok") and batch and batch.get("ok"):
            bt = tflops_between(batch, lat["t_start"], min(lat["t_end"], batch["t_end"]))
            if batch["t_end"] < lat["t_end"] - 0.05:
                self.notes.append("%s: the batch tenant stopped %.2f s before the latency tenant was done" % (
                    phase, lat["t_end"] - batch["t_end"]))
        good = bool(lat and lat.get("ok"))
        row = {"phase": phase, "setup": setup, "p50_ms": lat.get("p50_ms") if good else None,
               "p99_ms": lat.get("p99_ms") if good else None, "max_ms": lat.get("max_ms") if good else None,
               "requests": lat.get("requests") if lat else None, "batch_tflops": bt,
               "error": (lat or {}).get("error", None if lat else "no result")}
        self.lat_rows.append(row)
        return row

    def launch(self):
        runs = {}
        for path in sorted(glob.glob(os.path.join(self.d, "p9.*.*.json"))):
            parts = os.path.basename(path).split(".")
            if len(parts) != 4 or not parts[2].isdigit():
                continue
            variant, idx = parts[1], parts[2]
            r = load(self.d, os.path.basename(path))
            if r and r.get("ok") and r.get("ns_per_launch"):
                runs.setdefault(variant, {})[int(idx)] = float(r["ns_per_launch"])
        med = {v: statistics.median(x.values()) for v, x in runs.items() if x}
        out = {"runs": {v: [x[i] for i in sorted(x)] for v, x in runs.items()}, "median_ns": med}
        a, b = runs.get("frac", {}), runs.get("preload", {})
        pairs = [a[i] / b[i] for i in sorted(set(a) & set(b))]
        ratio = med["frac"] / med["preload"] if "frac" in med and "preload" in med else None
        out["ratio_frac_over_preload"] = ratio
        out["median_paired_ratio"] = statistics.median(pairs) if pairs else None
        if "native" in med and "preload" in med:
            out["ratio_preload_over_native"] = med["preload"] / med["native"]
        enough = len(a) >= 5 and len(b) >= 5
        self.crit("p9 launch rate, fracgpu run / LD_PRELOAD without broker", "ratio of medians <= 1.01 (>= 5 runs each)",
                  "%s (paired %s; %d/%d runs)" % (fmt(ratio, "%.4f"), fmt(out["median_paired_ratio"], "%.4f"),
                                                    len(a), len(b)),
                  ratio is not None and ratio <= 1.01 and enough)
        return out

    def build(self):
        self.share_phase("p1", "native, alone", [("alone", None)], False)
        self.share_phase("p2", "native time slicing", [("a", None), ("b", None)], False)
        self.share_phase("p3", "MPS 70% / 30%", [("a70", 70), ("b30", 30)], False)
        self.share_phase("p3s", "MPS 30%, alone", [("s30", None)], False)
        self.share_phase("p4", "fracgpu --compute 70 / 30", [("a70", 70), ("b30", 30)], True)
        self.share_phase("p5", "fracgpu --compute 50 / 30 / 20", [("a50", 50), ("b30", 30), ("c20", 20)], True)
        (lone,) = self.share_phase("p6", "fracgpu --compute 30, alone", [("s30", None)], False)
        frac = self.of_alone(lone)
        self.crit("p6 lone --compute 30 / alone", ">= 0.95", fmt(frac, "%.3f"), frac is not None and frac >= 0.95)
        (lim,) = self.share_phase("p7", "fracgpu --compute-limit 30, alone", [("lim30", None)], False)
        frac = self.of_alone(lim)
        self.crit("p7 --compute-limit 30 / alone", "0.30 +- 0.03", fmt(frac, "%.3f"),
                  frac is not None and abs(frac - 0.30) <= 0.03)
        self.share_phase("p10", "native, alone again (drift)", [("alone", None)], False)

        alone = self.latency_phase("p8a", "latency tenant alone")
        native = self.latency_phase("p8b", "+ batch, native time slicing")
        mps = self.latency_phase("p8c", "+ batch, MPS (100% / 100%)")
        fr = self.latency_phase("p8d", "+ batch, fracgpu (latency --priority high)")
        p99 = fr["p99_ms"]
        bound = alone["p99_ms"] + self.kernel_ms + 0.3 if alone["p99_ms"] is not None and self.kernel_ms else None
        size = (self.alone or {}).get("size", 8192)
        self.crit("p8d p99 <= alone p99 + one %dx%d kernel + 0.3 ms" % (size, size),
                  "<= %s ms (kernel %s ms)" % (fmt(bound, "%.3f"), fmt(self.kernel_ms, "%.3f")),
                  fmt(p99, "%.3f ms"), p99 is not None and bound is not None and p99 <= bound)
        for other, label in ((native, "native"), (mps, "MPS")):
            self.crit("p8d p99 < %s p99" % label, "< %s ms" % fmt(other["p99_ms"], "%.3f"), fmt(p99, "%.3f ms"),
                      p99 is not None and other["p99_ms"] is not None and p99 < other["p99_ms"])
        bt, bn = fr["batch_tflops"], native["batch_tflops"]
        self.crit("p8d batch TFLOP/s >= 0.80 x native sharing", ">= %s" % fmt(0.8 * bn if bn else None),
                  "%s (%s)" % (fmt(bt), fmt(bt / bn if bt and bn else None, "%.3f")),
                  bt is not None and bn is not None and bt >= 0.8 * bn)
        self.launch_result = self.launch()
        mps = load(self.d, "mps.json")
        if mps is None or not mps.get("started") or not mps.get("server_log"):
            self.notes.append("MPS: %s; the MPS rows may be native figures" % (
                "no mps.json" if mps is None else "daemon not started" if not mps.get("started")
                else "no server log (no client reached the MPS server)"))
        p10 = load(self.d, "p10.alone.json")
        if p10 and p10.get("ok") and self.alone_tf:
            self.notes.append("reference drift: alone %.1f TFLOP/s at the start, %.1f at the end (%.3f)" % (
                self.alone_tf, p10["tflops"], p10["tflops"] / self.alone_tf))
        self.failed_runs = []
        try:
            with open(os.path.join(self.d, "runs.tsv"), "r", encoding="utf-8") as f:
                for r in csv.DictReader(f, delimiter="\t"):
                    if r.get("rc") not in ("0", None):
                        self.failed_runs.append(r)
        except OSError:
            self.notes.append("runs.tsv missing")

    def markdown(self):
        L = ["# fracgpu compute checks", "",
             "%d s windows; alone = p1 (%s TFLOP/s, %s ms per matmul)." % (
                 self.seconds, fmt(self.alone_tf), fmt(self.kernel_ms, "%.3f")), "",
             "| phase | setup | tenant | TFLOP/s | share % | target % | of alone | per second (TFLOP/s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in self.rows:
            per = " ".join("%.0f" % v for v in (r.get("per_second") or []))
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["phase"], r["setup"], r["tenant"], fmt(r["tflops"]),
                fmt(r["share"] * 100 if r["share"] is not None else None),
                fmt(r["target"] * 100 if r["target"] is not None else None, "%.0f"),
                fmt(r["of_alone"], "%.3f"), per or (r.get("error") or "")[:60]))
        L += ["", "| phase | latency tenant | p50 ms | p99 ms | max ms | requests | batch TFLOP/s (same window) |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in self.lat_rows:
            L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                r["phase"], r["setup"], fmt(r["p50_ms"], "%.3f"), fmt(r["p99_ms"], "%.3f"), fmt(r["max_ms"], "%.3f"),
                r["requests"] if r["requests"] is not None else (r.get("error") or "-")[:60], fmt(r["batch_tflops"])))
        lr = self.launch_result
        L += ["", "| launch rate (p9) | median ns/launch | runs (ns/launch) |", "| --- | --- | --- |"]
        for v in ("frac", "preload", "native"):
            if v in lr["runs"]:
                L.append("| %s | %.1f | %s |" % (v, lr["median_ns"][v], " ".join("%.0f" % x for x in lr["runs"][v])))
        L.append("")
        L.append("frac/preload %s (median of paired ratios %s); preload/native %s" % (
            fmt(lr.get("ratio_frac_over_preload"), "%.4f"), fmt(lr.get("median_paired_ratio"), "%.4f"),
            fmt(lr.get("ratio_preload_over_native"), "%.4f")))
        L += ["", "| criterion | expected | measured | result |", "| --- | --- | --- | --- |"]
        for c in self.criteria:
            L.append("| %s | %s | %s | **%s** |" % (c["criterion"], c["expected"], c["measured"], c["result"]))
        for n in self.notes:
            L.append("- note: " + n)
        for r in self.failed_runs:
            L.append("- run %s %s (%s): rc=%s %s" % (r.get("phase"), r.get("tag"), r.get("mode"), r.get("rc"),
                                                   tail(r.get("err"), 2)))
        passed = sum(c["result"] == "PASS" for c in self.criteria)
        judged = sum(c["result"] != "SKIP" for c in self.criteria)
        L += ["", "RESULT: %s (%d/%d criteria passed%s)" % (
            "PASS" if passed == judged else "FAIL", passed, judged,
            ", %d skipped by --only" % (len(self.criteria) - judged) if judged < len(self.criteria) else "")]
        return "\n".join(L) + "\n"


def tail(path, n):
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            lines = [x.strip() for x in f.read().splitlines() if x.strip()]
        return " / ".join(lines[-n:])[:300]
    except (OSError, TypeError):
        return ""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True, help="the results directory (OUT/compute)")
    p.add_argument("--seconds", type=int, default=10, help="the measurement window used")
    p.add_argument("--launch-n", type=int, default=200000, help="launches per launch-rate repetition")
    p.add_argument("--only", default="", help="the phases that were selected (others' criteria are skipped)")
    args = p.parse_args(argv)
    rep = Report(args.dir, args.seconds, args.only)
    rep.build()
    md = rep.markdown()
    with open(os.path.join(args.dir, "summary.md"), "w", encoding="utf-8") as f:
        f.write(md)
    summary = {"passed": all(c["result"] != "FAIL" for c in rep.criteria), "criteria": rep.criteria,
               "throughput": rep.rows, "latency": rep.lat_rows, "launch": rep.launch_result,
               "launch_n": args.launch_n, "alone_tflops": rep.alone_tf, "kernel_ms": rep.kernel_ms,
               "notes": rep.notes, "failed_runs": rep.failed_runs}
    with open(os.path.join(args.dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    sys.stdout.write(md)
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
