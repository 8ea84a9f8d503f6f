#!/usr/bin/env python3
"""PyTorch under a memory cap: what the framework sees and where its allocations stop.

Run as a fracgpu tenant (run_memory_checks.sh: `fracgpu run --memory 8GiB`), once per
allocator (PYTORCH_CUDA_ALLOC_CONF unset, expandable_segments:True, backend:cudaMallocAsync).
Reads torch.cuda.mem_get_info(), then allocates --chunk byte tensors until PyTorch raises
torch.cuda.OutOfMemoryError (at most --max-bytes, so a cap that is not enforced ends the
loop too), and proves the process still works afterwards. Prints one JSON line; the runner
judges the numbers. ok: the OOM error was raised and the GPU was usable after it.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_client  # noqa: E402

MiB = 1 << 20


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--chunk", type=int, default=256 * MiB)
    p.add_argument("--max-bytes", type=int, default=16 << 30)
    return p.parse_args()


def main():
    args = parse()
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    free0, total0 = torch.cuda.mem_get_info()
    try:
        backend = torch.cuda.get_allocator_backend()
    except Exception as exc:  # noqa: BLE001 - informational only
        backend = "unknown (%s)" % exc
    held = []
    oom = None
    limit = max(1, args.max_bytes // args.chunk)
    try:
        while len(held) < limit:
            held.append(torch.empty(args.chunk, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as exc:
        oom = str(exc)
    held_bytes = len(held) * args.chunk
    reserved = torch.cuda.memory_reserved()
    allocated = torch.cuda.memory_allocated()
    free1, total1 = torch.cuda.mem_get_info()

    # Still a working CUDA process after the refusal: free one chunk, compute, compare.
    if held:
        del held[-1]
    x = torch.arange(1024, dtype=torch.float32, device="cuda")
    s = float((x * 2.0 + 1.0).sum().item())
    torch.cuda.synchronize()
    usable = s == float(1024 * 1024)
    return {
        "ok": bool(oom is not None and usable),
        "oom_raised": oom is not None,
        "held_at_oom": held_bytes,
        "chunks": held_bytes // args.chunk,
        "chunk": args.chunk,
        "total": int(total0),
        "free_start": int(free0),
        "total_at_oom": int(total1),
        "free_at_oom": int(free1),
        "reserved_at_oom": int(reserved),
        "allocated_at_oom": int(allocated),
        "usable_after": bool(usable),
        "backend": backend,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "oom_message": (oom or "")[:400],
        "info": {
            "torch": torch.__version__,
            "device_total_memory": int(torch.cuda.get_device_properties(0).total_memory),
        },
    }


if __name__ == "__main__":
    sys.exit(run_client("torch_cap", main))
