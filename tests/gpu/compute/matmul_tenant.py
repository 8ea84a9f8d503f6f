#!/usr/bin/env python3
"""fracgpu compute benchmark: a saturating batch tenant (bf16 matmul in PyTorch).

This is the "throughput" tenant of run_compute_checks.sh (issue "Compute quotas", items 5
and 6). It allocates two N x N bf16 matrices (N = --size, default 8192), warms up for
--warmup-s seconds, signals readiness by creating the --ready file, waits for the --barrier
file (so that every tenant of a phase starts its measurement within a millisecond of the
others), then keeps the GPU saturated for --seconds: it launches --sync-every matmuls,
calls torch.cuda.synchronize(), counts them as completed and takes a wall-clock sample
(time.time(), comparable between processes). The measurement ends after --seconds, or
earlier when the --stop-file appears (the latency phases stop the batch tenant when the
latency tenant is done). The result is ONE JSON object, written atomically to --out and
printed on stdout: TFLOP/s over the whole window, per second (--sub-window), the samples
(seconds since the start of the window, matmuls completed) so that a report can compute
throughput over exactly the window that several tenants share, and the time per matmul.
Exit status 0 when the measurement ran, 1 on any error (the JSON then has "ok": false).
The helpers at the top (barrier, ready file, atomic JSON) are shared with latency_tenant.py;
torch is imported only in main(), so --help and the helpers work without it.
"""
import argparse
import json
import os
import sys
import time
import traceback


# ---------------------------------------------------------------- shared helpers
def touch(path):
    """Creates path (atomically: a temporary file renamed into place)."""
    if not path:
        return
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("%d %.6f\n" % (os.getpid(), time.time()))
    os.replace(tmp, path)


def wait_barrier(path, timeout_s):
    """Waits until path exists (polling every 0.5 ms). Returns the seconds waited."""
    t0 = time.time()
    if not path:
        return 0.0
    end = t0 + timeout_s
    while not os.path.exists(path):
        if time.time() > end:
            raise TimeoutError("the start barrier %s did not appear within %.0f s" % (path, timeout_s))
        time.sleep(0.0005)
    return time.time() - t0


def write_result(path, obj):
    """Prints obj as one JSON line and writes it atomically to path (if any)."""
    line = json.dumps(obj, sort_keys=True)
    if path:
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        tmp = "%s.tmp.%d" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write(line + "\n")
        os.replace(tmp, path)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_main(name, body, args):
    """Runs body(args) -> dict; on any exception writes {"ok": false, "error": ...}."""
    t0 = time.time()
    try:
        result = body(args)
        rc = 0 if result.get("ok") else 1
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a JSON result
        traceback.print_exc()
        result = {"ok": False, "error": ("%s: %s" % (type(exc).__name__, exc))[:2000]}
        rc = 1
    result["tenant"] = name
    result["tag"] = args.tag
    result["pid"] = os.getpid()
    result["elapsed_s"] = round(time.time() - t0, 3)
    result["env"] = {k: os.environ[k] for k in sorted(os.environ)
                     if k.startswith(("FRACGPU_", "CUDA_MPS_")) or k == "LD_PRELOAD"}
    write_result(args.out, result)
    return rc


def import_torch():
    """torch, imported late (so that --help works without it), and the seconds it took."""
    t_import = time.time()
    import torch  # noqa: PLC0415

    import_s = time.time() - t_import
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    return torch, import_s


def add_phase_args(p):
    """The options every tenant of a phase shares: start barrier, ready file, output."""
    p.add_argument("--barrier", default="", help="wait for this file to exist before measuring")
    p.add_argument("--barrier-timeout", type=float, default=120.0, help="give up waiting after this (default 120 s)")
    p.add_argument("--ready", default="", help="create this file when warmed up")
    p.add_argument("--out", default="", help="write the JSON result here (it is also printed)")
    p.add_argument("--tag", default="", help="a label copied into the result")


def count_at(samples, t):
    """Matmuls completed at time t (seconds), linear between samples [(t, count), ...]."""
    if not samples or t <= samples[0][0]:
        return samples[0][1] if samples else 0
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        if t <= t1:
            return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)
    return samples[-1][1]


# ---------------------------------------------------------------- the tenant
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=8192, help="matrix size N (default 8192)")
    p.add_argument("--seconds", type=float, default=10.0, help="measurement window (default 10)")
    p.add_argument("--sync-every", type=int, default=8, help="matmuls between synchronizations (default 8)")
    p.add_argument("--warmup-s", type=float, default=1.0, help="warm-up work before --ready (default 1 s)")
    p.add_argument("--sub-window", type=float, default=1.0, help="length of the sub-windows reported (default 1 s)")
    p.add_argument("--stop-file", default="", help="end the measurement early when this file exists")
    p.add_argument("--device", type=int, default=0, help="CUDA device index to run on (default 0)")
    add_phase_args(p)
    args = p.parse_args(argv)
    if args.size <= 0 or args.seconds <= 0 or args.sync_every <= 0 or args.sub_window <= 0:
        p.error("--size, --seconds, --sync-every and --sub-window must be positive")
    if args.device < 0:
        p.error("--device must be a device index (0, 1, ...)")
    return args


def measure(args):
    torch, import_s = import_torch()
    n, k = args.size, args.sync_every
    flop = 2.0 * n ** 3
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    t_init = time.time()
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    init_s = time.time() - t_init

    # Warm-up: cuBLAS heuristics, clocks, and (under fracgpu) the tenant's registration.
    t_warm = time.time()
    warm = 0
    while warm == 0 or time.time() - t_warm < args.warmup_s:
        for _ in range(k):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        warm += k
    warm_s = time.time() - t_warm

    touch(args.ready)
    barrier_wait_s = wait_barrier(args.barrier, args.barrier_timeout)

    t0 = time.time()
    deadline = t0 + args.seconds
    samples = [(0.0, 0)]
    done = 0
    stopped_by_file = False
    while True:
        for _ in range(k):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        done += k
        t = time.time()
        samples.append((t - t0, done))
        if t >= deadline:
            break
        if args.stop_file and os.path.exists(args.stop_file):
            stopped_by_file = True
            break
    t_end = samples[-1][0]
    checksum = float(c[:4, :4].float().sum().item())

    per = []
    w = args.sub_window
    i = 0
    while (i + 1) * w <= t_end + 1e-9:
        d = count_at(samples, (i + 1) * w) - count_at(samples, i * w)
        per.append(round(d * flop / w / 1e12, 2))
        i += 1
    tflops = done * flop / t_end / 1e12 if t_end > 0 else 0.0
    return {
        "ok": done > 0,
        "size": n,
        "dtype": "bfloat16",
        "sync_every": k,
        "flop_per_matmul": flop,
        "t_start": round(t0, 6),
        "t_end": round(t0 + t_end, 6),
        "seconds": round(t_end, 4),
        "matmuls": done,
        "tflops": round(tflops, 3),
        "ms_per_matmul": round(1000.0 * t_end / done, 4) if done else None,
        "sub_window_s": w,
        "per_window_tflops": per,
        "stopped_by_file": stopped_by_file,
        "samples": [[round(s, 5), c_] for s, c_ in samples],
        "checksum": checksum,
        "startup": {"import_s": round(import_s, 3), "init_s": round(init_s, 3), "warmup_s": round(warm_s, 3),
                    "warmup_matmuls": warm, "barrier_wait_s": round(barrier_wait_s, 4)},
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev),
        "device_index": args.device,
    }


def main(argv=None):
    args = parse_args(argv)
    return run_main("matmul", measure, args)


if __name__ == "__main__":
    sys.exit(main())
