#!/usr/bin/env python3
"""Stand-in for `python3` in a dry run of run_capture_checks.sh without a GPU (dry_run.sh).

`fake_python.py SCRIPT ARGS...`: for capture_client.py and matmul_tenant.py it imitates their
protocol (ready file, barrier, stop file, --seconds, one JSON line on stdout and in --out) with
made-up rates, so that the runner's process control, fracgpu tenants and report can be checked
on the simulated driver; any other script runs in the real interpreter. Rates: a replay tenant
does 1000 replays/s and a matmul tenant 100 matmuls/s alone; in a step named c_both (its
tenant socket's path says so) they get 30% and 70% of that. FAKE_FAIL="STEP.TAG ..." makes those
clients report a failure (e.g. FAKE_FAIL="b50.compile"); FAKE_HANG="STEP.TAG" makes one hang.
"""
import json
import os
import sys
import time


def opt(argv, name, default=None):
    if name in argv:
        i = argv.index(name)
        if i + 1 < len(argv):
            return argv[i + 1]
    return default


def fake(kind, argv):
    tag = opt(argv, "--tag", "")
    out = opt(argv, "--out", "")
    seconds = float(opt(argv, "--seconds", "0") or 0)
    sock = os.environ.get("FRACGPU_SOCKET", "")
    share = 1.0
    if "/c_both-" in sock:
        share = 0.3 if kind == "cap" else 0.7
    if tag in os.environ.get("FAKE_HANG", "").split():
        time.sleep(3600)
    time.sleep(0.3)  # "import torch"
    ready = opt(argv, "--ready")
    if ready:
        open(ready, "w").write("%d\n" % os.getpid())
    barrier = opt(argv, "--barrier")
    if barrier:
        end = time.time() + 120
        while not os.path.exists(barrier) and time.time() < end:
            time.sleep(0.01)
    stop = opt(argv, "--stop-file")
    rate = (1000.0 if kind == "cap" else 100.0) * share
    t0 = time.time()
    samples = [[0.0, 0]]
    n = 0
    if seconds > 0:
        while True:
            time.sleep(0.05)
            t = time.time() - t0
            n = int(rate * t)
            samples.append([round(t, 5), n])
            if t >= seconds or (stop and os.path.exists(stop)):
                break
    secs = samples[-1][0]
    fail = tag in os.environ.get("FAKE_FAIL", "").split()
    if kind == "cap":
        mode = opt(argv, "--mode", "graph")
        rep = int(opt(argv, "--repeat", "20"))
        expected = rep * 6 if mode == "serving" else rep
        res = {"ok": not fail, "mode": mode, "captures": expected - (1 if fail else 0), "expected_captures": expected,
               "failures": 1 if fail else 0, "errors": ["capture 3: RuntimeError: fake failure"] if fail else [],
               "replays": n, "replay_rate_per_s": round(n / secs, 3) if secs else None, "samples": samples,
               "t_start": t0, "t_end": t0 + secs, "seconds": secs, "max_rel_err": 0.001}
    else:
        res = {"ok": not fail, "size": 8192, "flop_per_matmul": 2.0 * 8192 ** 3, "t_start": t0, "t_end": t0 + secs,
               "seconds": secs, "matmuls": n, "samples": samples,
               "tflops": round(n * 2.0 * 8192 ** 3 / secs / 1e12, 3) if secs else 0.0}
        if fail:
            res["error"] = "RuntimeError: fake failure"
    res.update({"tag": tag, "pid": os.getpid(), "elapsed_s": round(time.time() - t0, 3), "fake": True})
    line = json.dumps(res, sort_keys=True)
    if out:
        with open(out + ".tmp", "w") as f:
            f.write(line + "\n")
        os.replace(out + ".tmp", out)
    print(line)
    return 0 if res["ok"] else 1


def main():
    if len(sys.argv) < 2:
        os.execv(sys.executable, [sys.executable] + sys.argv[1:])
    script = os.path.basename(sys.argv[1])
    if script == "capture_client.py":
        return fake("cap", sys.argv[2:])
    if script == "matmul_tenant.py":
        return fake("mm", sys.argv[2:])
    os.execv(sys.executable, [sys.executable] + sys.argv[1:])
    return 127


if __name__ == "__main__":
    sys.exit(main())
