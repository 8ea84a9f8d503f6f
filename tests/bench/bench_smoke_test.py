#!/usr/bin/env python3
"""Smoke test of the benchmark suite (ctest label `bench`): bench/gpu/run.sh --quick on the
simulated GPU, every phase, end to end, then checks what it wrote: results.json's schema and
a row for every phase (latency rows with the issue's columns, fracgpu-mps's and the goal's),
the time budget's accounting per phase, the CSV, the summary, valid PNG plots, the archive,
and figures within loose bounds (the simulated GPU on a loaded 2-core machine: shares of
compute tenants within 8 points, a lone 30 % tenant and the idle halves of an on/off
neighbour near alone, a 30 % ceiling at 30 +- 10 % of the GPU's time as the simulated device
counts it, the broker kill survived). Then the docs generator (bench/gpu/docs_section.py) on
that results.json: the section has every phase's table, and --update-doc on a copy of
docs/benchmarks.md inserts it between its markers, keeps the rest, and changes nothing when
run again.

    bench_smoke_test.py --build BUILD_DIR --client fracgpu-bench-client --out DIR [--sanitized]
--sanitized (the sanitizer builds, several times slower and unevenly): the figures are printed,
not judged; everything else is.
Exit 0 when every check passed; the failed ones are listed otherwise."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tarfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PHASES = ["overhead", "shares", "conserve", "ceilings", "latency", "memory", "faults"]
LATENCY_KEYS = ["batch", "batch_kernel_ms", "native_p99_ms", "mps_p99_ms", "fracgpu_p99_ms", "batch_ratio",
                "native_p50_ms", "fracgpu_p50_ms", "native_p999_ms", "fracgpu_p999_ms", "alone_p99_ms", "arrival",
                "mps_p50_ms", "mps_p999_ms", "fracgpu_mps_p50_ms", "fracgpu_mps_p99_ms", "fracgpu_mps_p999_ms",
                "fracgpu_mps_batch_ratio", "hami_p99_ms", "meets_goal", "meets_goal_by", "goal_checks",
                "latency_from"]
BATCHES = {"k0.05", "k0.2", "k2", "copy", "train", "graph", "multi"}
SECTION_TITLES = ["### Overhead", "### Shares", "### Work conservation", "### Ceilings", "### Latency isolation",
                  "### Memory", "### Faults", "### Where fracgpu loses", "**Time budget**", "**Machine:**"]

failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)
    return ok


SANITIZED = False  # --sanitized: figures are printed, not judged


def figure(ok, what):
    """A check of a measured share, rate or time: in a sanitizer build (several times slower,
    and unevenly) it is printed, not judged."""
    if SANITIZED:
        print("%s %s" % ("ok  " if ok else "not judged (--sanitized):", what))
        return ok
    return check(ok, what)


def png_size(path):
    """(width, height) of a PNG file, or None if it is not one."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError:
        return None
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def near(v, target, tol):
    return isinstance(v, (int, float)) and abs(v - target) <= tol


def run_bench(args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRACGPU_", "FAKECUDA_")) and k != "LD_PRELOAD"}
    cmd = [sys.executable, os.path.join(REPO, "bench", "gpu", "bench.py"), "--quick", "--gpu", "sim", "--sim-mps",
           "--build", args.build, "--client", args.client, "--out", args.out, "--budget", "170"]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, env=env, timeout=190, capture_output=True, text=True)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, str(e.stdout or ""), str(e.stderr or "")
    print(err[-6000:], file=sys.stderr)
    print(out[-8000:])
    print("bench ran %.1f s, rc %d" % (time.time() - t0, rc))
    return rc


def check_results(doc):
    check(doc.get("schema") == "fracgpu-bench/1", "results.json schema fracgpu-bench/1")
    m = doc.get("machine", {})
    check(all(k in m for k in ("gpu", "driver", "cuda", "clocks")), "machine has gpu, driver, cuda, clocks")
    status = {p["phase"]: p["status"] for p in doc.get("phases", [])}
    for ph in PHASES:
        check(status.get(ph) == "ok", "phase %s ran (%s)" % (ph, status.get(ph)))
        check(bool(doc.get(ph)), "results.json has rows for %s" % ph)

    ovh = {r["metric"]: r for r in doc.get("overhead", [])}
    calls = {"launch_call_p50", "launch_call_mean", "launch_call_p99", "launch_deep_mean", "launch_deep_stall"}
    check(set(ovh) == {"launch", "alloc", "eager", "graph"} | calls,
          "overhead: launch, alloc, eager, graph and the per-call launch timing (%s)" % sorted(ovh))
    for name, r in ovh.items():
        if name == "launch_deep_stall":  # often 0 on both sides: no ratio
            continue
        # At least one measured pair with its spread record: the phase's budget cuts the pairs
        # short on a slow (sanitizer, loaded) machine, where 3 were not always reached.
        check(isinstance(r.get("ratio"), float) and r["ratio"] > 0 and r.get("ratio_spread", {}).get("n", 0) >= 1,
              "overhead %s: a ratio with its spread (%s over %s pairs)" % (
                  name, r.get("ratio"), r.get("ratio_spread", {}).get("n")))
    for name in calls - {"launch_deep_stall"}:
        r = ovh.get(name, {})
        check(all(isinstance(r.get(k), float) and r[k] > 0 for k in ("native", "fracgpu", "shim_ratio", "high_ratio")),
              "overhead %s: native, fracgpu, shim without a tenant and high tenant measured (%s %s %s %s)" % (
                  name, r.get("native"), r.get("fracgpu"), r.get("shim_ratio"), r.get("high_ratio")))

    frac = [r for r in doc.get("shares", []) if r.get("setup") == "fracgpu"]
    check({r["split"] for r in frac} == {"70/30", "50/50", "90/10", "50/30/20"}, "shares: every split")
    check({r["workload"] for r in frac if r["split"] == "70/30"} >= {"compute", "memory", "train", "decode"},
          "shares 70/30: compute-bound, memory-bound and mixed tenants")
    for r in frac:
        check(all(k in r for k in ("target", "measured", "efficiency", "windows_1s", "windows_100ms", "gpu_time")),
              "shares row %s %s has target, measured, efficiency, windows, GPU time" % (r["split"], r["tenant"]))
        if r["workload"] == "compute":
            figure(near(r.get("measured"), r["target"], 0.08), "fracgpu %s %s: %s vs target %.2f (+-0.08)" % (
                r["split"], r["tenant"], r.get("measured"), r["target"]))
    native = [r for r in doc["shares"] if r.get("setup") == "native" and r.get("split") == "50/50"]
    check(len(native) == 2, "native 50/50 rows")
    figure(all(near(r.get("measured"), 0.5, 0.1) for r in native), "native 50/50 near 50/50")
    skipped = [r for r in doc["shares"] if r.get("setup") == "MPS"]
    check(len(skipped) == 1 and skipped[0].get("skipped"), "MPS reported as skipped, not failed")

    cons = {r["case"]: r for r in doc.get("conserve", [])}
    lone = cons.get("lone --compute 30", {})
    figure(isinstance(lone.get("of_alone"), float) and lone["of_alone"] >= 0.8,
          "a lone --compute 30 tenant has >= 0.8 of alone (%s)" % lone.get("of_alone"))
    for p in (100, 1000):
        r = cons.get("70 %% tenant on/off every %d ms" % p, {})
        figure(isinstance(r.get("of_alone"), float) and r["of_alone"] >= 0.7,
              "on/off %d ms: the 30 %% tenant has >= 0.7 of alone while the other is off (%s)" % (p, r.get("of_alone")))
        figure(isinstance(r.get("share_when_on"), float) and near(r["share_when_on"], 0.3, 0.15),
              "on/off %d ms: 0.3 +- 0.15 while both run (%s)" % (p, r.get("share_when_on")))

    ceil = [r for r in doc.get("ceilings", []) if r.get("setup", "").startswith("fracgpu") and r.get("limit")]
    check(len(ceil) >= 1, "a fracgpu ceiling row")
    for r in ceil:
        figure(near(r.get("gpu_time"), r["limit"], 0.1), "ceiling %.2f: GPU time by the witness %s (+-0.1)" % (
            r["limit"], r.get("gpu_time")))
        figure(isinstance(r.get("throughput_of_alone"), float) and r["throughput_of_alone"] <= r["limit"] + 0.15,
              "ceiling %.2f: throughput %s of alone" % (r["limit"], r.get("throughput_of_alone")))

    budget = doc.get("budget") or {}
    plan = budget.get("phases") or {}
    check(isinstance(budget.get("total_s"), float) and budget["total_s"] == 170, "budget: total recorded (%s)"
          % budget.get("total_s"))
    for ph in PHASES:
        b = plan.get(ph) or {}
        check(all(isinstance(b.get(k), (int, float)) for k in ("planned_s", "allotted_s", "actual_s")) and
              b["planned_s"] > 0 and b.get("status") == "ok", "budget: %s planned %s s, allotted %s s, actual %s s"
              % (ph, b.get("planned_s"), b.get("allotted_s"), b.get("actual_s")))
    check(abs(sum(plan[p]["planned_s"] for p in PHASES if p in plan) - budget.get("planned_sum_s", -1)) < 1,
          "budget: the planned seconds add up")
    check(bool(doc.get("versions")) and "torch" in doc["versions"], "versions recorded")
    # fracgpu-mps: measured over the simulated MPS stand-in where the build has it and the broker
    # has --mps (--sim-mps), else skipped with a note.
    fmps = bool((doc.get("versions") or {}).get("fracgpu_mps"))
    if fmps:
        rows = [r for r in doc.get("shares", []) if r.get("setup") == "fracgpu-mps"]
        check(len(rows) == 2 and all(isinstance(r.get("measured"), float) for r in rows),
              "fracgpu-mps: its 70/30 share row measured (%d rows)" % len(rows))
    else:
        check(any(n.startswith("fracgpu-mps skipped") for n in doc.get("notes", [])),
              "fracgpu-mps: skipped, with a note")

    lat = doc.get("latency", [])
    check({r.get("batch") for r in lat} == BATCHES, "latency: every batch kind (%d rows)" % len(lat))
    check({r.get("arrival") for r in lat} == {"regular", "poisson"}, "latency: regular and Poisson arrivals")
    for r in lat:
        check(all(k in r for k in LATENCY_KEYS), "latency row %s %s has the issue's columns" % (r.get("batch"),
                                                                                              r.get("arrival")))
        check(all(isinstance(r.get(k), float) and r[k] > 0 for k in ("native_p99_ms", "fracgpu_p99_ms",
                                                                     "batch_ratio")),
              "latency %s %s: native and fracgpu p99 and the batch ratio measured" % (r.get("batch"), r.get("arrival")))
        check(isinstance(r.get("meets_goal"), bool) and "fracgpu" in (r.get("goal_checks") or {}),
              "latency %s %s: meets_goal is a boolean with its checks" % (r.get("batch"), r.get("arrival")))
        if fmps:
            check(isinstance(r.get("fracgpu_mps_p99_ms"), float) and isinstance(r.get("fracgpu_mps_batch_ratio"), float)
                  and "fracgpu-mps" in r["goal_checks"], "latency %s %s: fracgpu-mps measured" % (
                      r.get("batch"), r.get("arrival")))
        if r.get("arrival") == "poisson":
            check(isinstance(r.get("alone_queue_p99_ms"), float) and isinstance(r.get("fracgpu_response_p99_ms"), float),
                  "latency %s poisson: the queueing delay from the arrival kept apart" % r.get("batch"))

    mem = doc.get("memory", [])
    cap = [r for r in mem if r["check"].startswith("driver API: cuMemGetInfo")]
    check(len(cap) == 1 and cap[0].get("ok") is True, "memory: the driver API sees the cap")
    oc = [r for r in mem if r["check"].startswith("overcommit")]
    check(len(oc) == 1 and oc[0].get("ok") is True, "memory: overcommit row consistent")
    check(any(r["check"].startswith("torch") and r.get("skipped") for r in mem), "memory: torch skipped on sim")

    flt = {r["fault"].split(" (")[0]: r for r in doc.get("faults", [])}
    k = flt.get("broker SIGKILL while a tenant waits for a grant", {})
    figure(isinstance(k.get("resume_s"), float) and k["resume_s"] < 5, "broker SIGKILL: the waiting tenant runs "
          "again after %s s" % k.get("resume_s"))
    s = flt.get("SIGSTOP of the grant holder", {})
    check(isinstance(s.get("other_of_alone"), float), "SIGSTOP: the other tenant's rate measured (%s of alone)"
          % s.get("other_of_alone"))
    sh = doc.get("series", {}).get("shares", {})
    check(len(sh) >= 8 and all(v.get("over_time") for v in sh.values()), "share-over-time series for the plots")


def check_files(out):
    for name in ("shares.png", "latency_cdf.png", "overhead.png"):
        size = png_size(os.path.join(out, name))
        check(size is not None and size[0] >= 200 and size[1] >= 100, "%s is a PNG (%s)" % (name, size))
    try:
        with open(os.path.join(out, "results.csv")) as f:
            lines = f.read().splitlines()
        check(lines and lines[0].startswith("table,") and any(l.startswith("latency,") for l in lines),
              "results.csv has every table")
    except OSError:
        check(False, "results.csv exists")
    check(os.path.getsize(os.path.join(out, "summary.txt")) > 500 if os.path.exists(os.path.join(out, "summary.txt"))
          else False, "summary.txt written")
    try:
        with tarfile.open(os.path.join(out, "bench.tar.gz")) as tar:
            names = tar.getnames()
        check("bench/results.json" in names and any(n.startswith("bench/logs/") for n in names),
              "bench.tar.gz holds results.json and the logs")
    except (OSError, tarfile.TarError) as e:
        check(False, "bench.tar.gz readable (%s)" % e)
    check(len(os.listdir(out)) <= 8, "at most 8 files in the output directory (%d)" % len(os.listdir(out)))


def outside_section(page):
    """The hand-written page: all of it but the generated section, markers included."""
    begin, end = "<!-- bench:latest:begin -->", "<!-- bench:latest:end -->"
    a, z = page.find(begin), page.find(end)
    if a < 0 or z < a:
        return page
    z += len(end)
    if page[z:z + 1] == "\n":
        z += 1
    return page[:a] + page[z:]


def check_docs(out):
    """docs_section.py on the run's results.json, and --update-doc on a copy of the page."""
    gen = os.path.join(REPO, "bench", "gpu", "docs_section.py")
    res = os.path.join(out, "results.json")
    r = subprocess.run([sys.executable, gen, res, "--plots-dir", "gpu-runs/smoke"], capture_output=True, text=True,
                       timeout=60)
    text = r.stdout
    check(r.returncode == 0, "docs_section.py exit status 0 (%d: %s)" % (r.returncode, r.stderr[-300:]))
    for t in SECTION_TITLES:
        check(t in text, "docs section has %s" % t)
    check(text.startswith("<!-- bench:latest:begin -->") and text.rstrip().endswith("<!-- bench:latest:end -->"),
          "docs section between its markers")
    check("gpu-runs/smoke/shares.png" in text, "docs section shows the plots")
    page = os.path.join(out, "benchmarks.md")
    with open(os.path.join(REPO, "docs", "benchmarks.md")) as f:
        original = f.read()
    with open(page, "w") as f:
        f.write(original)
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, gen, res, "--plots-dir", "gpu-runs/smoke", "--update-doc", page],
                           capture_output=True, text=True, timeout=60)
        with open(page) as f:
            runs.append((r.returncode, r.stdout.strip(), f.read()))
    (rc1, said1, first), (rc2, said2, second) = runs
    check(rc1 == 0 and said1.endswith("updated") and text in first, "--update-doc inserts the section (%s)" % said1)
    # A page that holds a section (a committed run) has it replaced; one without gets it inserted.
    if "<!-- bench:latest:begin -->" in original:
        kept = outside_section(first) == outside_section(original)
    else:
        kept = first.replace(text + "\n", "", 1) == original
    check(kept, "--update-doc keeps the hand-written page as it was")
    check(rc2 == 0 and said2.endswith("unchanged") and second == first, "--update-doc again changes nothing (%s)"
          % said2)
    os.remove(page)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sanitized", action="store_true",
                    help="a sanitizer build: measured shares, rates and times are printed, not judged")
    args = ap.parse_args()
    global SANITIZED
    SANITIZED = args.sanitized
    os.makedirs(args.out, exist_ok=True)
    for n in os.listdir(args.out):
        os.remove(os.path.join(args.out, n))
    rc = run_bench(args)
    check(rc == 0, "bench exit status 0 (%d)" % rc)
    try:
        with open(os.path.join(args.out, "results.json")) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        check(False, "results.json readable (%s)" % e)
        doc = None
    if doc is not None:
        check_results(doc)
    check_files(args.out)
    if doc is not None:
        check_docs(args.out)
    print("%d check(s) failed%s" % (len(failures), ": " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
