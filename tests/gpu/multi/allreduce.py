"""NCCL all-reduce through PyTorch distributed, one process per GPU: checks the sum and
reports bus bandwidth (nccl-tests' definition: 2*(n-1)/n * bytes / time), plus what each
process sees as its GPU's memory (the tenant's cap under fracgpu). One JSON line from rank 0."""
import json
import os
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    free, total = torch.cuda.mem_get_info()
    nbytes = 256 << 20
    x = torch.full((nbytes // 4,), float(rank + 1), device="cuda")
    for _ in range(5):
        dist.all_reduce(x)
    x.fill_(float(rank + 1))
    dist.all_reduce(x)
    torch.cuda.synchronize()
    expected = world * (world + 1) / 2
    ok = bool(torch.all(x == expected).item())
    iters = 20
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / iters
    busbw = 2 * (world - 1) / world * nbytes / dt / 1e9
    can_peer = torch.cuda.can_device_access_peer(0, 1) if torch.cuda.device_count() > 1 else None
    seen = [None] * world
    dist.all_gather_object(seen, {"rank": rank, "total": total, "free": free, "ok": ok, "busbw": busbw,
                                  "devices": torch.cuda.device_count(), "peer": can_peer})
    if rank == 0:
        print(json.dumps({"ranks": seen, "sum_ok": all(s["ok"] for s in seen),
                          "busbw_gbs": min(s["busbw"] for s in seen)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
