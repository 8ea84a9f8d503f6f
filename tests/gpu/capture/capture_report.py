#!/usr/bin/env python3
"""fracgpu capture checks: the report of run_capture_checks.sh (one table, PASS/FAIL per check).

Reads what run_capture_checks.sh left in --dir: PHASE.TAG.json (capture_client.py and
matmul_tenant.py results), phases.tsv (steps run or skipped for the budget), runs.tsv (every
process: exit status, time, stderr file), built.tsv (build_cuda_samples.sh) and samples.tsv
(every cuda-sample run). Writes summary.md (printed too) and summary.json to --final.

Checks (issue "CUDA graphs and stream capture must survive sharing"):
  a.MODE        capture_client.py --mode MODE alone, natively: ok (every capture verified)
  bW.MODE       the same under fracgpu --compute W next to a matmul tenant at 100-W: ok
  bW.competitor the matmul tenant ran through the step (else the captures were not contended)
  c.share       a graph-replay tenant (--compute 30) next to a matmul tenant (--compute 70): its
                share within --share-tol of 30%, share = (rate_with / rate_alone) normalised over
                both tenants (rates over the window both were measuring; alone = each alone)
  d.SAMPLE      a cuda-sample that passes natively passes under fracgpu alone (graph samples:
                and next to a competitor); one that fails or is waived natively is listed, not
                judged; a graph sample that did not build (other than for a missing toolkit
                library) fails; at least one sample must have run
A check of a selected phase that has no result (skipped for the budget, killed) fails; phases
left out by --only are SKIP. Exit status 0 when every check passed, 1 otherwise.
Needs only the standard library.
"""
import argparse
import csv
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compute"))
from compute_report import count_at, load, tail  # noqa: E402

MODES = ("graph", "graph_thread_local", "compile", "serving")
B_WEIGHTS = (20, 50, 80)


def b_modes(w):
    return ("graph", "graph_thread_local", "compile", "serving") if w == 50 else ("graph", "compile", "serving")


def read_tsv(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            return list(csv.DictReader(f, delimiter="\t"))
    except OSError:
        return []


def fmt(v, spec="%.1f", none="-"):
    return none if v is None else spec % v


def rate_between(r, a, b):
    """Units per second of result r (samples [[t, count]], t_start) between absolute a < b."""
    if not r or not r.get("samples") or r.get("t_start") is None or b <= a:
        return None
    s, t0 = r["samples"], r["t_start"]
    return (count_at(s, b - t0) - count_at(s, a - t0)) / (b - a)


def rate_whole(r):
    if not r or not r.get("samples") or not r.get("t_start"):
        return None
    return rate_between(r, r["t_start"], r["t_end"])


class Report(object):
    def __init__(self, args):
        self.a = args
        self.d = args.dir
        self.only = set(args.only.split())
        self.rows = []
        self.notes = []
        self.phases = read_tsv(os.path.join(self.d, "phases.tsv"))
        self.runs = read_tsv(os.path.join(self.d, "runs.tsv"))

    # ---------------------------------------------------------------- helpers
    def selected(self, phase):
        return not self.only or phase in self.only

    def skipped_reason(self, *ids):
        for p in self.phases:
            if p.get("phase") in ids and p.get("status") == "skipped":
                return p.get("detail") or "skipped"
        return None

    def run_of(self, phase, tag):
        for r in self.runs:
            if r.get("phase") == phase and r.get("tag") == tag:
                return r
        return None

    def add(self, phase, check, result, figures="", detail=None):
        self.rows.append({"phase": phase, "check": check, "result": result, "figures": figures,
                          "detail": detail})

    def missing(self, phase, check, step, tag, skip_ids):
        """The row of a check without a result: SKIP (--only), SKIPPED (budget) or FAIL."""
        if not self.selected(phase):
            self.add(phase, check, "SKIP", "not selected (--only)")
            return
        why = self.skipped_reason(*skip_ids)
        if why:
            self.add(phase, check, "SKIPPED", why)
            return
        run = self.run_of(step, tag)
        if run:
            rc = run.get("rc")
            how = "timed out" if rc in ("124", "137") else "rc %s" % rc
            self.add(phase, check, "FAIL", "no result (%s after %s s): %s" % (how, run.get("elapsed_s"),
                                                                              tail(run.get("err"), 2)))
        else:
            self.add(phase, check, "FAIL", "no result: the batch ended before it finished")

    def client_row(self, phase, check, step, tag, skip_ids):
        r = load(self.d, "%s.%s.json" % (step, tag))
        if r is None:
            self.missing(phase, check, step, tag, skip_ids)
            return None
        if not self.selected(phase):
            self.add(phase, check, "SKIP", "not selected (--only)")
            return r
        figs = "captures %s/%s" % (r.get("captures"), r.get("expected_captures"))
        if r.get("replays"):
            figs += ", %s replays (%s/s)" % (r.get("replays"), fmt(r.get("replay_rate_per_s"), "%.0f"))
        if r.get("max_rel_err") is not None:
            figs += ", max rel err %.2g" % r["max_rel_err"]
        figs += ", %s s" % fmt(r.get("elapsed_s"))
        errs = r.get("errors") or ([r["error"]] if r.get("error") else [])
        if errs:
            figs += "; " + " / ".join(e[:160] for e in errs[:2])
        self.add(phase, check, "PASS" if r.get("ok") else "FAIL", figs,
                 {"result": {k: v for k, v in r.items() if k != "samples"}})
        return r

    def competitor_row(self, phase, check, step, tag):
        r = load(self.d, "%s.%s.json" % (step, tag))
        if r is None:
            self.missing(phase, check, step, tag, (step,))
            return None
        if not self.selected(phase):
            self.add(phase, check, "SKIP", "not selected (--only)")
            return r
        figs = "%s TFLOP/s over %s s" % (fmt(r.get("tflops")), fmt(r.get("seconds")))
        if r.get("error"):
            figs += "; " + r["error"][:200]
        self.add(phase, check, "PASS" if r.get("ok") else "FAIL", figs)
        return r

    # ---------------------------------------------------------------- phases
    def phase_a(self):
        for m in MODES:
            self.client_row("a", "a.%s: alone, native" % m, "a", m, ("a", "a." + m))

    def phase_b(self):
        for w in B_WEIGHTS:
            step = "b%d" % w
            for m in b_modes(w):
                self.client_row("b", "%s.%s: fracgpu --compute %d, competitor at %d" % (step, m, w, 100 - w),
                                step, m, (step, "%s.%s" % (step, m)))
            self.competitor_row("b", "%s.competitor: matmul --compute %d ran throughout" % (step, 100 - w), step, "comp")

    def phase_c(self):
        target, tol = self.a.share_target, self.a.share_tol
        cap_a = load(self.d, "c_cap_alone.cap.json")
        mm_a = load(self.d, "c_mm_alone.mm.json")
        cap_b = load(self.d, "c_both.cap.json")
        mm_b = load(self.d, "c_both.mm.json")
        check = "c.share: graph-replay tenant --compute 30 next to matmul --compute 70"
        if not self.selected("c"):
            self.add("c", check, "SKIP", "not selected (--only)")
            return
        rca, rma = rate_whole(cap_a), rate_whole(mm_a)
        flop = (mm_a or mm_b or {}).get("flop_per_matmul")
        self.add("c", "c.cap_alone: replay tenant alone (--compute 30)", "INFO",
                 "%s replays/s over %s s" % (fmt(rca, "%.0f"), fmt((cap_a or {}).get("seconds"))) if rca
                 else "no result: %s" % ((cap_a or {}).get("errors") or (cap_a or {}).get("error") or "missing"))
        self.add("c", "c.mm_alone: matmul tenant alone (--compute 70)", "INFO",
                 "%s TFLOP/s over %s s" % (fmt(rma * flop / 1e12 if rma and flop else None),
                                           fmt((mm_a or {}).get("seconds"))) if rma else "no result")
        results = {"cap_alone": cap_a, "mm_alone": mm_a, "cap": cap_b, "mm": mm_b}
        bad = [k for k, v in results.items() if not v or not v.get("ok")]
        if bad:
            why = self.skipped_reason("c_cap_alone", "c_mm_alone", "c_both")
            res = "SKIPPED" if why and any(results[k] is None for k in bad) else "FAIL"
            detail = ", ".join("%s: %s" % (k, "missing" if not results[k] else
                                           (results[k].get("errors") or [results[k].get("error")])[0])
                               for k in bad)
            self.add("c", check, res, (why + "; " if why else "") + "no valid result for " + detail[:300])
            return
        a0 = max(cap_b["t_start"], mm_b["t_start"])
        b0 = min(cap_b["t_end"], mm_b["t_end"])
        rc, rm = rate_between(cap_b, a0, b0), rate_between(mm_b, a0, b0)
        if not rc or not rm or not rca or not rma or b0 - a0 < 0.5 * self.a.seconds:
            self.add("c", check, "FAIL", "no common window (%.2f s) or a zero rate" % (b0 - a0))
            return
        fc, fm = rc / rca, rm / rma
        share = fc / (fc + fm)
        ok = abs(share - target) <= tol
        self.add("c", "c.both: both tenants, same window", "INFO",
                 "replay %.0f/s (%.3f of alone), matmul %s TFLOP/s (%.3f of alone), window %.1f s" % (
                     rc, fc, fmt(rm * flop / 1e12 if flop else None), fm, b0 - a0))
        self.add("c", check, "PASS" if ok else "FAIL",
                 "share %.1f%% (target %.0f%% +- %.0f points; matmul %.1f%%), sum of normalised rates %.3f" % (
                     100 * share, 100 * target, 100 * tol, 100 * (1 - share), fc + fm),
                 {"share": share, "replay_of_alone": fc, "matmul_of_alone": fm, "window_s": b0 - a0})

    def phase_d(self):
        if not self.selected("d"):
            self.add("d", "d: cuda-samples", "SKIP", "not selected (--only)")
            return
        entries = []
        try:
            with open(self.a.samples_list, "r", encoding="utf-8") as f:
                for line in f:
                    parts = line.split()
                    if not parts or parts[0].startswith("#"):
                        continue
                    kind = parts[1] if len(parts) > 1 else "plain"
                    entries.append((parts[0].rsplit("/", 1)[-1], kind, " ".join(parts[2:])))
        except OSError as exc:
            self.add("d", "d: cuda-samples list", "FAIL", "cannot read %s: %s" % (self.a.samples_list, exc))
            return
        built = {}  # built.tsv has no header row
        try:
            with open(os.path.join(self.d, "built.tsv"), "r", encoding="utf-8") as f:
                for line in f:
                    p = line.rstrip("\n").split("\t")
                    if len(p) >= 2:
                        built[p[0]] = {"status": p[1], "detail": p[2] if len(p) > 2 else ""}
        except OSError:
            pass
        runs = {}
        for r in read_tsv(os.path.join(self.d, "samples.tsv")):
            runs[(r["name"], r["variant"])] = r
        why_phase = self.skipped_reason("d")
        self.sample_rows = []
        n_built = n_ran = n_native_pass = 0
        for name, kind, rest in entries:
            row = {"sample": name, "kind": kind}
            if kind == "skip":
                row.update(result="SKIP", note=rest)
                self.sample_rows.append(row)
                self.add("d", "d.%s" % name, "SKIP", "not run: " + rest)
                continue
            b = built.get(name)
            verdicts = {}
            for v in ("native", "frac", "contended"):
                r = runs.get((name, v))
                verdicts[v] = verdict(r["rc"]) if r else None
                row[v] = verdicts[v]
                row[v + "_s"] = r.get("seconds") if r else None
            if not b or b["status"] != "built":
                status = b["status"] if b else "no build"
                detail = (b or {}).get("detail") or why_phase or "the build did not report it"
                missing_lib = status == "not-configured" and "toolkit has no" in detail
                if kind == "graph" and not missing_lib and not (why_phase and not b):
                    res = "FAIL"
                else:
                    res = "SKIPPED" if (why_phase and not b) else "NOT BUILT"
                row.update(result=res, note="%s: %s" % (status, detail))
                self.sample_rows.append(row)
                self.add("d", "d.%s (%s)" % (name, kind), res, "%s: %s" % (status, detail[:200]))
                continue
            n_built += 1
            nat, fr, co = verdicts["native"], verdicts["frac"], verdicts["contended"]
            if nat not in (None, "SKIPPED"):
                n_ran += 1
            if nat == "PASS":
                n_native_pass += 1
            want = ("frac", "contended") if kind == "graph" else ("frac",)
            if nat is None or nat == "SKIPPED":
                res, note = "SKIPPED", "not run (time budget)"
            elif nat == "PASS":
                got = [verdicts[v] for v in want]
                if all(g == "PASS" for g in got):
                    res, note = "PASS", ""
                elif any(g in (None, "SKIPPED") for g in got) and not any(
                        g not in (None, "SKIPPED", "PASS") for g in got):
                    res, note = "SKIPPED", "a fracgpu run was not made (time budget)"
                else:
                    res, note = "FAIL", "passes natively, not under fracgpu"
            elif nat == "WAIVED":
                res, note = "WAIVED", "waived natively (exit 2: feature missing); not judged"
            else:
                res, note = "NATIVE-FAIL", "fails natively (%s); not judged" % nat
            row.update(result=res, note=note)
            self.sample_rows.append(row)
            figs = "native %s %s s | fracgpu %s %s s" % (nat or "-", fmt_s(row["native_s"]), fr or "-",
                                                        fmt_s(row["frac_s"]))
            if kind == "graph":
                figs += " | contended %s %s s" % (co or "-", fmt_s(row["contended_s"]))
            if note:
                figs += "; " + note
            self.add("d", "d.%s (%s)" % (name, kind), res, figs)
        listed = sum(1 for _, k, _ in entries if k != "skip")
        res = "PASS" if n_native_pass > 0 else ("SKIPPED" if why_phase else "FAIL")
        self.add("d", "d: samples built and run", res, "%d of %d listed built, %d ran natively, %d passed natively%s" % (
            n_built, listed, n_ran, n_native_pass, "; " + why_phase if why_phase else ""))
        comp = load(self.d, "d.dcomp.json")
        if any(k == "graph" and (n, "contended") in runs for n, k, _ in entries):
            figs = "%s TFLOP/s over %s s" % (fmt(comp.get("tflops")), fmt(comp.get("seconds"))) if comp else "no result"
            self.add("d", "d.competitor: matmul --compute 50 ran during the graph samples",
                     "PASS" if comp and comp.get("ok") else "FAIL", figs)

    # ---------------------------------------------------------------- output
    def build(self):
        self.sample_rows = []
        self.phase_a()
        self.phase_b()
        self.phase_c()
        self.phase_d()

    def counts(self):
        c = {}
        for r in self.rows:
            c[r["result"]] = c.get(r["result"], 0) + 1
        return c

    def passed(self):
        return not any(r["result"] in ("FAIL", "SKIPPED") for r in self.rows)

    def markdown(self):
        L = ["# fracgpu capture checks", "",
             "| phase | check | result | figures |", "| --- | --- | --- | --- |"]
        for r in self.rows:
            if r["phase"] == "d" and r["check"].startswith("d.") and r["result"] in ("PASS",):
                continue  # passing samples are in the samples table below
            L.append("| %s | %s | **%s** | %s |" % (r["phase"], r["check"], r["result"],
                                                    r["figures"].replace("|", "/").replace("\n", " ")))
        if self.sample_rows:
            L += ["", "| sample | kind | native | fracgpu alone | fracgpu + competitor | result |",
                  "| --- | --- | --- | --- | --- | --- |"]
            for s in self.sample_rows:
                if s["kind"] == "skip":
                    continue
                L.append("| %s | %s | %s | %s | %s | %s |" % (
                    s["sample"], s["kind"], cell(s.get("native"), s.get("native_s")), cell(s.get("frac"), s.get("frac_s")),
                    cell(s.get("contended"), s.get("contended_s")) if s["kind"] == "graph" else "",
                    s["result"] + (" (%s)" % s["note"][:80] if s.get("note") and s["result"] != "PASS" else "")))
        failed = [r for r in self.runs if r.get("rc") not in ("0", None) and r.get("phase") != "d"]
        for r in failed[:20]:
            L.append("- run %s %s (%s): rc=%s %s" % (r.get("phase"), r.get("tag"), r.get("mode"), r.get("rc"),
                                                   tail(r.get("err"), 2)))
        for n in self.notes:
            L.append("- note: " + n)
        c = self.counts()
        L += ["", "RESULT: %s (%s)" % ("PASS" if self.passed() else "FAIL",
                                        ", ".join("%d %s" % (v, k) for k, v in sorted(c.items())))]
        return "\n".join(L) + "\n"


def verdict(rc):
    if rc == "0":
        return "PASS"
    if rc == "2":
        return "WAIVED"
    if rc in ("124", "137"):
        return "TIMEOUT"
    if rc in ("skipped", "no-competitor"):
        return "SKIPPED" if rc == "skipped" else "NO-COMPETITOR"
    return "FAIL(rc %s)" % rc


def fmt_s(v):
    try:
        return "%.1f" % float(v)
    except (TypeError, ValueError):
        return "-"


def cell(v, s):
    return "-" if v is None else "%s %s s" % (v, fmt_s(s))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True, help="the results directory of the batch")
    p.add_argument("--final", default=None, help="where summary.md/json go (default --dir)")
    p.add_argument("--only", default="", help="the phases that were selected")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--seconds", type=float, default=10.0, help="the share window")
    p.add_argument("--samples-list", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                          "cuda_samples.list"))
    p.add_argument("--share-target", type=float, default=0.30)
    p.add_argument("--share-tol", type=float, default=0.03)
    args = p.parse_args(argv)
    final = args.final or args.dir
    os.makedirs(final, exist_ok=True)
    rep = Report(args)
    rep.build()
    md = rep.markdown()
    with open(os.path.join(final, "summary.md"), "w", encoding="utf-8") as f:
        f.write(md)
    summary = {"passed": rep.passed(), "counts": rep.counts(), "rows": rep.rows, "samples": rep.sample_rows,
               "phases": rep.phases, "runs": rep.runs, "notes": rep.notes, "only": args.only,
               "repeat": args.repeat, "share_target": args.share_target, "share_tol": args.share_tol}
    with open(os.path.join(final, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, sort_keys=True, default=str)
    sys.stdout.write(md)
    return 0 if rep.passed() else 1


if __name__ == "__main__":
    sys.exit(main())
