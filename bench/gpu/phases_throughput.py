"""Throughput phases of the benchmark besides shares (phases_shares.py): overhead (with and
without the shim, alternated), work conservation (a lone 30 % tenant; a 70 % tenant switching
on and off) and ceilings (the ceiling against GPU time from the independent witness and
against throughput, with the SM clock). Every rate is normalised by the same kind's rate
alone (native). Each phase starts the workers it needs in one wave (pool.py) and measures in
rounds; launch and allocation are measured by fresh processes per pair, so that their spread
includes what differs between processes."""
import analysis
from gpubench import median, spread


def _f(v, spec="%.1f"):
    return "-" if v is None else spec % v


def _rate_of(r, al):
    return r.get("rate") / al if r.get("ok") and r.get("rate") is not None and al else None


# ---------------------------------------------------------------- overhead
def value_of(r):
    if not r.get("ok"):
        return None
    if "value" in r:
        return r["value"]
    return 1e6 / r["rate"] if r.get("rate") else None  # us per unit


# launchtime (fracgpu-bench-client): the host time of each cuLaunchKernel call; the figures of
# its JSON that become overhead rows (shallow: queue never full; deep: as the launch metric).
LAUNCH_CALL = [("launch_call_p50", "shallow_p50_ns", "ns per cuLaunchKernel call, median (queue shallow)"),
               ("launch_call_mean", "shallow_mean_ns", "ns per cuLaunchKernel call, mean (queue shallow)"),
               ("launch_call_p99", "shallow_p99_ns", "ns per cuLaunchKernel call, p99 (queue shallow)"),
               ("launch_deep_mean", "deep_mean_ns", "ns per cuLaunchKernel call, mean (queue full)"),
               ("launch_deep_stall", "deep_stall_ns_per_launch", "ns per launch in calls over 20 us (queue full)")]


def launchtime_values(r):
    """{metric: value} of a launchtime round (the median over its passes)."""
    passes = r.get("passes") or [] if r.get("ok") else []
    return {m: median([p.get(k) for p in passes if p.get(k) is not None]) for m, k, _ in LAUNCH_CALL}


def overhead(b, pb):
    # fracb: fracgpu with the --shim-b build of the shim, alternated with the others (A B A B)
    variants = ["native", "frac"] + (["fracb"] if b.available("fracb") else []) + \
        (["hami"] if b.available("hami") else [])
    # launch and allocation: fresh processes per pair (--overhead-pairs: more of them)
    pairs = getattr(b.args, "overhead_pairs", 0) or (3 if b.quick else 4)
    loop_pairs = (2 if b.quick and not b.sim else pairs) if not getattr(b.args, "overhead_pairs", 0) else pairs
    secs = 0.5 if b.sim or b.quick else 0.6
    vals = {m: {v: [] for v in variants} for m in ["launch", "alloc", "eager", "graph"] + [x[0] for x in LAUNCH_CALL]}
    for m in ["launch", "alloc"] + [x[0] for x in LAUNCH_CALL]:
        vals[m]["shim"] = []
        vals[m]["high"] = []
    wave = 1.0 if b.sim else (6.0 if b.torch_ok else 2.0)
    plan = pb.rounds(loop_pairs * len(variants) * 2, secs, minimum=0.4, overhead=0.3,
                     fixed=wave + pairs * (len(variants) + 1) * 1.0)
    launch = ["--count", 50000, "--reps", 2]
    alloc = ["--bytes", 1 << 20, "--count", 1000, "--reps", 3]
    launchtime = ["--count", 5000 if b.sim else 20000, "--reps", 1, "--sync-every", 32]
    warm = b.pool.start([{"name": "o-%s-%s" % (v, k), "kind": k, "mode": v, "pct": None,
                          "extra": ["--kernel-us", "2"] if k == "graph" else []}
                         for k in ("eager", "graph") for v in variants])
    plan.started(wave)
    by = {w.name: w for w in warm}
    for i in range(pairs):
        if b.left() < 15:
            break
        # Fresh launch/alloc processes per pair (one per way, started together), then A B (C)
        # A B (C): drift hits every way alike.
        # "shim": preloaded without a tenant, which splits fracgpu's cost into the
        # interposition's own and the tenant's policies (launch and allocation only).
        # "high": a fracgpu tenant of --priority high (its launches take the burst path).
        fresh_ways = variants + ["shim", "high"]
        fresh = b.pool.start([{"name": "o-%s-la%d" % (v, i), "kind": "launch", "mode": "frac" if v == "high" else v,
                               "frac": ["--priority", "high"] if v == "high" else []} for v in fresh_ways])
        # launchtime before alloc: no allocation of this process can change its launch path
        for metric, args in (("launch", launch), ("launchtime", launchtime), ("alloc", alloc)):
            for v, w in zip(fresh_ways, fresh):
                (r,) = b.pool.round([(w, ["--mode", metric] + [str(a) for a in args])], limit=60)
                if metric == "launchtime":
                    for m, x in launchtime_values(r).items():
                        vals[m][v].append(x)
                else:
                    vals[metric][v].append(value_of(r))
        b.pool.retire(keep=lambda w: "-la" not in w.name)
        plan.started((len(variants) + 1) * 1.0)
        if i >= loop_pairs:
            continue
        for metric in ("eager", "graph"):
            for v in variants:
                win = plan.window()
                (r,) = b.pool.round([(by["o-%s-%s" % (v, metric)], ["--seconds", "%.3f" % win, "--warmup-ms", "30"])],
                                    barrier=False)
                plan.done()
                vals[metric][v].append(value_of(r))
    units = {"launch": "ns per empty launch", "alloc": "us per cuMemAlloc+cuMemFree (1 MiB)",
             "eager": "us per op (%s small-op loop)" % ("PyTorch eager" if b.wl.impl("eager") == "torch" else "1 us kernel"),
             "graph": "us per CUDA graph replay (8 short kernels)"}
    units.update({m: u for m, _, u in LAUNCH_CALL})
    for name in ["launch"] + [x[0] for x in LAUNCH_CALL] + ["alloc", "eager", "graph"]:
        overhead_row(b, name, units[name], vals[name])


def overhead_row(b, name, unit, vals):
    ratios = [f / n for f, n in zip(vals["frac"], vals["native"]) if f and n]
    row = {"metric": name, "unit": unit, "pairs": len(vals["native"]), "native": median(vals["native"]),
           "fracgpu": median(vals["frac"]), "ratio": median(ratios), "ratio_spread": spread(ratios),
           "native_spread": spread(vals["native"]), "fracgpu_spread": spread(vals["frac"]),
           "fresh_processes": name not in ("eager", "graph")}
    for way in ("hami", "shim", "high", "fracb"):
        if way in vals:
            wr = [h / n for h, n in zip(vals[way], vals["native"]) if h and n]
            row.update({way: median(vals[way]), way + "_ratio": median(wr), way + "_ratio_spread": spread(wr)})
    b.rec.add("overhead", **row)
    b.series["overhead"][name] = {"values": vals, "ratios": ratios}
    b.say("  overhead %s: native %s, fracgpu %s, ratio %s%s" % (
        name, _f(row["native"]), _f(row["fracgpu"]), _f(row["ratio"], "%.4f"),
        ", shim without a tenant %s, high tenant %s" % (_f(row["shim_ratio"], "%.4f"), _f(row.get("high_ratio"), "%.4f"))
        if "shim_ratio" in row else ""))


# ---------------------------------------------------------------- work conservation
def onoff_seconds(b, period, scale):
    cycles = (2 if b.quick else 3) if period >= 1000 else (4 if b.quick else 8)
    return max(b.win * scale, max(2, round(cycles * scale)) * 2 * period / 1000.0)


def conserve(b, pb):
    scale = pb.scale()
    # f-0 is the shares phase's first fracgpu tenant where that phase ran (kept warm), else new.
    specs = [{"name": "f-0", "kind": "compute", "mode": "frac", "frac": ["--compute", "30"], "keep": ["ceilings"]},
             {"name": "c-on70", "kind": "onoff", "mode": "frac", "frac": ["--compute", "70"]},
             {"name": "c-30", "kind": "compute", "mode": "frac", "frac": ["--compute", "30"], "driver": True}]
    lone, on70, c30 = b.pool.start(specs)
    b.set_tenant(lone, "--compute", "30", "--compute-limit", "none")
    lone.weight = "30"
    al = b.alone_rate("compute")
    win = "%.3f" % max(0.5, b.win * scale)
    (r,) = b.pool.round([(lone, b.wl.round_args("compute", lone.torch) + ["--seconds", win, "--warmup-ms", "50"])])
    b.rec.add("conserve", case="lone --compute 30", period_ms=None, of_alone=_rate_of(r, al), target=1.0,
              error=r.get("error"))
    ald = b.alone_rate("compute", driver=True)
    for period in (100, 1000):
        secs = "%.3f" % onoff_seconds(b, period, scale)
        res = b.pool.round([(on70, ["--seconds", secs, "--period-ms", period]), (c30, ["--seconds", secs])])
        onoff_row(b, res, period, ald)
    mps30 = getattr(b, "mps30_alone", None)
    if mps30 is None and b.mode_ok("mps"):  # the shares phase did not measure it
        (m,) = b.pool.start([{"name": "m-30", "kind": "compute", "mode": "mps", "pct": 30}])
        (r,) = b.pool.round([(m, b.wl.round_args("compute", m.torch) + ["--seconds", win, "--warmup-ms", "50"])])
        mps30 = _rate_of(r, al)
    if b.available("mps"):
        b.rec.add("conserve", case="MPS 30 % alone (baseline)", period_ms=None, of_alone=mps30, target=None,
                  measured_in="shares" if getattr(b, "mps30_alone", None) is not None else "conserve")


def onoff_row(b, res, period, al):
    win = analysis.common_window(res)
    case = "70 %% tenant on/off every %d ms" % period
    if win is None:
        b.rec.add("conserve", case=case, period_ms=period, of_alone=None,
                  error="; ".join(str(r.get("error", "")) for r in res if not r.get("ok")))
        return
    a, z = win
    A, B = res
    P = period / 1000.0
    skip = 0.2 * P  # the edge of each half: the hand-over itself
    off, on = [], []
    k = 0
    while True:
        on_a = A["t_start"] + 2 * k * P
        off_a = on_a + P
        if off_a + P > z:
            break
        if on_a >= a:
            rb = analysis.rate(B, on_a + skip, off_a)
            ra = analysis.rate(A, on_a + skip, off_a)
            if rb is not None and ra is not None and al:
                nb, na = rb / al, ra / al
                on.append(nb / (na + nb) if na + nb else None)
            rb = analysis.rate(B, off_a + skip, off_a + P)
            if rb is not None and al:
                off.append(rb / al)
        k += 1
    b.rec.add("conserve", case=case, period_ms=period, of_alone=median(off), target=1.0, off_spread=spread(off),
              share_when_on=median(on), share_when_on_target=0.3, on_spread=spread(on), periods=len(off),
              window_s=z - a)
    b.say("  on/off %d ms: the 30 %% tenant has %s of alone while the other is off, %s share while on" % (
        period, _f(median(off), "%.3f"), _f(median(on), "%.3f")))


# ---------------------------------------------------------------- ceilings
def ceilings(b, pb):
    """Each ceiling alone, with the alone run of the same worker kind just before. fracgpu: the
    tenant f-0 with --compute-limit set per round; HAMi-core: its 30 % and 50 % workers (kept
    from the shares phase where it ran)."""
    limits = (30,) if b.quick else (30, 50)
    specs = [{"name": "n-0", "kind": "compute", "mode": "native"},
             {"name": "f-0", "kind": "compute", "mode": "frac", "frac": ["--compute", "100"]}]
    if b.available("hami"):
        specs += [{"name": "h-%d" % lim, "kind": "compute", "mode": "hami", "pct": lim} for lim in limits]
    workers = {w.name: w for w in b.pool.start(specs)}
    win = ["--seconds", "%.3f" % max(0.5, b.win * pb.scale()), "--warmup-ms", "50"]
    alone_w = workers["n-0"]
    res = b.pool.round([(alone_w, b.wl.round_args("compute", alone_w.torch) + win)], witness=True)
    w = b.last_witness
    al = res[0].get("rate") if res[0].get("ok") else b.alone_rate("compute")
    span = analysis.common_window(res)
    alone_clock = w.sm_clock(*span) if w and span else None
    alone_gpu = w.gpu_share(res[0].get("os_pid"), *span) if w and span else None
    for mode, setup in (("frac", "fracgpu --compute-limit"), ("hami", "HAMi-core SM limit")):
        if not b.available(mode):
            b.rec.add("ceilings", setup=setup, limit=None, skipped="not available here")
            continue
        for lim in limits:
            worker = workers["f-0" if mode == "frac" else "h-%d" % lim]
            if mode == "frac":
                b.set_tenant(worker, "--compute-limit", str(lim))
            (r,) = b.pool.round([(worker, b.wl.round_args("compute", worker.torch) + win)], witness=True)
            w = b.last_witness
            span = analysis.common_window([r])
            gpu = w.gpu_share(r.get("os_pid"), *span) if w and span else None
            b.rec.add("ceilings", setup=setup, limit=lim / 100.0, throughput_of_alone=_rate_of(r, al),
                      gpu_time=gpu, gpu_time_alone=alone_gpu,
                      gpu_time_vs_alone=gpu / alone_gpu if gpu is not None and alone_gpu else None,
                      sm_clock_mhz=w.sm_clock(*span) if w and span else None, alone_sm_clock_mhz=alone_clock,
                      witness="fakecuda busy time" if b.sim else "NVML per-process SM utilisation",
                      witness_error=w.error if w else None, error=r.get("error"))
            b.say("  %s %d: throughput %s of alone, GPU time %s" % (setup, lim, _f(_rate_of(r, al), "%.3f"),
                                                                   _f(gpu, "%.3f")))
            t = _rate_of(r, al)
            if mode == "hami" and t is not None and t > lim / 100.0 + 0.25:
                b.rec.note("HAMi-core's SM limit did not act here: at a %d %% limit the tenant ran at %.3f of its "
                           "alone rate (GPU time %s), so its share rows are unlimited sharing too" % (
                               lim, t, _f(gpu, "%.3f")))


PHASES = {"overhead": overhead, "conserve": conserve, "ceilings": ceilings}
