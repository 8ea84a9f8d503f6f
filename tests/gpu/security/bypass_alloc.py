#!/usr/bin/env python3
"""A tenant process that reaches the real CUDA driver WITHOUT the fracgpu shim, for the
audit check: it loads libcuda by absolute path (glibc then maps that file a second time
instead of reusing the preloaded shim, whose SONAME is libcuda.so.1), creates a context,
allocates --gib GiB in 1 GiB pieces and holds them for --hold seconds. Its books in the
tenant stay empty, so only the broker's audit (NVML's per-process memory) can see it.

    bypass_alloc.py --driver /usr/local/nvidia/lib64/libcuda.so.1 --gib 8 --hold 6

Prints one JSON line when the memory is held: {"ok": true, "pid": ..., "allocated_gib": N,
"t_allocated": <CLOCK_REALTIME seconds>}; then, when it leaves, {"done": true}.
"""
import argparse
import ctypes
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", default="/usr/local/nvidia/lib64/libcuda.so.1")
    ap.add_argument("--gib", type=int, default=8)
    ap.add_argument("--hold", type=float, default=6.0)
    a = ap.parse_args()
    cuda = ctypes.CDLL(a.driver)
    def check(rc, what):
        if rc != 0:
            print(json.dumps({"ok": False, "error": f"{what} returned {rc}"}), flush=True)
            sys.exit(1)
    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate_v2")
    ptrs = []
    for _ in range(a.gib):
        p = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 30)), "cuMemAlloc_v2")
        ptrs.append(p)
    print(json.dumps({"ok": True, "pid": os.getpid(), "allocated_gib": a.gib,
                      "t_allocated": time.time()}), flush=True)
    time.sleep(a.hold)
    print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    main()
