"""NCCL all-reduce through PyTorch distributed, one process per GPU (start it with
`python3 -m torch.distributed.run --standalone --nproc_per_node=N allreduce.py`).

For each message size (--sizes-mib, default 64,256,1024) it checks that the all-reduce of
rank-valued float32 tensors gives the exact sum 1+2+...+N on every element of every rank,
then times --iters all-reduces after --warmup ones and reports bus bandwidth as nccl-tests
defines it (2*(N-1)/N * bytes / time; the slowest rank's figure). Each rank also reports
what it sees as its GPU's memory (torch.cuda.mem_get_info: the tenant's cap on that GPU
under fracgpu) and whether it can reach the other GPU peer to peer. Rank 0 prints ONE JSON
line; exit 0 when every sum was right. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 is
forced here too, before NCCL initialises).
"""
import argparse
import json
import os
import sys
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def measure(nbytes, world, rank, warmup, iters):
    x = torch.full((nbytes // 4,), float(rank + 1), device="cuda")
    for _ in range(warmup):
        dist.all_reduce(x)
    x.fill_(float(rank + 1))
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ok = bool(torch.all(x == world * (world + 1) / 2).item())
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / iters
    del x
    return ok, 2 * (world - 1) / world * nbytes / dt / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mib", default="64,256,1024", help="message sizes in MiB (default 64,256,1024)")
    p.add_argument("--iters", type=int, default=20, help="timed all-reduces per size (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces first (default 5)")
    args = p.parse_args()
    sizes = [int(s) << 20 for s in args.sizes_mib.split(",") if s.strip()]
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    free, total = torch.cuda.mem_get_info()
    mine = {"rank": rank, "total": total, "free": free, "devices": torch.cuda.device_count(),
            "peer": torch.cuda.can_device_access_peer(0, 1) if torch.cuda.device_count() > 1 else None,
            "sizes": {}}
    for nbytes in sizes:
        ok, busbw = measure(nbytes, world, rank, args.warmup, args.iters)
        mine["sizes"][str(nbytes >> 20)] = {"ok": ok, "busbw": busbw}
    seen = [None] * world
    dist.all_gather_object(seen, mine)
    good = all(s["ok"] for r in seen for s in r["sizes"].values())
    if rank == 0:
        busbw = {k: round(min(r["sizes"][k]["busbw"] for r in seen), 2) for k in mine["sizes"]}
        print(json.dumps({"ranks": seen, "sum_ok": good, "busbw_gbs": busbw}), flush=True)
    dist.destroy_process_group()
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
