#!/usr/bin/env python3
"""CuPy under a memory cap: allocate --chunk byte arrays until
cupy.cuda.memory.OutOfMemoryError (at most --max-bytes) and report the memory pool's
total_bytes() at that point. Run as a fracgpu tenant (`fracgpu run --memory 4GiB`).
Prints one JSON line; the runner judges the numbers. ok: the OOM error was raised and the
GPU was usable after it.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_client  # noqa: E402

MiB = 1 << 20


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--chunk", type=int, default=128 * MiB)
    p.add_argument("--max-bytes", type=int, default=8 << 30)
    return p.parse_args()


def main():
    args = parse()
    import cupy as cp

    free0, total0 = cp.cuda.runtime.memGetInfo()
    pool = cp.get_default_memory_pool()
    held = []
    oom = None
    limit = max(1, args.max_bytes // args.chunk)
    try:
        while len(held) < limit:
            held.append(cp.empty(args.chunk, dtype=cp.uint8))
    except cp.cuda.memory.OutOfMemoryError as exc:
        oom = str(exc)
    arrays = len(held)
    pool_total = int(pool.total_bytes())
    pool_used = int(pool.used_bytes())
    free1, total1 = cp.cuda.runtime.memGetInfo()

    if held:
        del held[-1]
    x = cp.arange(1024, dtype=cp.float32)
    s = float((x * 2.0 + 1.0).sum())
    cp.cuda.Device().synchronize()
    usable = s == float(1024 * 1024)
    return {
        "ok": bool(oom is not None and usable),
        "oom_raised": oom is not None,
        "held_at_oom": arrays * args.chunk,
        "arrays_at_oom": arrays,
        "pool_total_bytes": pool_total,
        "pool_used_bytes": pool_used,
        "chunk": args.chunk,
        "total": int(total0),
        "free_start": int(free0),
        "total_at_oom": int(total1),
        "free_at_oom": int(free1),
        "usable_after": bool(usable),
        "oom_message": (oom or "")[:400],
        "info": {"cupy": cp.__version__},
    }


if __name__ == "__main__":
    sys.exit(run_client("cupy_cap", main))
