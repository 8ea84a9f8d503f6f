#!/usr/bin/env python3
"""fracgpu overcommit checks on a real GPU (issue "Overcommit that keeps its promise"), next to
a competing matmul tenant. One batch (--budget, 540 s).

    tests/gpu/overcommit/run_overcommit_checks.py [--bin DIR] [--out DIR] [--budget S] [--only "l a b c t"]

Same --bin/--out conventions as tests/gpu/security/run_security_checks.py (results in
DIR/overcommit: summary.md, summary.json, logs.tar.gz). Phases:
 l  the host link's peak: 8 GiB device->pinned host and back with PyTorch, no shim
 a  guarantee: a PyTorch tenant with nothing guaranteed that may swap (--swap allow) holds 100 GiB of
    seeded data and has trained; a tenant guaranteed 40 GiB is admitted and takes 38 GiB: the
    time it waits, the borrower's bytes moved to host; then the guarantee goes and the
    borrower resumes: data intact, training goes on, resume time per GiB
 b the other PyTorch allocator modes (expandable_segments, cudaMallocAsync) as borrowers:
    whether their memory moves or they are reported as unswappable
 c cost to a tenant that never swaps: cuMemAlloc/cuMemFree pairs of 64 MiB with --swap never
    and --swap allow, alternated twice; empty-kernel launches (launch_loop.py) with no shim,
    --swap never and --swap allow, alternated A B C three times, ratios to no shim
 t tenants whose caps sum to twice the GPU, each training in turn (phase_turns.py): a native
    baseline (the third working set fails with CUDA OOM), three 93 GiB tenants with nothing
    guaranteed holding --turn-gib each, turns T1 T2 T3 T1 T2 T3 with the idle ones moved to
    host (--swap-idle-after), final parameters against a reference training
Phases a, b and t also give the swap engine's own swap-out / swap-in GB/s (the tenants'
stderr, swap_log.py) against the link of phase l, goal >= 80 %. A phase that no longer fits
the budget is reported skipped; one that throws is a failed row and the batch goes on; every
process is killed and every tenant deleted after each phase.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "security"))
sys.path.insert(0, HERE)
from run_security_checks import PY, Batch, report  # noqa: E402
import phase_turns  # noqa: E402
import swap_log  # noqa: E402

HOLDER = os.path.join(HERE, "torch_holder.py")
PAIRS = os.path.join(HERE, "..", "security", "alloc_pairs.py")
LAUNCH = os.path.join(HERE, "launch_loop.py")
GIB = 1 << 30


def wait_json(b, tag, key, limit):
    end = time.time() + limit
    while time.time() < end:
        j = b.last_json(tag)
        if key in j:
            return j
        time.sleep(0.05)
    return {}


def swapped_of(b, name):
    t = b.tenant(name) or {}
    devs = t.get("devices", [])
    return devs[0].get("memory_swapped", 0) if devs else 0


def reserved_of(b, name):
    """The bytes of host memory the tenant's processes hold pinned ahead (the swap reserve)."""
    t = b.tenant(name) or {}
    devs = t.get("devices", [])
    if "host_reserved" in t:
        return t["host_reserved"]
    return sum(d.get("host_reserved", 0) for d in devs)


def wait_reserve(b, name, limit=90):
    """Waits until the tenant's swap reserve stops growing (2 s unchanged, not 0): its size
    and the seconds it took to pin."""
    t0 = time.time()
    last, since = -1, time.time()
    while time.time() - t0 < limit:
        now = reserved_of(b, name)
        if now != last:
            last, since = now, time.time()
        elif now > 0 and time.time() - since >= 2:
            break
        time.sleep(0.2)
    return {"reserve_gib": round(max(last, 0) / GIB, 2), "reserve_s": round(since - t0, 2)}


def host_link(b):
    code = ("import torch,time,json\n"
            "n=8<<30; d=torch.empty(n,dtype=torch.uint8,device='cuda'); h=torch.empty(n,dtype=torch.uint8).pin_memory()\n"
            "r={}\n"
            "for k in range(3):\n"
            " torch.cuda.synchronize(); t=time.perf_counter(); h.copy_(d); torch.cuda.synchronize(); r['d2h']=max(r.get('d2h',0),n/(time.perf_counter()-t)/1e9)\n"
            " t=time.perf_counter(); d.copy_(h); torch.cuda.synchronize(); r['h2d']=max(r.get('h2d',0),n/(time.perf_counter()-t)/1e9)\n"
            "print(json.dumps(r))\n")
    out = subprocess.run([PY, "-c", code], env=b.env(), capture_output=True, text=True, timeout=120)
    j = json.loads(out.stdout.strip().splitlines()[-1])
    b.data["link"] = j
    b.row("l", "host link peak (GB/s, pinned)", True, f"DtoH {j['d2h']:.1f}, HtoD {j['h2d']:.1f}")


def borrow_and_guarantee(b, phase, alloc_conf, gib=100):
    tag = f"{phase}-borrower"
    env = {"FRACGPU_LOG_LEVEL": "info"}  # the swap engine reports its moves and their speed
    if alloc_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    # --owner 0: `fracgpu run --tenant` reaches owned tenants (root owns these).
    b.cli("tenant", "create", f"{phase}b", "--owner", "0", "--memory", "110GiB",
          "--memory-request", "0", "--swap", "allow", check=True)
    go = os.path.join(b.work, f"go-{phase}")
    borrower = b.run_tenant(tag, ["--tenant", f"{phase}b"],
                            [PY, HOLDER, "--gib", str(gib), "--go", go], env_extra=env)
    ready = wait_json(b, tag, "ready", 120)
    if not ready:
        raise RuntimeError(f"borrower not ready: {b.last_json(tag)}")
    # The borrower's swap reserve is pinned in the background once it borrows: the guaranteed
    # tenant comes after it is built (the case it is for: a borrower that has run a while).
    reserve = wait_reserve(b, f"{phase}b") if b.cfg.reserve_wait else {}
    b.cli("tenant", "create", f"{phase}g", "--owner", "0", "--memory", "40GiB",
          "--memory-request", "40GiB", check=True)
    t0 = time.time()
    grab = b.run_tenant(f"{phase}-guaranteed", ["--tenant", f"{phase}g"],
                        [PY, HOLDER, "--gib", "38", "--grab"])
    got = wait_json(b, f"{phase}-guaranteed", "grabbed_gib", 60)
    waited = time.time() - t0
    swapped = swapped_of(b, f"{phase}b")
    result = {"alloc_conf": alloc_conf or "native", "guarantee_s": round(waited, 2),
              "got": bool(got), "swapped_gib": round(swapped / GIB, 2), **reserve}
    os.killpg(grab.pid, 9)
    grab.wait()
    b.cli("tenant", "delete", f"{phase}g")
    open(go, "w").close()
    done = wait_json(b, tag, "intact", 120)
    result.update(done)
    b.finish(borrower, 30)
    b.cli("tenant", "delete", f"{phase}b")
    return result


def phase_a(b):
    b.ensure_broker(())
    comp = b.competitor("a-competitor", 200)
    r = borrow_and_guarantee(b, "a", "")
    b.data["guarantee"] = r
    b.row("a", "guaranteed 38 GiB obtained next to a 100 GiB borrower", r["got"],
          f"{r['guarantee_s']} s, borrower moved {r['swapped_gib']} GiB to host"
          + (f" (its swap reserve: {r['reserve_gib']} GiB pinned in {r['reserve_s']} s before)"
             if "reserve_gib" in r else ""))
    b.row("a", "borrower's data intact after swap-in, training resumed",
          r.get("intact") is True and r.get("trained") is True,
          f"resume {r.get('resume_s')} s for {r['swapped_gib']} GiB")
    link = b.data.get("link", {})
    if r.get("resume_s") and r["swapped_gib"] > 0 and link:
        bw = r["swapped_gib"] * GIB / 1e9 / r["resume_s"]
        b.row("a", "swap-in bandwidth vs host link HtoD (status bytes / first touch)",
              bw >= 0.8 * link["h2d"], f"{bw:.1f} GB/s vs {link['h2d']:.1f}")
    b.finish(comp, 1)
    swap_log.rows(b, "a", ["a-borrower"], expect_moves=True)


def phase_b(b):
    b.ensure_broker(())
    for conf, ph in (("expandable_segments:True", "b1"), ("backend:cudaMallocAsync", "b2")):
        if b.room() < 95:
            b.row("b", f"allocator {conf}", False,
                  f"skipped: {b.left():.0f} s left, {b.later_need} s kept for the later phases")
            continue
        r = borrow_and_guarantee(b, ph, conf, gib=100)
        b.data[ph] = r
        b.row("b", f"allocator {conf}", True,
              f"guarantee {'got' if r['got'] else 'NOT obtained'} in {r['guarantee_s']} s, "
              f"moved {r['swapped_gib']} GiB, intact {r.get('intact')}")
    swap_log.rows(b, "b", ["b1-borrower", "b2-borrower"], expect_moves=False)


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def phase_c(b):
    b.ensure_broker(())
    figures = {"never": [], "allow": []}
    for name, swap in (("cn", "never"), ("ca", "allow")):
        # The cap is the request: an allow tenant that borrows nothing is never asked to swap.
        b.cli("tenant", "create", name, "--owner", "0", "--memory", "8GiB", "--swap", swap,
              check=True)
    for _ in range(2):
        for name, swap in (("cn", "never"), ("ca", "allow")):
            tag = f"c-{swap}-{len(figures[swap])}"
            p = b.run_tenant(tag, ["--tenant", name],
                             [PY, PAIRS, "--bytes", str(64 << 20), "--pairs", "300"])
            b.finish(p, 60)
            figures[swap].append(b.last_json(tag).get("us_per_pair_median", 0))
    b.data["pairs"] = figures
    b.row("c", "cuMemAlloc+cuMemFree of 64 MiB (us per pair, never vs allow)", True,
          f"never {[round(x, 1) for x in figures['never']]} / allow {[round(x, 1) for x in figures['allow']]}")
    launch_cost(b)
    for name in ("cn", "ca"):
        b.cli("tenant", "delete", name)


def launch_cost(b):
    """Empty-kernel launches: no shim (A), --swap never (B), --swap allow that never swaps (C),
    alternated A B C three times; each run's figure is its median of 3 repetitions."""
    runs = {"none": [], "never": [], "allow": []}
    backends = set()
    cmd = [PY, LAUNCH, "--n", "20000", "--reps", "3", "--backend", b.cfg.launch_backend]
    for rep in range(3):
        for mode, tenant in (("none", None), ("never", "cn"), ("allow", "ca")):
            if b.left() < b.later_need + 15:
                break
            tag = f"c-launch-{mode}{rep}"
            p = (b.spawn(tag, cmd, env=b.env()) if tenant is None
                 else b.run_tenant(tag, ["--tenant", tenant], cmd))
            b.finish(p, 60)
            j = b.last_json(tag)
            runs[mode].append(j.get("us_per_launch_median"))
            if j.get("backend"):
                backends.add(j["backend"])
    b.data["launch"] = runs
    base = med(runs["none"])
    for mode in ("never", "allow"):
        m = med(runs[mode])
        ok = base is not None and m is not None and len([x for x in runs[mode] if x]) == 3
        b.row("c", f"empty-kernel launch, --swap {mode} / no shim (us per launch)", ok,
              "n/a: " + json.dumps(runs)[:160] if not ok else
              f"{m / base:.3f} (median {m:.2f} vs {base:.2f}; runs {[round(x, 2) for x in runs[mode] if x]}"
              f" vs {[round(x, 2) for x in runs['none'] if x]}; {'/'.join(sorted(backends))})")


def phase_t(b):
    phase_turns.phase_t(b, b.cfg)
    swap_log.rows(b, "t", ["t-t"], expect_moves=True)


PHASES = {"l": host_link, "a": phase_a, "b": phase_b, "c": phase_c, "t": phase_t}
# What a phase needs at least (s), measured on the H200 or estimated: it is skipped below that,
# and the earlier phases keep it for the later ones.
NEED = {"l": 20, "a": 75, "b": 95, "c": 35, "t": 170}


class OvercommitBatch(Batch):
    """The security checks' Batch plus what these phases share: the broker restarted only
    when a phase needs other flags, budget kept for the later phases, phase t's hooks."""

    def __init__(self, args):
        super().__init__(args)
        self.cfg = args
        self.broker_flags = None
        self.later_need = 0
        self.py = PY
        self.stub_flag = []

    def ensure_broker(self, flags):
        flags = tuple(flags)
        if self.broker_flags != flags or not self.broker.running():
            self.start_broker(*flags)
            self.broker_flags = flags

    def broker_log(self):
        return os.path.join(self.broker.logdir, f"{self.broker.name}{self.broker.starts}.log")

    def room(self):
        return self.left() - self.later_need

    def native_env(self):
        return {}

    def tenant_env(self, name):
        return {}

    def delete_tenants(self):
        try:
            for t in self.status().get("tenants", []):
                self.cli("tenant", "delete", t.get("name", ""), timeout=10)
        except Exception as exc:  # noqa: BLE001 - cleanup never ends the batch
            self.say(f"tenant cleanup: {exc}")


def run_all(b, only):
    phases = only.split()
    for i, ph in enumerate(phases):
        b.later_need = sum(NEED.get(p, 0) for p in phases[i + 1:])
        if ph not in PHASES:
            b.row(ph, "phase", False, f"unknown phase {ph}")
            continue
        if b.left() < NEED[ph]:
            b.row(ph, "phase", False, f"skipped: {b.left():.0f} s left of the budget, it needs ~{NEED[ph]} s")
            continue
        b.say(f"== phase {ph} ({b.left():.0f} s left)")
        t0 = time.time()
        try:
            PHASES[ph](b)
        except Exception as exc:  # noqa: BLE001 - one phase's failure is reported, not fatal
            b.row(ph, "phase ran", False, f"{type(exc).__name__}: {exc}"[:300])
            b.data.setdefault("tracebacks", {})[ph] = traceback.format_exc()
        finally:
            b.stop_all()
            b.delete_tenants()
            b.data.setdefault("phase_seconds", {})[ph] = round(time.time() - t0, 1)


def arguments(argv=None):
    ap = argparse.ArgumentParser()
    repo = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
    ap.add_argument("--bin", default=os.environ.get("B", os.path.join(repo, "devrun", "bin")))
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/fracgpu-overcommit-out"))
    ap.add_argument("--budget", type=int, default=540)
    ap.add_argument("--only", default="l a b c t")
    ap.add_argument("--no-reserve-wait", dest="reserve_wait", action="store_false",
                    help="admit the guaranteed tenant without waiting for the borrower's swap reserve")
    ap.add_argument("--launch-backend", choices=["ptx", "torch", "auto"], default="auto",
                    help="phase c's launch loop: ctypes + PTX, PyTorch add_, or ptx then torch")
    t = ap.add_argument_group("phase t")
    t.add_argument("--turn-gib", type=int, default=48,
                   help="working set per tenant (GiB): 3 W > the GPU, 2 W + contexts fit (default 48)")
    t.add_argument("--turn-cap", type=int, default=93, help="each tenant's cap, GiB (3 x 93 = 2 x 139.8)")
    t.add_argument("--turn-host-budget", type=int, default=100,
                   help="--swap-host-budget of the broker, GiB: >= 2 W + 2, < 3 W (default 100)")
    t.add_argument("--turn-idle-after", type=float, default=2.0, help="--swap-idle-after of the broker (s)")
    t.add_argument("--no-turn-competitor", dest="turn_competitor", action="store_false",
                   help="run the turns without the competing matmul tenant (24 GiB, compute 50)")
    t.add_argument("--turn-steps", type=int, default=300, help="training steps per turn")
    t.add_argument("--turn-rounds", type=int, default=2, help="turns per tenant (T1 T2 T3, this many times)")
    t.add_argument("--turn-alloc", default="default,default,default",
                   help="allocator per tenant: default, expandable, async (comma-separated, 3)")
    t.add_argument("--turn-wait", type=float, default=60, help="longest wait for room before a turn (s)")
    t.add_argument("--turn-limit", type=float, default=90, help="longest a turn may take (s)")
    t.add_argument("--no-turn-native", dest="turn_native", action="store_false",
                   help="leave out the native baseline (three working sets without fracgpu)")
    a = ap.parse_args(argv)
    a.turn_alloc = [m.strip() for m in a.turn_alloc.split(",")]
    if len(a.turn_alloc) != 3 or any(m not in phase_turns.MODES for m in a.turn_alloc):
        ap.error("--turn-alloc needs three of default, expandable, async")
    return a


def main():
    args = arguments()
    final = os.path.join(args.out, "overcommit")
    os.makedirs(final, exist_ok=True)
    b = OvercommitBatch(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below still reports
    rc = 1
    try:
        b.ensure_broker(())
        run_all(b, args.only)
    finally:
        b.stop_all()
        b.delete_tenants()
        b.stop_broker()
        rc = 0 if report(b, final) else 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
