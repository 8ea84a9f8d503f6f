"""Throughput phases of the benchmark: overhead (with and without the shim, alternated),
shares (weights against their targets over the common window and over 1 s / 100 ms
windows, efficiency = the tenants' normalised rates summed), work conservation (a lone
30 % tenant; a 70 % tenant switching on and off) and ceilings (the ceiling against GPU time
from the independent witness and against throughput, with the SM clock). Every rate is
normalised by the same kind's rate alone (native), so mixed tenants compare fairly."""
import analysis
from gpubench import median, spread

SPLITS = [(70, 30), (50, 50), (90, 10), (50, 30, 20)]
MIXED = ["train", "decode", "compute"]


def single(b, tag, cmd, mode, seconds, frac=()):
    """One process alone (no barrier): its JSON result."""
    env = b.env_for({"mode": mode, "tag": tag, "frac": list(frac)})
    p = b.spawn(tag, cmd, env, seconds)
    (r,) = b.finish([p])
    b.cleanup_group()
    return r


# ---------------------------------------------------------------- overhead
def overhead_items(b):
    sim, q = b.sim, b.quick
    secs = 0.5 if sim else 1.5
    items = [
        ("launch", "ns per empty launch", b.wl.driver("launch", "--count", 50000 if sim else 100000,
                                                       "--reps", 3), None),
        ("alloc", "us per cuMemAlloc+cuMemFree (1 MiB)", b.wl.driver("alloc", "--bytes", 1 << 20, "--count",
                                                                     1000 if q else 2000, "--reps", 3), None),
        ("eager", "us per op (%s small-op loop)" % ("PyTorch eager" if b.wl.impl("eager") == "torch" else "1 us kernel"),
         None, "eager"),
        ("graph", "us per CUDA graph replay (8 short kernels)", None, "graph"),
    ]
    out = []
    for name, unit, cmd, kind in items:
        if cmd is None:
            extra = ["--kernel-us", "2"] if kind == "graph" else []
            cmd = b.wl.command(kind, secs, b.path("ovh-%s.json" % name), "ovh-" + name, extra=extra)
        out.append((name, unit, cmd))
    return out


def value_of(r):
    if not r.get("ok"):
        return None
    if "value" in r:
        return r["value"]
    return 1e6 / r["rate"] if r.get("rate") else None  # us per unit


def overhead(b):
    pairs = 3 if b.quick else 4
    variants = ["native", "frac"] + (["hami"] if b.mode_ok("hami") else [])
    secs = 0.5 if b.sim else 1.5
    for name, unit, cmd in overhead_items(b):
        vals = {v: [] for v in variants}
        # A framework process costs seconds of start-up per run: two pairs of those.
        for i in range(pairs if name in ("launch", "alloc") or not b.torch_ok else 2):
            for v in variants:  # A B (C) A B (C): drift hits every variant alike
                r = single(b, "ovh-%s-%s-%d" % (name, v, i), cmd, v, secs)
                vals[v].append(value_of(r))
        ratios = [f / n for f, n in zip(vals["frac"], vals["native"]) if f and n]
        row = {"metric": name, "unit": unit, "pairs": len(vals["native"]), "native": median(vals["native"]),
               "fracgpu": median(vals["frac"]), "ratio": median(ratios), "ratio_spread": spread(ratios),
               "native_spread": spread(vals["native"]), "fracgpu_spread": spread(vals["frac"])}
        if "hami" in vals:
            hr = [h / n for h, n in zip(vals["hami"], vals["native"]) if h and n]
            row.update({"hami": median(vals["hami"]), "hami_ratio": median(hr), "hami_ratio_spread": spread(hr)})
        b.rec.add("overhead", **row)
        b.series["overhead"][name] = {"values": vals, "ratios": ratios}
        b.say("  overhead %s: native %s, fracgpu %s, ratio %s" % (name, _f(row["native"]), _f(row["fracgpu"]),
                                                                  _f(row["ratio"], "%.4f")))


# ---------------------------------------------------------------- shares
def share_group(b, setup, label, kinds, weights, specs):
    """Runs specs, records one row per tenant and the series for the plots."""
    alone = [b.alone_rate(k) for k in kinds]
    res = b.group(specs, b.win, witness=True)
    w = b.last_witness
    win = analysis.common_window(res)
    total_w = float(sum(weights)) if weights else None
    targets = [x / total_w for x in weights] if weights else [1.0 / len(kinds)] * len(kinds)
    if win is None:
        b.rec.add("shares", setup=setup, split=label, workload="+".join(kinds), tenant="-", target=None,
                  measured=None, efficiency=None, error="; ".join(r.get("error", "") for r in res if not r.get("ok")))
        return
    a, z = win
    _, sh, eff = analysis.shares(res, alone, a, z)
    per1 = analysis.windowed(res, alone, a, z, 1.0)
    per01 = analysis.windowed(res, alone, a, z, 0.1)
    for i, s in enumerate(specs):
        b.rec.add("shares", setup=setup, split=label, workload=kinds[i], impl=b.wl.impl(kinds[i]), tenant=s["tag"],
                  target=targets[i], measured=sh[i], error_points=(sh[i] - targets[i]) * 100 if sh[i] is not None else None,
                  efficiency=eff, window_s=z - a, windows_1s=analysis.window_stats(per1[i], targets[i]),
                  windows_100ms=analysis.window_stats(per01[i], targets[i]),
                  gpu_time=w.gpu_share(res[i].get("os_pid"), a, z) if w else None)
    key = "%s %s %s" % (setup, label, "/".join(sorted(set(kinds))) if len(set(kinds)) > 1 else kinds[0])
    b.series["shares"][key] = {"tenants": [s["tag"] for s in specs], "targets": targets,
                               "over_time": analysis.share_over_time(res, alone, a, z, 0.1)}
    b.say("  %s %s [%s]: %s (eff %s)" % (setup, label, ",".join(kinds), " / ".join(_f(x * 100 if x is not None else None, "%.1f") for x in sh), _f(eff, "%.3f")))


def shares(b):
    for split in SPLITS:
        label = "/".join(str(x) for x in split)
        # Full: every workload for every split; quick: all three at 70/30, compute-bound for the others.
        workloads = ["compute", "memory", "mixed"] if (not b.quick or split == (70, 30)) else ["compute"]
        for wk in workloads:
            kinds = [MIXED[i] for i in range(len(split))] if wk == "mixed" else [wk] * len(split)
            specs = [{"tag": "w%d-%s%d" % (w, k, i), "kind": k, "mode": "frac", "frac": ["--compute", str(w)]}
                     for i, (w, k) in enumerate(zip(split, kinds))]
            share_group(b, "fracgpu", label, kinds, list(split), specs)
    # Baselines on the same run: native time slicing cannot be told a split; MPS and HAMi-core by their knobs.
    for split in ((70, 30), (50, 50)):
        label = "/".join(str(x) for x in split)
        share_group(b, "native", label, ["compute"] * 2, list(split),
                    [{"tag": "n%d-%d" % (w, i), "kind": "compute", "mode": "native"} for i, w in enumerate(split)])
    for mode, setup in (("mps", "MPS"), ("hami", "HAMi-core")):
        if b.mode_ok(mode):
            share_group(b, setup, "70/30", ["compute"] * 2, [70, 30],
                        [{"tag": "%s%d" % (mode, w), "kind": "compute", "mode": mode, "pct": w} for w in (70, 30)])
        else:
            b.rec.add("shares", setup=setup, split="70/30", workload="compute", tenant="-", target=None,
                      measured=None, efficiency=None, skipped="not available here")


# ---------------------------------------------------------------- work conservation
def conserve(b):
    al = b.alone_rate("compute")
    (r,) = b.group([{"tag": "lone30", "kind": "compute", "mode": "frac", "frac": ["--compute", "30"]}], b.win)
    b.rec.add("conserve", case="lone --compute 30", period_ms=None,
              of_alone=r.get("rate") / al if r.get("ok") and al else None, target=1.0, error=r.get("error"))
    if b.mode_ok("mps"):
        (r,) = b.group([{"tag": "mps30", "kind": "compute", "mode": "mps", "pct": 30}], b.win)
        b.rec.add("conserve", case="MPS 30 % alone (baseline)", period_ms=None,
                  of_alone=r.get("rate") / al if r.get("ok") and al else None, target=None, error=r.get("error"))
    for period in (100, 1000):
        secs = max(b.win, 8 * period / 1000.0) if not (b.sim and b.quick) else max(b.win, 4 * period / 1000.0)
        # Both driver-API spin tenants (1 ms kernels): the on/off edges are exact, start-up short.
        specs = [{"tag": "on70-%d" % period, "kind": "onoff", "mode": "frac", "frac": ["--compute", "70"],
                  "extra": ["--period-ms", str(period)]},
                 {"tag": "c30-%d" % period, "kind": "compute", "mode": "frac", "frac": ["--compute", "30"],
                  "driver": True}]
        res = b.group(specs, secs)
        onoff_row(b, res, period, b.alone_rate("compute", driver=True))


def onoff_row(b, res, period, al):
    win = analysis.common_window(res)
    if win is None:
        b.rec.add("conserve", case="70 %% tenant on/off every %d ms" % period, period_ms=period, of_alone=None,
                  error="; ".join(r.get("error", "") for r in res if not r.get("ok")))
        return
    a, z = win
    A, B = res
    P = period / 1000.0
    skip = 0.2 * P  # the edge of each half: the hand-over itself
    off, on, a_on = [], [], []
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
                a_on.append(na)
            rb = analysis.rate(B, off_a + skip, off_a + P)
            if rb is not None and al:
                off.append(rb / al)
        k += 1
    b.rec.add("conserve", case="70 %% tenant on/off every %d ms" % period, period_ms=period,
              of_alone=median(off), target=1.0, off_spread=spread(off), share_when_on=median(on),
              share_when_on_target=0.3, on_spread=spread(on), periods=len(off))
    b.say("  on/off %d ms: the 30 %% tenant has %s of alone while the other is off, %s share while on" % (
        period, _f(median(off), "%.3f"), _f(median(on), "%.3f")))


# ---------------------------------------------------------------- ceilings
def ceilings(b):
    res = b.group([{"tag": "alone-clock", "kind": "compute", "mode": "native"}], b.win, witness=True)
    w = b.last_witness
    al = res[0].get("rate") if res[0].get("ok") else b.alone_rate("compute")
    win = analysis.common_window(res)
    alone_clock = w.sm_clock(*win) if w and win else None
    alone_gpu = w.gpu_share(res[0].get("os_pid"), *win) if w and win else None
    limits = (30,) if b.quick else (30, 50)
    for mode, setup in (("frac", "fracgpu --compute-limit"), ("hami", "HAMi-core SM limit")):
        if not b.mode_ok(mode):
            b.rec.add("ceilings", setup=setup, limit=None, skipped="not available here")
            continue
        for lim in limits:
            spec = {"tag": "lim%d-%s" % (lim, mode), "kind": "compute", "mode": mode, "pct": lim,
                    "frac": ["--compute-limit", str(lim)]}
            (r,) = b.group([spec], b.win, witness=True)
            w = b.last_witness
            win = analysis.common_window([r])
            gpu = w.gpu_share(r.get("os_pid"), *win) if w and win else None
            b.rec.add("ceilings", setup=setup, limit=lim / 100.0,
                      throughput_of_alone=r.get("rate") / al if r.get("ok") and al else None,
                      gpu_time=gpu, gpu_time_alone=alone_gpu,
                      gpu_time_vs_alone=gpu / alone_gpu if gpu is not None and alone_gpu else None,
                      sm_clock_mhz=w.sm_clock(*win) if w and win else None, alone_sm_clock_mhz=alone_clock,
                      witness="fakecuda busy time" if b.sim else "NVML per-process SM utilisation",
                      witness_error=w.error if w else None, error=r.get("error"))
            b.say("  %s %d: throughput %s of alone, GPU time %s" % (
                setup, lim, _f(r.get("rate") / al if r.get("ok") and al else None, "%.3f"), _f(gpu, "%.3f")))


def _f(v, spec="%.1f"):
    return "-" if v is None else spec % v


PHASES = {"overhead": (overhead, 110, 50), "shares": (shares, 170, 60), "conserve": (conserve, 50, 25),
          "ceilings": (ceilings, 35, 15)}
