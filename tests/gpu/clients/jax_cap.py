#!/usr/bin/env python3
"""JAX under a memory cap, with XLA's default preallocation (XLA_PYTHON_CLIENT_PREALLOCATE
unset, XLA_PYTHON_CLIENT_MEM_FRACTION default 0.75): XLA sizes its pool from the total
memory the driver reports, which inside a fracgpu tenant is the cap.

Runs a tiny jitted op, reads jax.devices()[0].memory_stats(), writes them to --ready
(atomically) so that the runner can read the broker's view of the tenant while this
process is alive, then waits until the file --release exists (at most --wait seconds).
Prints one JSON line. ok: the op ran on the GPU, memory_stats() had a bytes_limit and the
release came in time.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_client  # noqa: E402
from jax_step import gpu_device  # noqa: E402


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--ready", required=True)
    p.add_argument("--release", required=True)
    p.add_argument("--wait", type=float, default=90.0)
    return p.parse_args()


def plain(stats):
    out = {}
    for k, v in (stats or {}).items():
        try:
            out[str(k)] = int(v)
        except (TypeError, ValueError):
            out[str(k)] = str(v)
    return out


def main():
    args = parse()
    seen_env = {k: os.environ.get(k) for k in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                                               "XLA_PYTHON_CLIENT_ALLOCATOR")}
    import jax
    import jax.numpy as jnp

    gpu = gpu_device(jax)
    x = jax.device_put(jnp.arange(1024, dtype=jnp.float32), gpu)
    y = jax.jit(lambda a: a * 2.0 + 1.0)(x)
    y.block_until_ready()
    value = float(jnp.sum(y))
    on_gpu = all(d.platform in ("gpu", "cuda") for d in y.devices())
    stats = plain(gpu.memory_stats())

    tmp = args.ready + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"pid": os.getpid(), "memory_stats": stats}, f)
    os.rename(tmp, args.ready)

    t0 = time.time()
    released = False
    while time.time() - t0 < args.wait:
        if os.path.exists(args.release):
            released = True
            break
        time.sleep(0.05)
    return {
        "ok": bool(on_gpu and value == float(1024 * 1024) and "bytes_limit" in stats and released),
        "on_gpu": bool(on_gpu),
        "result_ok": value == float(1024 * 1024),
        "bytes_limit": stats.get("bytes_limit"),
        "bytes_in_use": stats.get("bytes_in_use"),
        "memory_stats": stats,
        "released": released,
        "env": seen_env,
        "info": {"jax": jax.__version__, "device": str(gpu), "waited_s": round(time.time() - t0, 2)},
    }


if __name__ == "__main__":
    sys.exit(run_client("jax_cap", main))
