#!/usr/bin/env python3
"""JAX check: 50 jitted SGD steps of a linear regression on the GPU, in float64.

float64 (jax_enable_x64) keeps the result independent of reduction order to ~1e-15, so a
native run and a shim run agree far inside the comparator's 1e-6 (should the flag be gone,
it runs in float32 with looser tolerances). The same steps are run in NumPy as a reference.
The runner sets XLA_PYTHON_CLIENT_PREALLOCATE=false (defaulted here too) so XLA does not
grab 75% of the GPU. Fails if JAX has no GPU backend (it would otherwise fall back to the
CPU silently).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import rel_diff, run_client  # noqa: E402

STEPS = 50
LR = 0.1
N, D = 4096, 64


def numpy_reference(np, X, y):
    w = np.zeros(D)
    loss = None
    for _ in range(STEPS):
        r = X @ w - y
        loss = float(np.mean(r * r))
        g = (2.0 / N) * (X.T @ r)
        w = w - LR * g
    return w, loss


def gpu_device(jax):
    last = None
    for name in ("cuda", "gpu"):
        try:
            devs = jax.devices(name)
            if devs:
                return devs[0]
        except Exception as exc:  # noqa: BLE001 - try the other platform name
            last = exc
    raise RuntimeError("JAX has no GPU device: %s (backend %s)" % (last, jax.default_backend()))


def main():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import numpy as np
    import jax

    try:
        jax.config.update("jax_enable_x64", True)
    except Exception as exc:  # noqa: BLE001 - fall back to float32 (looser tolerances)
        print("jax_step: cannot enable x64 (%s); running in float32" % exc, file=sys.stderr)
    import jax.numpy as jnp

    gpu = gpu_device(jax)
    rs = np.random.RandomState(0)
    X = rs.standard_normal((N, D))
    w_true = rs.standard_normal(D)
    y = X @ w_true + 0.01 * rs.standard_normal(N)

    Xd = jax.device_put(X, gpu)
    yd = jax.device_put(y, gpu)
    w = jax.device_put(np.zeros(D), gpu)

    @jax.jit
    def step(w, X, y):
        def loss_fn(w):
            r = X @ w - y
            return jnp.mean(r * r)

        loss, g = jax.value_and_grad(loss_fn)(w)
        return w - LR * g, loss

    loss = None
    for _ in range(STEPS):
        w, loss = step(w, Xd, yd)
    w.block_until_ready()
    on_gpu = all(d.platform in ("gpu", "cuda") for d in w.devices())
    w_np = np.asarray(w)
    final_loss = float(loss)

    w_ref, loss_ref = numpy_reference(np, X, y)
    w_rel = float(np.max(np.abs(w_np - w_ref)) / max(float(np.max(np.abs(w_ref))), 1e-300))
    loss_rel = rel_diff(final_loss, loss_ref)
    tol = 1e-9 if w_np.dtype == np.float64 else 1e-4
    ok = on_gpu and w_rel < tol and loss_rel < tol
    return {
        "ok": bool(ok),
        "steps": STEPS,
        "final_loss": final_loss,
        "w_sum": float(np.sum(w_np)),
        "w_abs_sum": float(np.sum(np.abs(w_np))),
        "w_err_vs_true": float(np.linalg.norm(w_np - w_true)),
        "dtype": str(w_np.dtype),
        "on_gpu": bool(on_gpu),
        "info": {
            "jax": jax.__version__,
            "device": str(gpu),
            "device_kind": getattr(gpu, "device_kind", ""),
            "w_rel_diff_vs_numpy": w_rel,
            "loss_rel_diff_vs_numpy": loss_rel,
            "numpy_final_loss": loss_ref,
        },
    }


if __name__ == "__main__":
    sys.exit(run_client("jax", main))
