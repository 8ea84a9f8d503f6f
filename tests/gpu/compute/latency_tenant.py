#!/usr/bin/env python3
"""fracgpu compute benchmark: a latency-sensitive tenant (small bf16 matmul per request).

This is the "interactive" tenant of run_compute_checks.sh (issue "Compute quotas", item 6):
each request is one N x N bf16 matmul (N = --size, default 2048) followed by
torch.cuda.synchronize(); its latency is the wall time from before the launch to after the
synchronize (time.perf_counter). Between requests the tenant thinks for --think-ms (default
2 ms, time.sleep). After --warmup requests it creates the --ready file, waits for the
--barrier file (the runner releases every tenant of a phase together), waits --lead-s more
(so that a batch tenant started at the same barrier is already saturating the GPU), then
serves --requests requests (default 2000; at most --max-seconds). When done it creates
--done-file (the batch tenant of the phase stops measuring when it appears) and writes ONE
JSON object to --out and stdout: p50/p90/p99/p99.9/max/mean in ms, the window it ran in
(time.time(), comparable with the batch tenant's samples) and every latency in µs.
Exit status 0 when at least --requests requests were served, 1 otherwise.
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from matmul_tenant import add_phase_args, import_torch, run_main, touch, wait_barrier  # noqa: E402


def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list (q in [0, 100])."""
    if not sorted_values:
        return None
    rank = max(1, int(math.ceil(q / 100.0 * len(sorted_values))))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=2048, help="matrix size N (default 2048)")
    p.add_argument("--requests", type=int, default=2000, help="measured requests (default 2000)")
    p.add_argument("--warmup", type=int, default=200, help="requests before --ready (default 200)")
    p.add_argument("--think-ms", type=float, default=2.0, help="sleep between requests (default 2 ms)")
    p.add_argument("--lead-s", type=float, default=0.3, help="wait after the barrier before measuring (default 0.3 s)")
    p.add_argument("--max-seconds", type=float, default=40.0, help="stop measuring after this (default 40 s)")
    p.add_argument("--done-file", default="", help="create this file when the measurement is over")
    add_phase_args(p)
    args = p.parse_args(argv)
    if args.size <= 0 or args.requests <= 0 or args.think_ms < 0 or args.max_seconds <= 0:
        p.error("--size, --requests and --max-seconds must be positive, --think-ms not negative")
    return args


def measure(args):
    torch, import_s = import_torch()
    n = args.size
    dev = torch.device("cuda", 0)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    think = args.think_ms / 1000.0
    clock = time.perf_counter

    def request():
        t = clock()
        torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        return clock() - t

    t_warm = time.time()
    warm = [request() for _ in range(max(1, args.warmup))]
    warm_s = time.time() - t_warm
    touch(args.ready)
    barrier_wait_s = wait_barrier(args.barrier, args.barrier_timeout)
    if args.lead_s > 0:
        time.sleep(args.lead_s)

    lat = []
    t0 = time.time()
    end = t0 + args.max_seconds
    sleep_total = 0.0
    try:
        while len(lat) < args.requests:
            lat.append(request())
            if time.time() > end:
                break
            if think > 0:
                s = clock()
                time.sleep(think)
                sleep_total += clock() - s
    finally:
        t1 = time.time()
        touch(args.done_file)
    s = sorted(lat)
    ms = [v * 1000.0 for v in s]
    served = len(lat)
    return {
        "ok": served >= args.requests,
        "size": n,
        "dtype": "bfloat16",
        "requests": served,
        "requests_wanted": args.requests,
        "think_ms": args.think_ms,
        "think_ms_actual_mean": round(1000.0 * sleep_total / max(1, served - 1), 4),
        "t_start": round(t0, 6),
        "t_end": round(t1, 6),
        "seconds": round(t1 - t0, 4),
        "p50_ms": round(percentile(ms, 50), 4) if ms else None,
        "p90_ms": round(percentile(ms, 90), 4) if ms else None,
        "p99_ms": round(percentile(ms, 99), 4) if ms else None,
        "p999_ms": round(percentile(ms, 99.9), 4) if ms else None,
        "max_ms": round(ms[-1], 4) if ms else None,
        "min_ms": round(ms[0], 4) if ms else None,
        "mean_ms": round(sum(ms) / len(ms), 4) if ms else None,
        "warmup_p50_ms": round(1000.0 * percentile(sorted(warm), 50), 4),
        "lat_us": [round(v * 1e6, 1) for v in lat],
        "startup": {"import_s": round(import_s, 3), "warmup_s": round(warm_s, 3), "warmup_requests": len(warm),
                    "barrier_wait_s": round(barrier_wait_s, 4), "lead_s": args.lead_s},
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
    }


def main(argv=None):
    args = parse_args(argv)
    return run_main("latency", measure, args)


if __name__ == "__main__":
    sys.exit(main())
