"""Memory and fault phases of the benchmark. memory: the cap as each client sees it (the
driver API everywhere; PyTorch, JAX and CuPy where installed), the context footprint the
broker measured, allocation latency with and without the shim, and overcommit (two tenants
whose caps add up to more than the GPU, filled one after the other). faults: the broker
SIGKILLed while a tenant waits for a grant (time until that tenant runs again, the broker
restarted at once as its service manager would), and SIGSTOP of the tenant holding the GPU
(the other tenant's rate while it is stopped, against its rate alone)."""
import json
import signal
import time

import analysis
from gpubench import median, spread

MIB = 1 << 20

FRAMEWORKS = {
    "torch": "import torch, json; f, t = torch.cuda.mem_get_info(); print(json.dumps({'ok': True, 'total': t}))",
    "jax": ("import jax, json; s = jax.devices()[0].memory_stats() or {}; "
            "print(json.dumps({'ok': True, 'total': s.get('bytes_limit')}))"),
    "cupy": ("import cupy, json; f, t = cupy.cuda.runtime.memGetInfo(); "
             "print(json.dumps({'ok': True, 'total': t}))"),
}


def single(b, tag, cmd, mode, seconds, memory=None, frac=()):
    env = b.env_for({"mode": mode, "tag": tag, "memory": memory, "frac": list(frac)})
    p = b.spawn(tag, cmd, env, seconds)
    (r,) = b.finish([p])
    b.cleanup_group()
    return r


def memory(b, pb):
    cap_mib = 2048 if b.sim else 8192
    cap = "%dMiB" % cap_mib
    chunk = (64 if b.sim else 256) * MIB
    r = single(b, "mem-driver", b.wl.driver("mem", "--bytes", chunk, "--seconds", 60), "frac", 60, memory=cap)
    b.rec.add("memory", check="driver API: cuMemGetInfo total in a %s tenant" % cap, expected=cap_mib * MIB,
              measured=r.get("total"), ok=r.get("total") == cap_mib * MIB, error=r.get("error"))
    b.rec.add("memory", check="driver API: filled in %d MiB chunks before OOM" % (chunk // MIB),
              expected=cap_mib * MIB, measured=r.get("filled"), ok=bool(r.get("oom")) and
              (r.get("filled") or 0) <= cap_mib * MIB, first_alloc_us=r.get("first_alloc_us"))
    frameworks(b, cap, cap_mib)
    st = b.broker.status() if b.broker.running() else {}
    gpu = (st.get("gpus") or [{}])[0]
    b.rec.add("memory", check="context footprint (broker's measurement)", expected=None,
              measured=gpu.get("context_footprint"), ok=None)
    allocation_latency(b)
    overcommit(b, gpu.get("memory_capacity"), chunk)


def frameworks(b, cap, cap_mib):
    """Each framework's view of a capped tenant, all at once (each its own tenant: they only
    ask for the memory, so the imports overlap)."""
    procs = {}
    for fw, code in FRAMEWORKS.items():
        if b.quick and fw != "torch" and not b.sim:
            b.rec.add("memory", check="%s: total seen in a %s tenant" % (fw, cap), skipped="not in --quick")
        elif b.sim:
            b.rec.add("memory", check="%s: total seen in a %s tenant" % (fw, cap), expected=cap_mib * MIB,
                      measured=None, skipped="no %s on the simulated GPU" % fw)
        else:
            env = b.env_for({"mode": "frac", "tag": "mem-" + fw, "memory": cap})
            procs[fw] = b.spawn("mem-" + fw, [b.args.python, "-c", code], env, 90)
    results = dict(zip(procs, b.finish(list(procs.values()))))
    b.cleanup_group()
    for fw, r in results.items():
        exp = cap_mib * MIB * (0.75 if fw == "jax" else 1.0)  # XLA preallocates 75 % of what it sees
        tot = r.get("total")
        b.rec.add("memory", check="%s: %s in a %s tenant" % (fw, "bytes_limit" if fw == "jax" else "total seen", cap),
                  expected=exp, measured=tot, ok=tot is not None and abs(tot - exp) <= 0.05 * exp,
                  skipped="not installed" if "ModuleNotFoundError" in (r.get("error") or "") else None,
                  error=r.get("error"))


def allocation_latency(b):
    vals = {"native": [], "frac": []}
    cmd = b.wl.driver("alloc", "--bytes", 64 * MIB, "--count", 200 if b.sim else 300, "--reps", 3)
    for i in range(3):
        for v in vals:
            vals[v].append(single(b, "alloc64-%s-%d" % (v, i), cmd, v, 30).get("value"))
    n, f = median(vals["native"]), median(vals["frac"])
    b.rec.add("memory", check="cuMemAlloc+cuMemFree 64 MiB, us per pair (native / fracgpu)", expected=None,
              measured=f, native=n, ratio=f / n if f and n else None, native_spread=spread(vals["native"]),
              fracgpu_spread=spread(vals["frac"]), ok=None)


def overcommit(b, capacity, chunk):
    if not capacity:
        b.rec.add("memory", check="overcommit", skipped="no capacity from the broker")
        return
    cap = int(capacity * 0.75) // MIB * MIB
    stop = b.path("oc.stop")
    ra = b.path("oc-a.json")
    a = b.spawn("oc-a", b.wl.driver("mem", "--bytes", chunk, "--seconds", 60, "--stop-file", stop, "--out", ra),
                b.env_for({"mode": "frac", "tag": "oc-a", "memory": "%dMiB" % (cap // MIB)}), 120)
    end = time.time() + 90
    first = {}
    while time.time() < end and a.running():
        first = _read(ra)
        if first:
            break
        time.sleep(0.05)
    pb = b.spawn("oc-b", b.wl.driver("mem", "--bytes", chunk, "--seconds", 60),
                 b.env_for({"mode": "frac", "tag": "oc-b", "memory": "%dMiB" % (cap // MIB)}), 90)
    (rb,) = b.finish([pb])  # A still holds what it filled
    open(stop, "w").close()
    b.finish([a])
    b.cleanup_group()
    fa, fb = first.get("filled"), rb.get("filled")
    b.rec.add("memory", check="overcommit: two tenants capped at 75 %% of %d MiB, A fills, then B next to it"
              % (capacity // MIB), expected=capacity, measured=(fa or 0) + (fb or 0), a_filled=fa, b_filled=fb,
              ok=fa is not None and fb is not None and fa + fb <= capacity and fa > 0.5 * cap, error=rb.get("error"))


def _read(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return {}


# ---------------------------------------------------------------- faults
def state_of(b, name):
    t = b.broker.tenant(name) or {}
    d = (t.get("devices") or [{}])[0]
    return d.get("compute_state")


def wait_state(b, name, want, limit):
    end = time.time() + limit
    while time.time() < end:
        if state_of(b, name) == want:
            return True
        time.sleep(0.005)
    return False


def faults(b, pb):
    # The broker kill: 1 s of contention before it, the rest to see both tenants run again (they
    # did within 20 ms on the H200); the SIGSTOP: 1 s before, the stop, 1 s after.
    secs = 3.0 if b.quick else 4.0
    lead = 1.0
    info = {}

    def kill_broker(procs, stop):
        time.sleep(lead)
        info["waiting"] = "fa" if wait_state(b, "fa", "waiting", 2) else ("fb" if state_of(b, "fb") == "waiting" else None)
        info["t_kill"] = b.broker.sigkill()
        t = time.time()
        b.broker.start()
        info["restart_s"] = time.time() - t

    specs = [{"tag": t, "kind": "compute", "mode": "frac", "frac": ["--compute", "50"], "driver": True}
             for t in ("fa", "fb")]
    res = b.group(specs, secs, during=kill_broker)
    if "t_kill" in info and all(r.get("ok") for r in res):
        tk = info["t_kill"]
        resume = {s["tag"]: analysis.first_progress_after(r, tk) for s, r in zip(specs, res)}
        gaps = {s["tag"]: analysis.longest_gap(r, tk - 0.05, tk + 10) for s, r in zip(specs, res)}
        waiting = info.get("waiting") or max(gaps, key=lambda k: gaps[k])
        holder = "fb" if waiting == "fa" else "fa"
        b.rec.add("faults", fault="broker SIGKILL while a tenant waits for a grant", waiting_tenant=waiting,
                  waiting_known=info.get("waiting") is not None, resume_s=resume[waiting],
                  longest_stall_s=gaps[waiting], holder_resume_s=resume[holder], broker_restart_s=info["restart_s"])
    else:
        b.rec.add("faults", fault="broker SIGKILL while a tenant waits for a grant", resume_s=None,
                  error="; ".join(r.get("error", "") for r in res if not r.get("ok")) or "no kill")
    sigstop(b, secs, lead)


def sigstop(b, secs, lead):
    al = b.alone_rate("compute", driver=True)
    hold = 1.5 if b.sim and b.quick else 2.0 if b.quick else 3.0
    info = {}

    def stop_holder(procs, stop):
        time.sleep(lead)
        info["holder_known"] = wait_state(b, "sa", "granted", 2)
        info["t_stop"] = time.time()
        procs[0].signal(signal.SIGSTOP)
        time.sleep(hold)
        procs[0].signal(signal.SIGCONT)
        info["t_cont"] = time.time()

    specs = [{"tag": t, "kind": "compute", "mode": "frac", "frac": ["--compute", "50"], "driver": True}
             for t in ("sa", "sb")]
    res = b.group(specs, lead + hold + 1.0, during=stop_holder)
    other = res[1]
    if "t_stop" in info and other.get("ok") and al:
        ts, tc = info["t_stop"], info["t_cont"]
        steady = analysis.rate(other, ts + 0.5, tc)
        first = analysis.rate(other, ts, ts + 0.5)
        b.rec.add("faults", fault="SIGSTOP of the grant holder (%.1f s)" % hold, holder_known=info["holder_known"],
                  other_of_alone=steady / al if steady is not None else None,
                  other_first_500ms_of_alone=first / al if first is not None else None,
                  other_resume_s=analysis.first_progress_after(other, ts), stopped_s=tc - ts)
    else:
        b.rec.add("faults", fault="SIGSTOP of the grant holder", other_of_alone=None,
                  error="; ".join(r.get("error", "") for r in res if not r.get("ok")) or "no stop")


PHASES = {"memory": memory, "faults": faults}
