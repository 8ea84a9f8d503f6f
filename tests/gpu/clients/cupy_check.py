#!/usr/bin/env python3
"""CuPy check: an elementwise expression, a custom ElementwiseKernel (compiled at run time),
reductions and a float32 matmul (cuBLAS) on fixed-seed data, each checked against NumPy.
Prints one JSON line with the checksums.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import rel_diff, run_client  # noqa: E402


def main():
    import numpy as np
    import cupy as cp

    rs = np.random.RandomState(1234)
    n = 1 << 20
    v = rs.standard_normal(n).astype(np.float32)
    u = rs.standard_normal(n).astype(np.float32)
    A = rs.standard_normal((512, 512)).astype(np.float32)
    B = rs.standard_normal((512, 512)).astype(np.float32)

    dv = cp.asarray(v)
    du = cp.asarray(u)

    # elementwise (CuPy's own kernels)
    e = cp.sin(dv) * 2.0 + dv * du
    e_ref = np.sin(v.astype(np.float64)) * 2.0 + v.astype(np.float64) * u.astype(np.float64)
    e_host = cp.asnumpy(e).astype(np.float64)
    elem_max_err = float(np.max(np.abs(e_host - e_ref)))

    # a custom kernel, compiled with NVRTC and loaded as a module
    k = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x * 3.0f - y", "fracgpu_check_axmy")
    z = k(dv, du)
    z_ref = v.astype(np.float64) * 3.0 - u.astype(np.float64)
    kernel_max_err = float(np.max(np.abs(cp.asnumpy(z).astype(np.float64) - z_ref)))

    # reductions
    sum64 = float(dv.astype(cp.float64).sum())
    sum64_ref = float(np.sum(v.astype(np.float64)))
    vmax = float(dv.max())
    vmin = float(dv.min())
    argmax = int(dv.argmax())

    # matmul (cuBLAS)
    dC = cp.asarray(A) @ cp.asarray(B)
    C_ref = A.astype(np.float64) @ B.astype(np.float64)
    C = cp.asnumpy(dC).astype(np.float64)
    mm_rel_err = float(np.max(np.abs(C - C_ref)) / np.max(np.abs(C_ref)))
    cp.cuda.Stream.null.synchronize()

    try:
        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    except Exception as exc:  # noqa: BLE001 - informational only
        name = "unknown (%s)" % exc
    ok = (
        elem_max_err < 1e-4  # float32 results up to ~30: one ulp is 2e-6
        and kernel_max_err < 1e-4
        and rel_diff(sum64, sum64_ref) < 1e-12
        and vmax == float(v.max())
        and vmin == float(v.min())
        and argmax == int(v.argmax())
        and mm_rel_err < 1e-2  # loose: also right if float32 GEMMs used TF32
    )
    return {
        "ok": bool(ok),
        "elementwise_sum": float(e.sum(dtype=cp.float64)),
        "kernel_sum": float(z.sum(dtype=cp.float64)),
        "sum": sum64,
        "max": vmax,
        "min": vmin,
        "argmax": argmax,
        "matmul_sum": float(dC.sum(dtype=cp.float64)),
        "matmul_abs_sum": float(cp.abs(dC).sum(dtype=cp.float64)),
        "info": {
            "cupy": cp.__version__,
            "device": name,
            "elementwise_max_err": elem_max_err,
            "kernel_max_err": kernel_max_err,
            "matmul_rel_err": mm_rel_err,
        },
    }


if __name__ == "__main__":
    sys.exit(run_client("cupy", main))
