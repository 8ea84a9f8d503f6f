#!/usr/bin/env python3
"""cuMemAlloc + cuMemFree of --bytes, --pairs times, through libcuda.so.1 (the shim when it is
preloaded: glibc hands the preloaded library to a load by SONAME). Prints one JSON line with
the median and p90 of --reps repetitions, in microseconds per pair. For the audit-cost check:
the same tenant with the broker's audit on and off, alternated."""
import argparse
import ctypes
import json
import statistics
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=1 << 20)
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuInit(0) == 0
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    p = ctypes.c_uint64()
    size = ctypes.c_size_t(a.bytes)
    per_pair = []
    for rep in range(a.reps + 1):
        t0 = time.perf_counter()
        for _ in range(a.pairs):
            rc = cuda.cuMemAlloc_v2(ctypes.byref(p), size)
            if rc != 0:
                print(json.dumps({"ok": False, "error": f"cuMemAlloc_v2 returned {rc}"}))
                return 1
            cuda.cuMemFree_v2(p)
        if rep:  # the first repetition warms up
            per_pair.append((time.perf_counter() - t0) / a.pairs * 1e6)
    print(json.dumps({"ok": True, "us_per_pair_median": statistics.median(per_pair),
                      "us_per_pair_all": per_pair}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
