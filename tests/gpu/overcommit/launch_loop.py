#!/usr/bin/env python3
"""Empty-kernel launch cost for the overcommit checks' phase c: --n launches then one
synchronisation, --reps times after one warm-up; prints one JSON line with the median
microseconds per launch. Nothing to compile here:

 --backend ptx (default): ctypes on libcuda.so.1 (the shim when preloaded), an empty kernel
    from PTX text that the driver compiles (cuModuleLoadData), cuLaunchKernel <<<1,1>>> with a
    pointer to a 1 MiB cuMemAlloc buffer as its argument: the process holds an allocation, so
    in a `--swap allow` tenant every launch passes the shim's residency gate.
 --backend torch: `t.add_(1)` on a 1-element CUDA tensor (the caching allocator's segment is
    the allocation); measures the framework's launch path, torch's own cost included.
 --backend auto: ptx, and torch when the PTX route fails (the JSON says which ran).
"""
import argparse
import ctypes
import json
import statistics
import time

PTX = b"""
.version 7.0
.target sm_50
.address_size 64
.visible .entry fracgpu_empty(.param .u64 p)
{
    ret;
}
"""


def ptx_loop(n, reps):
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")

    check(cuda.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)), "cuModuleLoadData")
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"fracgpu_empty"), "cuModuleGetFunction")
    buf = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(buf), ctypes.c_size_t(1 << 20)), "cuMemAlloc_v2")
    arg = ctypes.c_uint64(buf.value)
    arr = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
    params = ctypes.cast(arr, ctypes.c_void_p)
    launch = cuda.cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    f = fn.value
    check(launch(f, 1, 1, 1, 1, 1, 1, 0, None, params, None), "cuLaunchKernel")  # the loop checks nothing
    per = []
    for rep in range(reps + 1):
        t0 = time.perf_counter()
        for _ in range(n):
            launch(f, 1, 1, 1, 1, 1, 1, 0, None, params, None)
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        if rep:
            per.append((time.perf_counter() - t0) / n * 1e6)
    check(cuda.cuMemFree_v2(buf), "cuMemFree_v2")
    return per


def torch_loop(n, reps):
    import torch
    t = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    per = []
    for rep in range(reps + 1):
        t0 = time.perf_counter()
        for _ in range(n):
            t.add_(1)
        torch.cuda.synchronize()
        if rep:
            per.append((time.perf_counter() - t0) / n * 1e6)
    if float(t) != n * (reps + 1):
        raise RuntimeError(f"the additions did not all run: {float(t)}")
    return per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", choices=["ptx", "torch", "auto"], default="auto")
    a = ap.parse_args()
    errors = []
    for backend in (["ptx", "torch"] if a.backend == "auto" else [a.backend]):
        try:
            per = (ptx_loop if backend == "ptx" else torch_loop)(a.n, a.reps)
        except Exception as exc:  # noqa: BLE001 - the next backend, or one JSON error line
            errors.append(f"{backend}: {type(exc).__name__}: {exc}")
            continue
        print(json.dumps({"ok": True, "backend": backend, "n": a.n,
                          "us_per_launch_median": statistics.median(per), "us_per_launch_all": per,
                          "errors": errors}), flush=True)
        return 0
    print(json.dumps({"ok": False, "errors": errors}), flush=True)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
