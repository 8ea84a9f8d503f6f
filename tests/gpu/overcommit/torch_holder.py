#!/usr/bin/env python3
"""A PyTorch tenant for the overcommit checks. Allocates --gib GiB as 1 GiB tensors filled
from a seeded generator, trains a small MLP for --steps steps, prints {"ready":...}; waits for
--go FILE (its memory may move to host meanwhile), then touches everything again (the first
touch is the swap-in), checks every tensor against its checksum, trains again and prints
{"intact":..., "resume_s":..., "loss":...}. --grab: just allocate --gib and report the time."""
import argparse
import faulthandler
import json
import os
import signal
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=int, required=True)
    ap.add_argument("--go", default="")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--grab", action="store_true")
    a = ap.parse_args()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a stack on demand when stuck
    dev = torch.device("cuda")
    t0 = time.perf_counter()
    blocks = []
    for i in range(a.gib):
        g = torch.Generator(device=dev).manual_seed(1000 + i)
        blocks.append(torch.rand(1 << 28, device=dev, generator=g))  # 1 GiB of float32
    torch.cuda.synchronize()
    took = time.perf_counter() - t0
    if a.grab:
        print(json.dumps({"grabbed_gib": a.gib, "seconds": round(took, 3)}), flush=True)
        time.sleep(3600)
        return
    sums = [float(b.double().sum()) for b in blocks]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 1024, device=dev)

    def train(n):
        loss = None
        for _ in range(n):
            opt.zero_grad()
            loss = ((model(x) - x) ** 2).mean()
            loss.backward()
            opt.step()
        return float(loss)

    loss0 = train(a.steps)
    print(json.dumps({"ready": a.gib, "alloc_s": round(took, 3), "loss": loss0}), flush=True)
    while a.go and not os.path.exists(a.go):
        time.sleep(0.01)
    t1 = time.perf_counter()
    probe = float(blocks[0][0])  # the first device-memory touch brings it all back
    resume = time.perf_counter() - t1
    intact = all(abs(float(b.double().sum()) - s) <= 1e-6 * abs(s) for b, s in zip(blocks, sums))
    loss1 = train(a.steps)
    print(json.dumps({"intact": intact, "resume_s": round(resume, 3), "probe": probe,
                      "loss_before": loss0, "loss_after": loss1,
                      "trained": loss1 < loss0}), flush=True)


if __name__ == "__main__":
    main()
