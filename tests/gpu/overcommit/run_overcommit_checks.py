#!/usr/bin/env python3
"""fracgpu overcommit checks on a real GPU (issue "Overcommit that keeps its promise"), next to
a competing matmul tenant. One batch (--budget, 420 s).

    tests/gpu/overcommit/run_overcommit_checks.py [--bin DIR] [--out DIR] [--budget S] [--only "l a b c"]

Same --bin/--out conventions as tests/gpu/security/run_security_checks.py (results in
DIR/overcommit: summary.md, summary.json, logs.tar.gz). Phases:
 l  the host link's peak: 8 GiB device->pinned host and back with PyTorch, no shim
 a  guarantee: a PyTorch tenant with nothing guaranteed that may swap (--swap allow) holds 100 GiB of
    seeded data and has trained; a tenant guaranteed 40 GiB is admitted and takes 38 GiB: the
    time it waits, the borrower's bytes moved to host; then the guarantee goes and the
    borrower resumes: data intact, training goes on, resume time per GiB
 b the other PyTorch allocator modes (expandable_segments, cudaMallocAsync) as borrowers:
    whether their memory moves or they are reported as unswappable
 c cost to a tenant: cuMemAlloc/cuMemFree pairs of 64 MiB with --swap never and --swap allow,
    alternated twice
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "security"))
from run_security_checks import PY, Batch, report, run_phases  # noqa: E402

HOLDER = os.path.join(HERE, "torch_holder.py")
PAIRS = os.path.join(HERE, "..", "security", "alloc_pairs.py")
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
    b.cli("tenant", "create", f"{phase}g", "--owner", "0", "--memory", "40GiB",
          "--memory-request", "40GiB", check=True)
    t0 = time.time()
    grab = b.run_tenant(f"{phase}-guaranteed", ["--tenant", f"{phase}g"],
                        [PY, HOLDER, "--gib", "38", "--grab"])
    got = wait_json(b, f"{phase}-guaranteed", "grabbed_gib", 60)
    waited = time.time() - t0
    swapped = swapped_of(b, f"{phase}b")
    result = {"alloc_conf": alloc_conf or "native", "guarantee_s": round(waited, 2),
              "got": bool(got), "swapped_gib": round(swapped / GIB, 2)}
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
    comp = b.competitor("a-competitor", 200)
    r = borrow_and_guarantee(b, "a", "")
    b.data["guarantee"] = r
    b.row("a", "guaranteed 38 GiB obtained next to a 100 GiB borrower", r["got"],
          f"{r['guarantee_s']} s, borrower moved {r['swapped_gib']} GiB to host")
    b.row("a", "borrower's data intact after swap-in, training resumed",
          r.get("intact") is True and r.get("trained") is True,
          f"resume {r.get('resume_s')} s for {r['swapped_gib']} GiB")
    link = b.data.get("link", {})
    if r.get("resume_s") and r["swapped_gib"] > 0 and link:
        bw = r["swapped_gib"] * GIB / 1e9 / r["resume_s"]
        b.row("a", "swap-in bandwidth vs host link HtoD", bw >= 0.8 * link["h2d"],
              f"{bw:.1f} GB/s vs {link['h2d']:.1f}")
    b.finish(comp, 1)


def phase_b(b):
    for conf, ph in (("expandable_segments:True", "b1"), ("backend:cudaMallocAsync", "b2")):
        if b.left() < 60:
            break
        r = borrow_and_guarantee(b, ph, conf, gib=100)
        b.data[ph] = r
        b.row("b", f"allocator {conf}", True,
              f"guarantee {'got' if r['got'] else 'NOT obtained'} in {r['guarantee_s']} s, "
              f"moved {r['swapped_gib']} GiB, intact {r.get('intact')}")


def phase_c(b):
    figures = {"never": [], "allow": []}
    for name, swap in (("cn", "never"), ("ca", "allow")):
        b.cli("tenant", "create", name, "--owner", "0", "--memory", "8GiB", "--swap", swap,
              check=True)
    for _ in range(2):
        for name, swap in (("cn", "never"), ("ca", "allow")):
            tag = f"c-{swap}-{len(figures[swap])}"
            p = b.run_tenant(tag, ["--tenant", name],
                             [PY, PAIRS, "--bytes", str(64 << 20), "--pairs", "300"])
            b.finish(p, 60)
            figures[swap].append(b.last_json(tag).get("us_per_pair_median", 0))
    for name in ("cn", "ca"):
        b.cli("tenant", "delete", name)
    b.data["pairs"] = figures
    b.row("c", "cuMemAlloc+cuMemFree of 64 MiB (us per pair, never vs allow)", True,
          f"never {figures['never']} / allow {figures['allow']}")


PHASES = {"l": host_link, "a": phase_a, "b": phase_b, "c": phase_c}


def main():
    ap = argparse.ArgumentParser()
    repo = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
    ap.add_argument("--bin", default=os.environ.get("B", os.path.join(repo, "devrun", "bin")))
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/fracgpu-overcommit-out"))
    ap.add_argument("--budget", type=int, default=420)
    ap.add_argument("--only", default="l a b c")
    args = ap.parse_args()
    final = os.path.join(args.out, "overcommit")
    os.makedirs(final, exist_ok=True)
    b = Batch(args)
    try:
        b.start_broker()
        run_phases(b, PHASES, args.only)
    finally:
        b.stop_all()
        b.stop_broker()
    return 0 if report(b, final) else 1


if __name__ == "__main__":
    raise SystemExit(main())
