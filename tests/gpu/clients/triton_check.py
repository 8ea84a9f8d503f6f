#!/usr/bin/env python3
"""Triton check: a @triton.jit vector add on 1M float32 elements, compared with PyTorch's
x + y on the same device. Triton compiles its launcher against libcuda.so.1 and loads the
kernel with the driver API, so this exercises the dlopen route.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_client  # noqa: E402


# Triton resolves the names a kernel uses (tl) in the module's globals, so the imports,
# done lazily so that an import error becomes this client's JSON error line, bind globals.
torch = triton = tl = None


def main():
    global torch, triton, tl
    import torch
    import triton
    import triton.language as tl

    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
        pid = tl.program_id(axis=0)
        offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)

    n = 1 << 20
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(n, generator=gen).to("cuda")
    y = torch.randn(n, generator=gen).to("cuda")
    out = torch.empty_like(x)
    block = 1024
    grid = (triton.cdiv(n, block),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=block)
    torch.cuda.synchronize()
    ref = x + y
    max_err = float((out - ref).abs().max().item())
    checksum = float(out.double().sum().item())
    abs_checksum = float(out.double().abs().sum().item())
    ok = max_err == 0.0 and abs_checksum > 0.0
    return {
        "ok": bool(ok),
        "n": n,
        "max_err": max_err,
        "checksum": checksum,
        "abs_checksum": abs_checksum,
        "info": {
            "triton": triton.__version__,
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name(0),
        },
    }


if __name__ == "__main__":
    sys.exit(run_client("triton", main))
