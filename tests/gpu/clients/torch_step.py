#!/usr/bin/env python3
"""PyTorch check: 20 deterministic SGD steps of a 1024->1024->10 MLP on CUDA.

Prints one JSON line: every step's loss (repr floats) and checksums of the weights.
--expandable-segments sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before torch is
imported, so the caching allocator uses the VMM API (cuMemCreate/cuMemMap).
The runner sets CUBLAS_WORKSPACE_CONFIG=:4096:8; it is defaulted here too.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import rel_diff, run_client  # noqa: E402

STEPS = 20


def train(torch, device, x, y):
    import torch.nn.functional as F

    torch.manual_seed(1234)  # weights are initialised on the CPU, then moved
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = x.to(device)
    y = y.to(device)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    losses = [float(v.item()) for v in losses]
    params = [p.detach().to("cpu", torch.float64) for p in model.parameters()]
    wsum = float(sum(float(p.sum().item()) for p in params))
    wabs = float(sum(float(p.abs().sum().item()) for p in params))
    return losses, wsum, wabs


def main(args):
    if args.expandable_segments:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    on_gpu = args.device != "cpu"  # --device cpu: a dry run of this script without a GPU
    if on_gpu and not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    gen = torch.Generator().manual_seed(42)
    x = torch.randn(256, 1024, generator=gen)
    y = torch.randint(0, 10, (256,), generator=gen)

    dev = torch.device(args.device)
    losses, wsum, wabs = train(torch, dev, x, y)
    free_b = total_b = max_alloc = None
    if on_gpu:
        torch.cuda.synchronize()
        free_b, total_b = torch.cuda.mem_get_info()
        max_alloc = torch.cuda.max_memory_allocated()

    # The same training on the CPU: the GPU must be numerically close (float32, different
    # summation orders), which shows the kernels really ran correctly.
    cpu_losses, cpu_wsum, _ = train(torch, torch.device("cpu"), x, y)
    cpu_loss_rel = rel_diff(losses[-1], cpu_losses[-1])

    finite = all(math.isfinite(v) for v in losses) and math.isfinite(wsum)
    ok = finite and losses[-1] < losses[0] and cpu_loss_rel < 1e-3
    return {
        "ok": ok,
        "steps": STEPS,
        "final_loss": losses[-1],
        "losses": losses,
        "weight_sum": wsum,
        "weight_abs_sum": wabs,
        "info": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(dev) if on_gpu else "cpu",
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "cpu_final_loss": cpu_losses[-1],
            "cpu_weight_sum": cpu_wsum,
            "cpu_loss_rel_diff": cpu_loss_rel,
            "mem_get_info": [free_b, total_b],
            "max_memory_allocated": max_alloc,
        },
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--expandable-segments", action="store_true")
    p.add_argument("--device", default="cuda:0", help="cuda:0 (default) or cpu for a dry run")
    a = p.parse_args()
    sys.exit(run_client("torch_vmm" if a.expandable_segments else "torch", lambda: main(a)))
