"""Markdown tables of a benchmark run, one renderer per phase (docs_section.py puts them in
docs/benchmarks.md): overhead ratios with their spread; shares as target against measured
and efficiency for every way of sharing side by side; conservation; ceilings with the
witness and the clock; latency with every way and whether the row meets the goal; memory;
faults. Rows of older runs (fewer fields) render with "-" where a figure is missing."""
import losses

SETUP_COLUMNS = ["fracgpu", "MPS", "HAMi-core", "native", "fracgpu-mps"]
LAT_MODES = [("native", "native"), ("MPS", "mps"), ("fracgpu", "fracgpu"), ("fracgpu-mps", "fracgpu_mps"),
             ("HAMi-core", "hami")]


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def f(v, spec="%.3f"):
    return "-" if v is None else spec % v


def spread_text(sp, spec="%.3f"):
    if not isinstance(sp, dict) or sp.get("min") is None:
        return "-"
    return "%s–%s, n %d" % (spec % sp["min"], spec % sp["max"], sp.get("n") or 0)


# ---------------------------------------------------------------- overhead
def overhead(rows, doc):
    body = []
    fracb = any(r.get("fracb_ratio") is not None for r in rows)
    for r in rows:
        body.append([r["metric"], r.get("unit", ""), f(r.get("native")), f(r.get("fracgpu")),
                     "%s (%s)" % (f(r.get("ratio"), "%.4f"), spread_text(r.get("ratio_spread"), "%.3f")),
                     "%s (%s)" % (f(r.get("hami_ratio"), "%.4f"), spread_text(r.get("hami_ratio_spread"), "%.3f"))
                     if r.get("hami_ratio") is not None else "-",
                     f(r.get("shim_ratio"), "%.4f"), f(r.get("high_ratio"), "%.4f")] +
                    ([f(r.get("fracb_ratio"), "%.4f")] if fracb else []))
    return md_table(["metric", "unit", "native", "fracgpu", "fracgpu / native (min–max, pairs)",
                     "HAMi-core / native", "shim without a tenant / native",
                     "high-priority tenant / native"] + (["fracgpu, --shim-b build / native"] if fracb else []),
                    body) + [
        "", "Ratios are medians of paired runs alternated in the same call (launch and allocation: a fresh "
            "process per pair); above 1 is slower than native. \"Shim without a tenant\": the shim preloaded "
            "with no tenant to join, every hook only forwarding — the interposition's own share of fracgpu's "
            "cost (fresh-process metrics only); \"high-priority tenant\": a fracgpu tenant of --priority high, "
            "whose launches also take the burst path. launch_call_*: the host time of each cuLaunchKernel call "
            "of an empty kernel (fracgpu-bench-client launchtime), with a sync every 32 launches (shallow: the "
            "host path alone) or once at the end (deep: calls then also wait for the GPU; deep_stall = the "
            "time in calls over 20 us, per launch)."]


# ---------------------------------------------------------------- shares
def share_cell(group):
    if group is None:
        return "-"
    if any(t.get("measured") is None for t in group):
        return "failed" if any(t.get("error") for t in group) else "-"
    cell = " / ".join("%.1f" % (t["measured"] * 100) for t in group) + " (%s)" % f(group[0].get("efficiency"))
    return cell + ("†" if group[0].get("same_run_as") else "")


def shares(rows, doc):
    table = losses.share_scenarios(rows)
    body, dagger = [], False
    for (split, wk), by in table.items():
        with_targets = next((g for g in by.values() if all(t.get("target") is not None for t in g)), [])
        targets = " / ".join("%.0f" % (t["target"] * 100) for t in with_targets) or split
        fr = by.get("fracgpu")
        err = max((t.get("windows_100ms") or {}).get("max_abs_error") or 0 for t in fr) if fr else None
        body.append([split, wk, targets] + [share_cell(by.get(s)) for s in SETUP_COLUMNS] +
                    [f(err * 100 if err is not None else None, "%.1f")])
        dagger = dagger or any((g[0].get("same_run_as") for g in by.values()))
    out = md_table(["split", "workload", "target %"] + ["%s (eff.)" % s for s in SETUP_COLUMNS] +
                   ["fracgpu worst 100 ms error, points"], body)
    skipped = sorted({"%s: %s" % (r["setup"], r["skipped"]) for r in rows if r.get("skipped")})
    out += ["", "Measured shares in % of the tenants' normalised rates over the common window; eff. = their sum "
                "(1.0: no capacity lost). Mixed = a training step, a decode loop (and a compute tenant)."]
    if dagger:
        out.append("† native time slicing cannot be told a split: the same run, shown against this split's targets.")
    if skipped:
        out.append("Not measured: " + "; ".join(skipped) + ".")
    return out


# ---------------------------------------------------------------- conservation, ceilings
def conserve(rows, doc):
    body = [[r["case"], f(r.get("of_alone")), f(r.get("target"), "%.2f"), spread_text(r.get("off_spread")),
             "%s (target %s)" % (f(r.get("share_when_on")), f(r.get("share_when_on_target"), "%.2f"))
             if r.get("share_when_on") is not None else "-"] for r in rows]
    return md_table(["case", "rate / alone", "target", "off halves min–max", "share while both run"], body)


def ceilings(rows, doc):
    body = []
    for r in rows:
        if r.get("skipped"):
            body.append([r["setup"], "-", "skipped: %s" % r["skipped"], "-", "-", "-", "-"])
            continue
        body.append([r["setup"], f(r.get("limit"), "%.2f"), f(r.get("throughput_of_alone")), f(r.get("gpu_time")),
                     f(r.get("gpu_time_alone")), "%s (%s)" % (f(r.get("sm_clock_mhz"), "%.0f"),
                                                               f(r.get("alone_sm_clock_mhz"), "%.0f")),
                     r.get("witness") or "-"])
    return md_table(["setup", "limit", "throughput / alone", "GPU time (witness)", "GPU time alone",
                     "SM MHz (alone)", "witness"], body)


# ---------------------------------------------------------------- latency
def lat_cell(r, key):
    p = [r.get("%s_%s" % (key, k)) for k in ("p50_ms", "p99_ms", "p999_ms")]
    if all(v is None for v in p):
        return "skipped" if r.get(key + "_skipped") else "-"
    return " / ".join(f(v) for v in p)


def latency(rows, doc):
    body = []
    real = any(r.get("tenant") for r in rows)  # real tenants (phases_latency_real.py): a tenant column
    third = (lambda r: r.get("tenant") or "-") if real else (lambda r: f(r.get("batch_kernel_ms"), "%.2f"))
    for r in rows:
        if r.get("skipped"):
            body.append([r["batch"], "-", "-", "skipped: %s" % r["skipped"]] + ["-"] * 7)
            continue
        g = losses.goal_of(r)
        ratios = " / ".join(f(r.get(k)) for k in ("batch_ratio", "fracgpu_mps_batch_ratio", "mps_batch_ratio",
                                                  "hami_batch_ratio"))
        body.append([r["batch"], r.get("arrival", "-"), third(r),
                     " / ".join(f(r.get("alone_" + k)) for k in ("p50_ms", "p99_ms", "p999_ms"))] +
                    [lat_cell(r, key) for _, key in LAT_MODES] +
                    [ratios, "**met** (%s)" % g["by"] if g["met"] else "no"])
    old = any(r.get("arrival") == "poisson" and not r.get("latency_from") for r in rows)
    out = md_table(["batch", "arrivals", "latency tenant" if real else "batch kernel ms", "alone p50 / p99 / p99.9"] +
                   ["%s p50 / p99 / p99.9" % n for n, _ in LAT_MODES] +
                   ["batch ratio fracgpu / fracgpu-mps / MPS / HAMi", "goal"], body)
    if real:
        out += ["", "Request latency (ms) of a high-priority tenant serving a real model request by request: "
                    "encoder = a 6-layer BERT-base-like forward at batch 1 over 128 tokens; llm = one decode step of "
                    "an 8-layer Llama-like model at batch 1 against a 256-token KV cache (transformers, random "
                    "weights, bf16). Batches: tftrain = a training step of that Llama-like model (AdamW, bf16 "
                    "autocast), compiled = torch.compile(mode=\"reduce-overhead\") MLP inference (CUDA graphs), "
                    "tiny = 64 tiny elementwise ops per sync (launch-bound), copy = 512 MiB device copies, multi = "
                    "tftrain + compiled + tiny at once. Regular: a think time of max(1 ms, alone p50) after each "
                    "reply; Poisson: open loop with mean gap max(4 ms, 4 x alone p50) (results.json `think_us`). "
                    "Batch ratio: the batch's throughput over the latency window against native sharing's (mean over "
                    "its processes). Goal: the better fracgpu way has p99 below MPS's and within 1.5 x alone + 0.1 ms "
                    "while its batch keeps >= 0.9. With a few hundred requests per row, p99.9 is close to the maximum."]
    else:
        out += ["", "Request latency of a high-priority tenant (one 0.1 ms kernel + sync per request) in ms; regular: "
                    "1 ms think time after each reply; Poisson: open loop at 250/s. Batch ratio: the batch's throughput "
                    "over the latency window against native sharing's. Goal: the better fracgpu way has p99 below MPS's "
                    "and within 1.5 x alone + 0.1 ms while its batch keeps >= 0.9."]
    if old:
        out.append("This run's client counted Poisson latencies from the scheduled arrival (its own wake-up "
                   "lateness included): its Poisson rows, alone too, compare only with each other.")
    else:
        out.append("Latency is counted from submission to completion; the Poisson queueing delay from the "
                   "scheduled arrival is in results.json (`*_queue_p99_ms`, `*_response_p99_ms`).")
    return out


# ---------------------------------------------------------------- memory, faults
def num(v):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    return "%d" % v if float(v).is_integer() else "%.4g" % v


def memory(rows, doc):
    body = [[r["check"], num(r.get("expected")), num(r.get("measured")) if not r.get("skipped") else
             "skipped: %s" % r["skipped"], "-" if r.get("ok") is None else ("yes" if r["ok"] else "**no**")]
            for r in rows]
    return md_table(["check", "expected", "measured", "ok"], body)


def faults(rows, doc):
    body = []
    for r in rows:
        if "resume_s" in r:
            res = "the waiting tenant runs again after %s s (longest stall %s s); broker restart %s s" % (
                f(r.get("resume_s")), f(r.get("longest_stall_s")), f(r.get("broker_restart_s"), "%.2f"))
        else:
            res = "the other tenant at %s of its alone rate while stopped (%s in the first 0.5 s)" % (
                f(r.get("other_of_alone")), f(r.get("other_first_500ms_of_alone")))
        body.append([r["fault"], res if not r.get("error") else "error: %s" % str(r["error"])[:120]])
    return md_table(["fault", "result"], body)


TABLES = {
    "overhead": {"title": "Overhead", "render": overhead},
    "shares": {"title": "Shares", "render": shares},
    "conserve": {"title": "Work conservation", "render": conserve},
    "ceilings": {"title": "Ceilings", "render": ceilings},
    "latency": {"title": "Latency isolation", "render": latency},
    "memory": {"title": "Memory", "render": memory},
    "faults": {"title": "Faults", "render": faults},
}
