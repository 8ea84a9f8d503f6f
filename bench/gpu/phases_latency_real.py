"""Latency isolation with real tenants (--latency-tenants real; PyTorch on a real GPU): the
latency-sensitive tenant is a model served request by request (torch_models.py: a transformer
encoder forward at batch 1, and an LLM decode step at batch 1 against a KV cache), next to each
real batch kind: a transformer training step (AdamW, bf16 autocast), a torch.compile
(mode="reduce-overhead") inference loop replaying CUDA graphs, a launch-bound loop of tiny
elementwise kernels, a memory-bound device copy, and three batch processes at once (the training
step, the compiled loop and the tiny-kernel loop). Natively, under MPS (both clients at 100 %),
under fracgpu (the latency tenant --priority high, the batch normal), under fracgpu over MPS and
under HAMi-core where given; regular arrivals (a think time after each reply) and Poisson
arrivals (an open loop) while the batch runs.

The arrival rates follow each model's own service time, measured alone first: a regular think
time of max(1 ms, alone p50) and Poisson arrivals with mean gap max(4 ms, 4 x alone p50), so that
the latency tenant alone keeps the GPU at most a quarter busy in the open loop, whatever the model.

Rows go to the "latency" table with a "tenant" column (encoder / llm); batch_ratio is, for each
way, the mean over the batch's processes of its throughput over the latency window against the
same process's under native sharing over its own window (so that a three-process batch of
different units is weighed per process). The goal is losses.goal(), as for the spin tenants.
Warm workers: one latency worker per way holds both models (one --mode per round), one worker per
batch kind; the three-process batch reuses the single kinds' workers."""
from losses import goal
from modes import MODE_NAMES
from phases_latency import ARRIVALS, LAT_FIELDS, PREFIX, STAGES, _f, cdf_points

TENANTS = ("encoder", "llm")
# batch kind: workload kinds of its processes (workloads.py); "memory" runs in the driver-API client
BATCHES = [("tftrain", ["tftrain"]), ("compiled", ["compiled"]), ("tiny", ["eager"]), ("copy", ["memory"]),
           ("multi", ["tftrain", "compiled", "eager"])]
REQUESTS = {"regular": 300, "poisson": 300}
MIN_REQUESTS = 100
MAX_SECONDS = 8.0  # one measurement's cap (regular or Poisson, one model)


def available(b):
    """'' when the real tenants can run here, else why not."""
    if b.sim:
        return "the simulated GPU runs no PyTorch"
    if not b.torch_ok:
        return "PyTorch with CUDA is not there (or --backend driver)"
    return ""


def stage_specs(modes):
    specs = []
    for m in modes:
        p = PREFIX[m]
        specs.append({"name": "rl-" + p, "kind": "encoder", "mode": m, "prepare": ["llm"],
                      "frac": ["--priority", "high"]})
        for k in ("tftrain", "compiled", "eager", "memory"):
            specs.append({"name": "rb%s-%s" % (p, k), "kind": k, "mode": m, "driver": k == "memory"})
    return specs


def lat_args(tenant, arrival, think, scale):
    """A measurement: --requests requests, but at most MAX_SECONDS (scaled): where a way makes
    each request far slower than alone (native time slicing can hold every kernel of a request
    for a time slice), the row has fewer requests (its `*_requests`) instead of eating the budget."""
    n = max(MIN_REQUESTS, int(REQUESTS[arrival] * scale))
    return ["--mode", tenant, "--arrival", arrival, "--requests", n, "--think-us", "%.0f" % think[tenant][arrival],
            "--seconds", "%.1f" % max(2.0, MAX_SECONDS * scale), "--warmup-ms", 150 if arrival == "regular" else 0]


def measure_tenants(b, lat, think, scale):
    got = {}
    for tenant in TENANTS:
        for arrival in ARRIVALS:
            got[(tenant, arrival)] = lat.collect(lat.go(lat_args(tenant, arrival, think, scale)), 60) \
                if lat.alive() else {"ok": False, "error": lat.why_dead()}
    return got


def run_alone(b, plan):
    """Each model alone (the native latency worker), regular first: its p50 sets the think times."""
    lat = b.pool.workers["rl-" + PREFIX["native"]]
    s = plan.scale()
    think, got = {}, {}
    for tenant in TENANTS:
        think[tenant] = {"regular": 1000.0, "poisson": 4000.0}
        r = lat.collect(lat.go(lat_args(tenant, "regular", think, s)), 60)
        p50_us = (r.get("p50_ms") or 0) * 1000.0 if r.get("ok") else 0.0
        think[tenant] = {"regular": max(1000.0, p50_us), "poisson": max(4000.0, 4 * p50_us)}
        got[(tenant, "regular")] = r
        got[(tenant, "poisson")] = lat.collect(lat.go(lat_args(tenant, "poisson", think, s)), 60)
    plan.done()
    return got, think


def run_pair(b, plan, mode, kinds, think):
    lat = b.pool.workers["rl-" + PREFIX[mode]]
    batch = [b.pool.workers["rb%s-%s" % (PREFIX[mode], k)] for k in kinds]
    s = plan.scale()
    got = {}

    def during(stop):
        got.update(measure_tenants(b, lat, think, s))

    res = b.pool.round([(w, ["--seconds", 120, "--stop-file", "STOP"]) for w in batch], during=during, limit=30)
    plan.done()
    return got, res


def latency_real(b, pb):
    modes = [m for m in ("native", "frac", "hami", "mps", "fmps") if b.available(m)]
    stages = [st for st in (tuple(m for m in s if m in modes) for s in STAGES) if st]
    # A round: 2 models x (regular + Poisson); ~1-3 ms per request plus its think time.
    cost = 2 * (REQUESTS["regular"] * 0.004 + REQUESTS["poisson"] * 0.008) + 1.0
    wave = 25.0  # PyTorch workers, transformers models and a torch.compile per way
    plan = pb.rounds(1 + len(BATCHES) * len(modes), cost, minimum=0.3, overhead=1.0, learn="cost",
                     fixed=wave * (len(stages) - 1))
    results, missing = {}, {}
    alone, think = {}, None
    for st in stages:
        for m in st:
            b.mode_ok(m)
        if b.left() < 30:
            missing.update({m: "time budget" for m in st})
            continue
        b.pool.start(stage_specs(st))
        if st is not stages[0]:
            plan.started(wave)
        if think is None:
            alone, think = run_alone(b, plan)
        for name, kinds in BATCHES:
            for m in st:
                if b.left() < 20:
                    missing[m] = "time budget"
                    continue
                results[(name, m)] = run_pair(b, plan, m, kinds, think)
        b.pool.retire()
        if "mps" in st:
            b.stop_mps()
        if "fmps" in st:
            b.stop_fmps()
    for name, kinds in BATCHES:
        per_mode = {m: results[(name, m)] for m in modes if (name, m) in results}
        for tenant in TENANTS:
            for arrival in ARRIVALS:
                row_for(b, name, kinds, tenant, arrival, alone.get((tenant, arrival), {}), think, per_mode, missing)


def process_rates(batch, lat):
    """Each batch process's rate over the latency window (None where it or the window failed)."""
    import analysis  # noqa: PLC0415
    if not lat.get("ok"):
        return None
    out = []
    for r in batch:
        if not r.get("ok"):
            return None
        out.append(analysis.rate(r, lat["t_start"], min(lat["t_end"], r["t_end"])))
    return None if any(x is None for x in out) else out


def row_for(b, name, kinds, tenant, arrival, alone, think, per_mode, missing):
    row = {"batch": name, "tenant": tenant, "arrival": arrival, "batch_kernel_ms": None,
           "batch_processes": len(kinds), "batch_kinds": kinds,
           "batch_impl": [b.wl.impl(k, k == "memory") for k in kinds], "request_kernel_ms": None,
           "request": alone.get("unit"), "latency_from": "submission", "alone_requests": alone.get("requests"),
           "think_us": (think or {}).get(tenant, {}).get(arrival)}
    for f in LAT_FIELDS:
        row["alone_" + f] = alone.get(f) if alone.get("ok") else None
    rates, curves = {}, {"alone": cdf_points(alone.get("lat_us", []))}
    for mode in ("native", "mps", "frac", "fmps", "hami"):
        key = MODE_NAMES[mode]
        for f in LAT_FIELDS:
            row["%s_%s" % (key, f)] = None
        if mode not in per_mode:
            if mode in missing:
                row[key + "_skipped"] = missing[mode]
            continue
        got, batch = per_mode[mode]
        lat = got.get((tenant, arrival), {})
        ok = lat.get("ok")
        for f in LAT_FIELDS:
            row["%s_%s" % (key, f)] = lat.get(f) if ok else None
        row[key + "_requests"] = lat.get("requests")
        if not ok or not all(r.get("ok") for r in batch):
            row[key + "_error"] = (lat.get("error") or "; ".join(str(r.get("error")) for r in batch
                                                                 if not r.get("ok")))[:600]
        rates[mode] = process_rates(batch, lat)
        row[key + "_batch_rates"] = rates[mode]
        curves[key] = cdf_points(lat.get("lat_us", []))
    nat = rates.get("native")
    for mode in ("frac", "fmps", "mps", "hami"):
        v = rates.get(mode)
        ratio = None
        if v is not None and nat and all(nat):
            ratio = sum(x / n for x, n in zip(v, nat)) / len(nat)
        row["batch_ratio" if mode == "frac" else MODE_NAMES[mode] + "_batch_ratio"] = ratio
    goal(row)
    b.rec.add("latency", **row)
    b.series["latency"].setdefault("%s/%s" % (name, tenant), {})[arrival] = curves
    b.say("  %s %s %s: p99 native %s / mps %s / fracgpu %s / fracgpu-mps %s ms (alone %s), batch ratio %s / %s, "
          "goal %s" % (name, tenant, arrival, _f(row["native_p99_ms"]), _f(row["mps_p99_ms"]),
                       _f(row["fracgpu_p99_ms"]), _f(row["fracgpu_mps_p99_ms"]), _f(row["alone_p99_ms"]),
                       _f(row.get("batch_ratio")), _f(row.get("fracgpu_mps_batch_ratio")),
                       row["meets_goal_by"] or "not met"))
