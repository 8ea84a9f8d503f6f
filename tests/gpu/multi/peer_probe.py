#!/usr/bin/env python3
"""Peer-to-peer detection and a peer copy, as the driver and PyTorch report them.

Run natively and inside a fracgpu tenant on the same GPUs: the two JSON lines must agree
on every query (fracgpu passes peer-access queries through untouched) and the peer copy
bandwidth must be the same within noise. Reports, for every ordered pair of devices:
cuDeviceCanAccessPeer and cuDeviceGetP2PAttribute (performance rank, access supported,
native atomics, CUDA arrays) through ctypes on libcuda.so.1 (the dlopen route into the
driver, which fracgpu captures), torch.cuda.can_device_access_peer, and the GB/s of a
1 GiB device-to-device copy from each device to the other (median of 5 after a warm-up).
Prints ONE JSON line; exit 0 when every query succeeded.
"""
import ctypes
import json
import statistics
import sys
import time

P2P_ATTRIBUTES = {"performance_rank": 1, "access_supported": 2, "native_atomic_supported": 3,
                  "cuda_array_access_supported": 4}


def check(rc, what):
    if rc != 0:
        raise RuntimeError("%s: CUresult %d" % (what, rc))


def driver_queries():
    """{"count": n, "pairs": {"i->j": {...}}} from the driver API, via ctypes."""
    cuda = ctypes.CDLL("libcuda.so.1")
    check(cuda.cuInit(0), "cuInit")
    count = ctypes.c_int()
    check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    devs = []
    for i in range(count.value):
        d = ctypes.c_int()
        check(cuda.cuDeviceGet(ctypes.byref(d), i), "cuDeviceGet")
        devs.append(d)
    pairs = {}
    for i, di in enumerate(devs):
        for j, dj in enumerate(devs):
            if i == j:
                continue
            can = ctypes.c_int(-1)
            check(cuda.cuDeviceCanAccessPeer(ctypes.byref(can), di, dj), "cuDeviceCanAccessPeer")
            row = {"can_access_peer": can.value}
            for name, attr in P2P_ATTRIBUTES.items():
                v = ctypes.c_int(-1)
                check(cuda.cuDeviceGetP2PAttribute(ctypes.byref(v), attr, di, dj), "cuDeviceGetP2PAttribute")
                row[name] = v.value
            pairs["%d->%d" % (i, j)] = row
    return {"count": count.value, "pairs": pairs}


def torch_queries():
    import torch  # noqa: PLC0415

    n = torch.cuda.device_count()
    out = {"count": n, "can_access": {}, "copy_gbs": {}}
    nbytes = 1 << 30
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            key = "%d->%d" % (i, j)
            out["can_access"][key] = bool(torch.cuda.can_device_access_peer(i, j))
            src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % i)
            dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % j)
            times = []
            for k in range(6):
                torch.cuda.synchronize(i)
                torch.cuda.synchronize(j)
                t0 = time.perf_counter()
                dst.copy_(src, non_blocking=True)
                torch.cuda.synchronize(i)
                torch.cuda.synchronize(j)
                if k:
                    times.append(time.perf_counter() - t0)
            out["copy_gbs"][key] = round(nbytes / statistics.median(times) / 1e9, 2)
            del src, dst
            torch.cuda.empty_cache()
    return out


def main():
    result = {"ok": False}
    try:
        result["driver"] = driver_queries()
        result["torch"] = torch_queries()
        result["ok"] = True
    except Exception as exc:  # noqa: BLE001 - every failure becomes part of the JSON
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
