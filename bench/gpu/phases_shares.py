"""The shares phase: weights 70/30, 50/50, 90/10 and 50/30/20 for compute-bound, memory-bound
and mixed tenants (a training step, a decode loop, a compute tenant), under fracgpu
(--compute weights), MPS (active-thread percentages), HAMi-core (SM limits), fracgpu over
MPS (compute-bound only: the optional column) and native time slicing (which cannot be told a
split: one run per number of tenants, shown against every split's targets).

Warm workers (pool.py) make this affordable: per way of sharing, one wave starts every
process it needs at once, and each scenario is then one round; a worker serves every kind (the
round names it: PyTorch builds each model on first use). fracgpu's workers are three tenants
whose weights `fracgpu tenant update` changes between rounds (they apply at once); MPS's and
HAMi-core's knobs are fixed when a process starts, so those get one worker per percentage. Each tenant's rate over the window all of them measured is divided by
its kind's rate alone (native); share = that over the sum; efficiency = the sum."""
import analysis
from modes import SETUPS

SPLITS = [(70, 30), (50, 50), (90, 10), (50, 30, 20)]
MIXED = ["train", "decode", "compute"]
WORKLOADS = ["compute", "memory", "mixed"]
# The stages of the phase, one wave of warm workers each (the MPS ways last, one at a time).
STAGES = [("native", "frac"), ("hami",), ("mps",), ("fmps",)]


def scenarios(b):
    """(split, workload): full: every pair; quick: every workload at 70/30, compute for the rest."""
    return [(s, wk) for s in SPLITS for wk in WORKLOADS if not b.quick or s == (70, 30) or wk == "compute"]


def kinds_of(split, wk):
    return [MIXED[i] for i in range(len(split))] if wk == "mixed" else [wk] * len(split)


def label(split):
    return "/".join(str(x) for x in split)


def fmps_scenarios(b):
    return [(s, wk) for s, wk in scenarios(b) if wk == "compute" and (not b.quick or s == (70, 30))]


# ---------------------------------------------------------------- the workers each way needs
# Every worker serves every kind (a round names it), so a way needs as many processes as a
# scenario has tenants (three), MPS and HAMi-core one per percentage.
PREFIX = {"native": "n", "frac": "f", "fmps": "fm", "mps": "m", "hami": "h"}
KEEP = {"n-0": ["conserve", "ceilings"], "f-0": ["conserve", "ceilings"], "h-30": ["ceilings"],
        "h-50": ["ceilings"]}


def assign(mode, split, wk):
    """[(worker spec, kind)] of one scenario: by position for native, fracgpu and fracgpu-mps
    (weights set per round), by percentage for MPS and HAMi-core (fixed at their start)."""
    out, seen = [], {}
    for i, (w, k) in enumerate(zip(split, kinds_of(split, wk))):
        if mode in ("native", "frac", "fmps"):
            name = "%s-%d" % (PREFIX[mode], i)
            spec = {"name": name, "kind": "compute", "mode": mode, "frac": ["--compute", str(w)]}
        else:
            n = seen.get(w, 0)
            seen[w] = n + 1
            name = "%s-%d%s" % (PREFIX[mode], w, "" if n == 0 else "b")
            spec = {"name": name, "kind": "compute", "mode": mode, "pct": w}
        spec["keep"] = KEEP.get(name, [])
        out.append((spec, k))
    return out


def stage_specs(b, modes):
    """Every worker of a stage, each told every kind its rounds will run (built at its start)."""
    out, kinds = {}, {}
    for m in modes:
        for split, wk in (fmps_scenarios(b) if m == "fmps" else scenarios(b)):
            for s, k in assign(m, split, wk):
                out.setdefault(s["name"], s)
                kinds.setdefault(s["name"], set()).add(k)
    for name, s in out.items():
        s["prepare"] = sorted(kinds[name])
    return list(out.values())


# ---------------------------------------------------------------- rounds and rows
def measure(b, plan, setup, split, wk, assigned):
    """One scenario under one way of sharing: its round, then one row per tenant."""
    kinds = [k for _, k in assigned]
    alone = [b.alone_rate(k) for k in kinds]
    workers = b.pool.start([s for s, _ in assigned])
    for w, (s, _) in zip(workers, assigned):
        if s["mode"] in ("frac", "fmps") and getattr(w, "weight", None) != s["frac"][1]:
            if b.set_tenant(w, "--compute", s["frac"][1], "--compute-limit", "none"):
                w.weight = s["frac"][1]
    res = b.pool.round([(w, window_args(b, plan, w, k)) for w, k in zip(workers, kinds)], witness=True)
    plan.done()
    record(b, setup, label(split), kinds, list(split), [w.name for w in workers], res, alone, scenario=wk)
    return res


def window_args(b, plan, worker, kind):
    return b.wl.round_args(kind, worker.torch) + ["--seconds", "%.3f" % plan.window(), "--warmup-ms", "50"]


def record(b, setup, lab, kinds, weights, tags, res, alone, same_run=None, scenario=None):
    w = b.last_witness
    win = analysis.common_window(res)
    targets = [x / float(sum(weights)) for x in weights]
    if win is None:
        b.rec.add("shares", setup=setup, split=lab, scenario=scenario, workload="+".join(kinds), tenant="-", target=None,
                  measured=None, efficiency=None, error="; ".join(str(r.get("error", "")) for r in res if not r.get("ok")))
        return
    a, z = win
    _, sh, eff = analysis.shares(res, alone, a, z)
    per1 = analysis.windowed(res, alone, a, z, 1.0)
    per01 = analysis.windowed(res, alone, a, z, 0.1)
    for i, tag in enumerate(tags):
        b.rec.add("shares", setup=setup, split=lab, scenario=scenario, workload=kinds[i], impl=b.wl.impl(kinds[i]),
                  tenant=tag,
                  target=targets[i], measured=sh[i], error_points=(sh[i] - targets[i]) * 100 if sh[i] is not None else None,
                  efficiency=eff, window_s=z - a, windows_1s=analysis.window_stats(per1[i], targets[i]),
                  windows_100ms=analysis.window_stats(per01[i], targets[i]), same_run_as=same_run,
                  gpu_time=w.gpu_share(res[i].get("os_pid"), a, z) if w else None)
    if same_run is None:  # one plot per run
        key = "%s %s %s" % (setup, lab, "/".join(sorted(set(kinds))) if len(set(kinds)) > 1 else kinds[0])
        b.series["shares"][key] = {"tenants": tags, "targets": targets,
                                   "over_time": analysis.share_over_time(res, alone, a, z, 0.1)}
    b.say("  %s %s [%s]: %s (eff %s)" % (setup, lab, ",".join(kinds), " / ".join(
        "-" if x is None else "%.1f" % (x * 100) for x in sh), "-" if eff is None else "%.3f" % eff))


def skipped(b, setup, why):
    b.rec.add("shares", setup=setup, split="-", workload="-", tenant="-", target=None, measured=None,
              efficiency=None, skipped=why)


def shares(b, pb):
    modes = [m for m in ("native", "frac", "hami", "mps", "fmps") if b.available(m)]
    scen, fscen = scenarios(b), fmps_scenarios(b)
    natives = {(wk, len(s)) for s, wk in scen}
    n = 4 + len(natives) + len(scen) * sum(1 for m in modes if m in ("frac", "hami", "mps")) + \
        (len(fscen) if "fmps" in modes else 0) + (1 if "mps" in modes else 0)
    stages = [st for st in (tuple(m for m in s if m in modes) for s in STAGES) if st]
    wave = 1.5 if b.sim else (7.0 if b.torch_ok else 3.0)
    plan = pb.rounds(n, b.win, minimum=0.5, overhead=0.5 if b.sim else 0.4, fixed=wave * (len(stages) - 1))
    b.plan = plan  # the alone references are rounds of this plan too
    for m in ("mps", "hami", "fmps"):
        if m not in modes:
            skipped(b, SETUPS[m], "not available here")
    for st in stages:
        if b.left() < 20:
            for m in st:
                skipped(b, SETUPS[m], "time budget")
            continue
        for m in st:
            b.mode_ok(m)  # its daemon or broker first: the wave's processes are its clients
        b.pool.start(stage_specs(b, st))
        if st is not stages[0]:
            plan.started(wave)
        done_native = {}
        for split, wk in (fscen if st == ("fmps",) else scen):
            for m in st:
                if b.left() < 15:
                    break
                if m == "native":
                    native_row(b, plan, split, wk, done_native)
                else:
                    measure(b, plan, SETUPS[m], split, wk, assign(m, split, wk))
        if "mps" in st:
            mps_alone(b, plan)
        b.pool.retire(keep=b.kept)
        if "mps" in st:
            b.stop_mps()
        if "fmps" in st:
            b.stop_fmps()


def mps_alone(b, plan):
    """MPS at 30 % alone (the conservation phase's baseline that wastes): its worker is here."""
    w = b.pool.workers.get("m-30")
    if w is None or not w.alive():
        return
    (r,) = b.pool.round([(w, window_args(b, plan, w, "compute"))])
    plan.done()
    al = b.alone_rate("compute")
    b.mps30_alone = r.get("rate") / al if r.get("ok") and r.get("rate") and al else None


def native_row(b, plan, split, wk, done):
    """Native time slicing: one round per (workload, number of tenants), its shares shown
    against each split's targets (same_run_as names the round)."""
    key = (wk, len(split))
    assigned = assign("native", split, wk)
    kinds = [k for _, k in assigned]
    if key not in done:
        alone = [b.alone_rate(k) for k in kinds]
        workers = b.pool.start([s for s, _ in assigned])
        res = b.pool.round([(w, window_args(b, plan, w, k)) for w, k in zip(workers, kinds)], witness=True)
        plan.done()
        done[key] = (res, alone, b.last_witness, label(split))
    res, alone, wit, first = done[key]
    b.last_witness = wit
    record(b, "native", label(split), kinds, list(split), [s["name"] for s, _ in assigned], res, alone,
           same_run=None if first == label(split) else "native %s %s" % (first, wk), scenario=wk)


PHASES = {"shares": shares}
