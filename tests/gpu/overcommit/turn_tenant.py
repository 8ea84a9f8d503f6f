#!/usr/bin/env python3
"""A PyTorch tenant of the overcommit checks' phase t ("tenants whose caps sum to twice the
GPU, each training in turn"). Not on any measured path of fracgpu itself.

    turn_tenant.py --gib W --turns N --go PREFIX --steps S [--reference FILE]   a tenant
    turn_tenant.py --reference-out FILE --turns N --steps S                      the reference
    turn_tenant.py --gib W --hold SECONDS                                        native baseline

A tenant builds W GiB of seeded data (1 GiB tensors) with exact checksums (int64 sums of the
bits, so "intact" means bit for bit) and a small MLP (fixed seed, deterministic algorithms,
CUBLAS_WORKSPACE_CONFIG=:4096:8 set before CUDA starts), prints {"ready": W}, then for turn
k = 1..N waits for the file PREFIX.k (its memory may move to host meanwhile), takes the first
device touch (the swap-in, "resume_s"), trains S steps, verifies the checksums and prints one
line {"turn": k, "resume_s", "train_s", "verify_s", "seconds", "intact", "loss"}. After turn N
it compares its parameters with the reference's (FILE, written by --reference-out: the same
training without the working set) and prints {"final": true, "bitwise_equal", "rel_diff"}.
--hold: allocate W GiB and hold it (or print {"oom": true} when the GPU has no room).
--stub: no torch and no GPU, for the dry run of the orchestration (dry_turns.py): the data are
bytes, the "training" a deterministic float recurrence, residency simulated through files.
Every wait is bounded by --max-wait; errors end in one {"error": ...} line and exit status 1.
"""
import argparse
import faulthandler
import json
import os
import signal
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts: cuBLAS determinism

WIDTH = 2048      # MLP WIDTH -> 2*WIDTH -> WIDTH: 16.8 M parameters (67 MB)
BATCH = 4096      # about 10 ms per step on an H200 in float32: 300 steps are a few seconds


def say(obj):
    print(json.dumps(obj), flush=True)


def wait_file(path, limit):
    end = time.time() + limit
    while not os.path.exists(path):
        if time.time() > end:
            raise TimeoutError(f"no {os.path.basename(path)} within {limit:.0f} s")
        time.sleep(0.01)


# ------------------------------------------------------------------ the real tenant (torch)
class TorchWork:
    def __init__(self, gib, with_model=True):
        import torch
        self.torch = torch
        torch.use_deterministic_algorithms(True)
        torch.backends.cuda.matmul.allow_tf32 = False
        self.dev = torch.device("cuda")
        self.blocks = []
        self.sums = None
        self.gib = gib
        if with_model:
            torch.manual_seed(0)  # the model and its inputs come from the CPU's generator
            self.model = torch.nn.Sequential(torch.nn.Linear(WIDTH, 2 * WIDTH), torch.nn.ReLU(),
                                             torch.nn.Linear(2 * WIDTH, WIDTH)).to(self.dev)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
            g = torch.Generator().manual_seed(1)
            self.x = torch.randn(BATCH, WIDTH, generator=g).to(self.dev)
            self.y = torch.roll(self.x, 1, dims=1)

    def build(self):
        """The working set; raises torch.cuda.OutOfMemoryError when the GPU has no room."""
        torch = self.torch
        for i in range(self.gib):
            g = torch.Generator(device=self.dev).manual_seed(1000 + i)
            self.blocks.append(torch.rand(1 << 28, device=self.dev, generator=g))  # 1 GiB
        torch.cuda.synchronize()
        self.sums = self.checksums()

    def checksums(self):
        # Exact: int64 sums of the int32 bit patterns, in 64 MiB pieces (no 2 GiB temporaries).
        torch = self.torch
        parts = [torch.stack([c.sum(dtype=torch.int64) for c in b.view(torch.int32).split(1 << 24)]).sum()
                 for b in self.blocks]
        return torch.stack(parts).tolist() if parts else []

    def touch(self):
        return float(self.x[0, 0])  # the first device access after a swap-out brings it all back

    def train(self, steps):
        loss = None
        for _ in range(steps):
            self.opt.zero_grad(set_to_none=False)
            loss = ((self.model(self.x) - self.y) ** 2).mean()
            loss.backward()
            self.opt.step()
        return float(loss)

    def intact(self):
        return self.checksums() == self.sums

    def params(self):
        torch = self.torch
        return torch.cat([p.detach().flatten() for p in self.model.parameters()]).cpu()

    def save_params(self, path):
        self.torch.save(self.params(), path + ".tmp")
        os.replace(path + ".tmp", path)

    def compare(self, path):
        torch = self.torch
        mine, ref = self.params(), torch.load(path)
        diff = float((mine.double() - ref.double()).abs().max())
        scale = float(ref.double().abs().max()) or 1.0
        return {"bitwise_equal": bool(torch.equal(mine, ref)), "max_abs_diff": diff,
                "rel_diff": diff / scale, "param_sum": float(mine.double().sum()),
                "ref_param_sum": float(ref.double().sum())}


def is_oom(exc):
    return "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError"


# ------------------------------------------------------------------ the stub (dry run, no torch)
class StubWork:
    """Same protocol, no GPU: blocks are 1 KiB per GiB; residency is asked of the simulator
    (dry_turns.py) through $FAKE_SIM_DIR/<tenant>.state / .resident."""

    def __init__(self, gib, with_model=True):
        self.gib = gib
        self.sim = os.environ.get("FAKE_SIM_DIR", "")
        self.name = os.environ.get("FAKE_TENANT", "")
        self.mode = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or "default"
        self.p = [0.5 + 0.01 * i for i in range(64)]
        self.blocks, self.sums = [], None
        import atexit
        atexit.register(lambda: self.state("exit"))

    def state(self, what):
        if self.sim and self.name:
            with open(os.path.join(self.sim, self.name + ".state.tmp"), "w") as f:
                json.dump({"state": what, "gib": self.gib, "mode": self.mode, "t": time.time()}, f)
            os.replace(os.path.join(self.sim, self.name + ".state.tmp"),
                       os.path.join(self.sim, self.name + ".state"))

    def build(self):
        native = os.environ.get("FAKE_NATIVE_DIR")
        if native:  # native holders share the simulated GPU's capacity
            held = sum(int(open(os.path.join(native, f)).read() or 0) for f in os.listdir(native))
            if held + self.gib > float(os.environ.get("FAKE_CAPACITY_GIB", "139.8")):
                raise MemoryError("CUDA out of memory (simulated)")
            open(os.path.join(native, str(os.getpid())), "w").write(str(self.gib))
        self.state("alloc")
        import hashlib
        self.blocks = [bytearray(hashlib.sha256(b"%d" % i).digest() * 32) for i in range(self.gib)]
        self.sums = self.checksums()
        self.state("idle")

    def checksums(self):
        import zlib
        return [zlib.crc32(b) for b in self.blocks]

    def touch(self):
        self.state("active")
        if self.sim and self.name:  # the shim's swap-in: wait until the simulator has it back
            flag = os.path.join(self.sim, self.name + ".resident")
            while not os.path.exists(flag):
                time.sleep(0.01)
        return 0.0

    def train(self, steps):
        loss = 0.0
        for _ in range(steps):
            self.p = [v - 0.01 * (v - 0.1 * j) * (1 + v * v) ** -0.5 for j, v in enumerate(self.p)]
            loss = sum((v - 0.1 * j) ** 2 for j, v in enumerate(self.p)) / len(self.p)
        time.sleep(float(os.environ.get("FAKE_TRAIN_S", "0.2")))
        return loss

    def intact(self):
        ok = self.checksums() == self.sums
        self.state("idle")
        return ok

    def save_params(self, path):
        json.dump(self.p, open(path + ".tmp", "w"))
        os.replace(path + ".tmp", path)

    def compare(self, path):
        ref = json.load(open(path))
        diff = max(abs(a - b) for a, b in zip(self.p, ref))
        return {"bitwise_equal": self.p == ref, "max_abs_diff": diff,
                "rel_diff": diff / (max(abs(v) for v in ref) or 1.0), "param_sum": sum(self.p),
                "ref_param_sum": sum(ref)}


# ------------------------------------------------------------------ modes
def run_reference(work, a):
    t0 = time.perf_counter()
    losses = [work.train(a.steps) for _ in range(a.turns)]
    work.save_params(a.reference_out)
    say({"reference": True, "turns": a.turns, "steps": a.steps, "losses": losses,
         "seconds": round(time.perf_counter() - t0, 3)})


def run_hold(work, a):
    t0 = time.perf_counter()
    try:
        work.build()
    except Exception as exc:  # noqa: BLE001 - the OOM is the expected outcome of the third
        if is_oom(exc) or isinstance(exc, MemoryError):
            say({"oom": True, "held_gib": len(work.blocks), "error": str(exc)[:200]})
            return 3
        raise
    say({"ready": a.gib, "alloc_s": round(time.perf_counter() - t0, 3), "pid": os.getpid()})
    time.sleep(a.hold)
    return 0


def run_tenant(work, a):
    t0 = time.perf_counter()
    work.build()
    say({"ready": a.gib, "alloc_s": round(time.perf_counter() - t0, 3), "pid": os.getpid()})
    for k in range(1, a.turns + 1):
        wait_file(f"{a.go}.{k}", a.max_wait)
        t1 = time.perf_counter()
        work.touch()
        t2 = time.perf_counter()
        loss = work.train(a.steps)
        t3 = time.perf_counter()
        intact = work.intact()
        t4 = time.perf_counter()
        say({"turn": k, "resume_s": round(t2 - t1, 3), "train_s": round(t3 - t2, 3),
             "verify_s": round(t4 - t3, 3), "seconds": round(t4 - t1, 3), "intact": intact,
             "loss": loss})
    if a.reference:
        wait_file(a.reference, a.max_wait)
        say({"final": True, **work.compare(a.reference)})
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=int, default=0)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--go", default="")
    ap.add_argument("--reference", default="", help="the reference's parameters, compared at the end")
    ap.add_argument("--reference-out", default="", help="be the reference: write the parameters here")
    ap.add_argument("--hold", type=float, default=None, help="native baseline: hold W GiB this long")
    ap.add_argument("--max-wait", type=float, default=600)
    ap.add_argument("--stub", action="store_true")
    a = ap.parse_args()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a stack on demand when stuck
    kind = StubWork if a.stub else TorchWork
    try:
        if a.reference_out:
            return run_reference(kind(0), a) or 0
        if a.hold is not None:
            return run_hold(kind(a.gib, with_model=False), a)
        return run_tenant(kind(a.gib), a)
    except Exception as exc:  # noqa: BLE001 - one line the orchestrator can read
        say({"error": f"{type(exc).__name__}: {str(exc)[:300]}", "oom": is_oom(exc)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
