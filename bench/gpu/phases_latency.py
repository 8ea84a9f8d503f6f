"""Latency isolation: a latency-sensitive tenant (one 0.1 ms kernel + sync per request) next to
each batch kind, natively, under MPS, under fracgpu (the latency tenant --priority high, the
batch normal), under fracgpu over MPS (the broker's --mps: the same tenants as MPS clients,
high at client priority 0) and under HAMi-core where given; regular arrivals (a think time
after each reply) and Poisson arrivals (an open loop) while the batch runs. The request
latency is counted from submission to the end of the sync; for Poisson arrivals the queueing
delay from the scheduled arrival is kept separately (latency.cpp says why). The batch keeps
running through both arrival patterns; its throughput over each latency window, against
native sharing's over the same pattern, is the price it pays (batch_ratio).

Warm workers: per way of sharing, the latency client and every batch process are started in
one wave and each (batch kind, way) is one round, the ways without MPS first, then MPS, then
fracgpu-mps (their daemons never run at once). A row meets the goal when the better of
fracgpu's two ways has a p99 below MPS's and within 1.5 x alone + 0.1 ms while its batch
keeps at least 0.9 of its native throughput."""
import analysis
from losses import goal
from modes import MODE_NAMES

# batch kind: (workload kinds of its processes, nominal kernel ms)
BATCHES = [
    ("k0.05", ["k0.05"], 0.05), ("k0.2", ["k0.2"], 0.2), ("k2", ["k2"], 2.0),
    ("copy", ["memory"], None), ("train", ["train"], None), ("graph", ["graph"], 0.2),
    ("multi", ["k0.2", "k0.2", "k0.2"], 0.2),
]
# --quick on a real GPU: five kinds, 0.05 ms to 2 ms kernels, a memory-bound and a training loop.
QUICK_BATCHES = ("k0.05", "k2", "copy", "train", "multi")
ARRIVALS = ("regular", "poisson")
REQUEST_US = 100
# Regular: a think time after each reply (closed loop). Poisson: open loop at 250 requests/s, low
# enough that native time slicing (a reply can wait a whole time slice) mostly keeps up.
THINK_US = {"regular": 1000, "poisson": 4000}
STAGES = [("native", "frac", "hami"), ("mps",), ("fmps",)]
PREFIX = {"native": "n", "frac": "f", "hami": "h", "mps": "m", "fmps": "fm"}


def batches(b):
    return [x for x in BATCHES if not (b.quick and not b.sim) or x[0] in QUICK_BATCHES]


def requests(b, arrival):
    n = 120 if b.sim and b.quick else 400 if b.quick else 1000
    return n if arrival == "regular" else int(n * 0.4)


SPIN_KINDS = ("k0.05", "k0.2", "k2")


def batch_workers(mode, kinds):
    """Worker names of a batch: the spin kinds share workers s0, s1, s2 (a round sets the
    kernel length), the others have one each."""
    p, out, spins = PREFIX[mode], [], 0
    for k in kinds:
        if k in SPIN_KINDS:
            out.append("b%s-s%d" % (p, spins))
            spins += 1
        else:
            out.append("b%s-%s" % (p, k))
    return out


def stage_specs(b, modes, bl):
    specs = {}
    for m in modes:
        specs["lat-" + PREFIX[m]] = {"name": "lat-" + PREFIX[m], "kind": "latency", "mode": m,
                                     "frac": ["--priority", "high"]}
        for _, kinds, _ in bl:
            for name, k in zip(batch_workers(m, kinds), kinds):
                # Copies are the same through the driver API as through PyTorch: no framework start-up.
                specs.setdefault(name, {"name": name, "kind": "k0.2" if k in SPIN_KINDS else k, "mode": m,
                                        "driver": k == "memory"})
    return list(specs.values())


def lat_args(b, arrival, scale):
    n = max(30 if b.sim else 150, int(requests(b, arrival) * scale))
    return ["--arrival", arrival, "--requests", n, "--think-us", THINK_US[arrival], "--seconds", 30,
            "--warmup-ms", 150 if arrival == "regular" else 0]


def run_alone(b, plan, mode="native"):
    lat = b.pool.workers["lat-" + PREFIX[mode]]
    s = plan.scale()
    got = {a: lat.collect(lat.go(lat_args(b, a, s)), 40) for a in ARRIVALS}
    plan.done()
    return got


def run_pair(b, plan, mode, kinds):
    """The latency client's regular then Poisson rounds while the batch workers run."""
    lat = b.pool.workers["lat-" + PREFIX[mode]]
    batch = [b.pool.workers[n] for n in batch_workers(mode, kinds)]
    s = plan.scale()
    got = {}

    def during(stop):
        for arrival in ARRIVALS:
            got[arrival] = lat.collect(lat.go(lat_args(b, arrival, s)), 40) if lat.alive() else {
                "ok": False, "error": lat.why_dead()}

    args = [b.wl.round_args(k, w.torch) if k in SPIN_KINDS else [] for w, k in zip(batch, kinds)]
    res = b.pool.round([(w, a + ["--seconds", 90, "--stop-file", "STOP"]) for w, a in zip(batch, args)],
                       during=during, limit=20)
    plan.done()
    return got, res


def latency(b, pb):
    if getattr(b.args, "latency_tenants", "spin") == "real":
        import phases_latency_real  # noqa: PLC0415 - it imports this module's helpers
        why = phases_latency_real.available(b)
        if not why:
            return phases_latency_real.latency_real(b, pb)
        b.rec.note("latency: real tenants not run (%s): the spin-kernel tenant instead" % why)
    bl = batches(b)
    modes = [m for m in ("native", "frac", "hami", "mps", "fmps") if b.available(m)]
    stages = [st for st in (tuple(m for m in s if m in modes) for s in STAGES) if st]
    cost = (requests(b, "regular") * (0.004 if b.sim else 0.0022) + requests(b, "poisson") * 0.004 + 0.3)
    wave = 1.5 if b.sim else (10.0 if b.torch_ok else 3.0)
    plan = pb.rounds(1 + len(bl) * len(modes), cost, minimum=0.3, overhead=0.4, learn="cost",
                     fixed=wave * (len(stages) - 1))
    results, alone, missing = {}, {}, {}
    for st in stages:
        for m in st:
            b.mode_ok(m)
        if b.left() < 20:
            missing.update({m: "time budget" for m in st})
            continue
        b.pool.start(stage_specs(b, st, bl))
        if st is not stages[0]:
            plan.started(wave)
        if not alone:
            alone = run_alone(b, plan)
        for name, kinds, _ in bl:
            for m in st:
                if b.left() < 15:
                    missing[m] = "time budget"
                    continue
                results[(name, m)] = run_pair(b, plan, m, kinds)
        b.pool.retire()
        if "mps" in st:
            b.stop_mps()
        if "fmps" in st:
            b.stop_fmps()
    for name, kinds, kernel_ms in BATCHES:
        if name not in [x[0] for x in bl]:
            b.rec.add("latency", batch=name, skipped="not in --quick")
            continue
        per_mode = {m: results[(name, m)] for m in modes if (name, m) in results}
        for arrival in ARRIVALS:
            row_for(b, name, kinds, kernel_ms, arrival, alone.get(arrival, {}), per_mode, missing)


def batch_rate(batch, lat):
    if not lat.get("ok") or not all(r.get("ok") for r in batch):
        return None
    rates = [analysis.rate(r, lat["t_start"], min(lat["t_end"], r["t_end"])) for r in batch]
    return sum(rates) if all(x is not None for x in rates) else None


def cdf_points(lat_us, n=400):
    """n quantiles of the latencies (ms), for the CDF plots."""
    s = sorted(x / 1000.0 for x in lat_us)
    if not s:
        return []
    return [s[min(len(s) - 1, int(i * (len(s) - 1) / (n - 1)))] for i in range(n)]


LAT_FIELDS = ("p50_ms", "p99_ms", "p999_ms", "queue_p50_ms", "queue_p99_ms", "response_p99_ms")


def row_for(b, name, kinds, kernel_ms, arrival, alone, per_mode, missing):
    row = {"batch": name, "arrival": arrival, "batch_kernel_ms": kernel_ms, "batch_processes": len(kinds),
           "batch_impl": b.wl.impl(kinds[0], kinds[0] == "memory"), "request_kernel_ms": REQUEST_US / 1000.0,
           "latency_from": "submission", "alone_requests": alone.get("requests")}
    for f in LAT_FIELDS:
        row["alone_" + f] = alone.get(f) if alone.get("ok") else None
    rates = {}
    curves = {"alone": cdf_points(alone.get("lat_us", []))}
    for mode in ("native", "mps", "frac", "fmps", "hami"):
        key = MODE_NAMES[mode]
        for f in LAT_FIELDS:
            row["%s_%s" % (key, f)] = None
        if mode not in per_mode:
            if mode in missing:
                row[key + "_skipped"] = missing[mode]
            continue
        got, batch = per_mode[mode]
        lat = got.get(arrival, {})
        ok = lat.get("ok")
        for f in LAT_FIELDS:
            row["%s_%s" % (key, f)] = lat.get(f) if ok else None
        row[key + "_requests"] = lat.get("requests")
        if not ok:
            row[key + "_error"] = lat.get("error") or "; ".join(str(r.get("error")) for r in batch if not r.get("ok"))
        rates[mode] = batch_rate(batch, lat)
        row[key + "_batch_rate"] = rates[mode]
        curves[key] = cdf_points(lat.get("lat_us", []))
    nat = rates.get("native")
    for mode in ("frac", "fmps", "mps", "hami"):
        v = rates.get(mode)
        row["batch_ratio" if mode == "frac" else MODE_NAMES[mode] + "_batch_ratio"] = v / nat if v is not None and nat else None
    goal(row)
    b.rec.add("latency", **row)
    b.series["latency"].setdefault(name, {})[arrival] = curves
    b.say("  %s %s: p99 native %s / mps %s / fracgpu %s / fracgpu-mps %s ms (alone %s), batch ratio %s, goal %s" % (
        name, arrival, _f(row["native_p99_ms"]), _f(row["mps_p99_ms"]), _f(row["fracgpu_p99_ms"]),
        _f(row["fracgpu_mps_p99_ms"]), _f(row["alone_p99_ms"]), _f(row.get("batch_ratio")),
        row["meets_goal_by"] or "not met"))


def _f(v):
    return "-" if v is None else "%.3f" % v


PHASES = {"latency": latency}
