"""The benchmark's workload kinds and the command that runs each one: a PyTorch tenant
(torch_tenant.py) where PyTorch with CUDA is there and the kind has one, else the driver-API
client (fracgpu-bench-client), which runs on the simulated GPU and on a real one. Every
command speaks the same protocol (--ready, --barrier, --stop-file, --out; one JSON line with
samples [t, units] or latencies), so the phases do not care which implementation ran.
serve_command() is the same workload as a warm worker (--serve DIR: pool.py)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_TENANT = os.path.join(HERE, "torch_tenant.py")

# kind: (driver-API mode and its arguments on a real GPU, on the simulated GPU; torch mode or None)
KINDS = {
    "compute": (["spin", "--kernel-us", "1000"], ["spin", "--kernel-us", "1000"], "matmul"),
    # The simulated GPU's copies are host memcpy (slow, CPU-bound): small buffers there.
    "memory": (["copy", "--bytes", str(512 << 20)], ["copy", "--bytes", str(8 << 20)], "copy"),
    "train": (["mixed", "--kernel-us", "500", "--bytes", str(256 << 20)],
              ["mixed", "--kernel-us", "500", "--bytes", str(4 << 20)], "train"),
    "decode": (["spin", "--kernel-us", "150", "--sync-every", "1"],
               ["spin", "--kernel-us", "150", "--sync-every", "1"], "decode"),
    "graph": (["graph", "--kernel-us", "200", "--graph-kernels", "8", "--sync-every", "2"],
              ["graph", "--kernel-us", "200", "--graph-kernels", "8", "--sync-every", "2"], None),
    "onoff": (["onoff", "--kernel-us", "1000"], ["onoff", "--kernel-us", "1000"], None),
    "eager": (["spin", "--kernel-us", "1", "--sync-every", "64"],
              ["spin", "--kernel-us", "1", "--sync-every", "64"], "eager"),
    # batch kinds of the latency phase (kernel length in the name)
    "k0.05": (["spin", "--kernel-us", "50", "--sync-every", "16"], ["spin", "--kernel-us", "50", "--sync-every", "16"], None),
    "k0.2": (["spin", "--kernel-us", "200", "--sync-every", "8"], ["spin", "--kernel-us", "200", "--sync-every", "8"], None),
    "k2": (["spin", "--kernel-us", "2000", "--sync-every", "4"], ["spin", "--kernel-us", "2000", "--sync-every", "4"], None),
    # the latency tenant: one 0.1 ms kernel + sync per request (its options come per round)
    "latency": (["latency", "--kernel-us", "100"], ["latency", "--kernel-us", "100"], None),
    # real tenants of the latency phase (--latency-tenants real; PyTorch only: torch_models.py). The
    # driver-API arguments are the nearest stand-ins, used only where PyTorch is missing.
    "encoder": (["latency", "--kernel-us", "100"], ["latency", "--kernel-us", "100"], "encoder"),
    "llm": (["latency", "--kernel-us", "100"], ["latency", "--kernel-us", "100"], "llm"),
    "tftrain": (["mixed", "--kernel-us", "500", "--bytes", str(256 << 20)],
                ["mixed", "--kernel-us", "500", "--bytes", str(4 << 20)], "tftrain"),
    "compiled": (["graph", "--kernel-us", "200", "--graph-kernels", "8", "--sync-every", "2"],
                 ["graph", "--kernel-us", "200", "--graph-kernels", "8", "--sync-every", "2"], "compiled"),
    # overhead: empty-kernel launches, cuMemAlloc+cuMemFree pairs (their counts come per round)
    "launch": (["launch"], ["launch"], None),
    "alloc": (["alloc", "--bytes", str(1 << 20)], ["alloc", "--bytes", str(1 << 20)], None),
}

# Nominal device time of one unit of each kind (ms), for the latency table's batch_kernel_ms.
KERNEL_MS = {"k0.05": 0.05, "k0.2": 0.2, "k2": 2.0, "compute": 1.0, "graph": 0.2, "train": 0.5}


class Workloads:
    def __init__(self, client, sim, torch_ok, backend="auto", python=sys.executable):
        self.client, self.sim, self.python = client, sim, python
        self.torch_ok = torch_ok and backend != "driver"

    def impl(self, kind, driver=False):
        """'torch' or 'driver': what runs `kind` here (driver=True: the driver-API client)."""
        return "torch" if self.torch_ok and KINDS[kind][2] and not driver else "driver"

    def command(self, kind, seconds, out, tag, ready="", barrier="", stop_file="", extra=(), driver=False):
        real_args, sim_args, torch_mode = KINDS[kind]
        common = ["--seconds", "%.3f" % seconds, "--out", out, "--tag", tag]
        for flag, v in (("--ready", ready), ("--barrier", barrier), ("--stop-file", stop_file)):
            if v:
                common += [flag, v]
        if self.impl(kind, driver) == "torch":
            return [self.python, TORCH_TENANT, torch_mode, *common, *extra]
        return [self.client, *(sim_args if self.sim else real_args), *common, *extra]

    def serve_command(self, kind, serve_dir, ready, tag, extra=(), driver=False, prepare=()):
        """`kind` as a warm worker: set up and warmed once, then one measurement per round;
        prepare: other kinds its rounds will run (PyTorch builds their models at the start)."""
        real_args, sim_args, torch_mode = KINDS[kind]
        common = ["--serve", serve_dir, "--ready", ready, "--tag", tag, "--warmup-ms", "300"]
        if self.impl(kind, driver) == "torch":
            modes = [KINDS[k][2] for k in prepare if KINDS[k][2] and KINDS[k][2] != torch_mode]
            return [self.python, TORCH_TENANT, torch_mode, *common, *(["--prepare", ",".join(modes)] if modes else []),
                    *extra]
        return [self.client, *(sim_args if self.sim else real_args), *common, *extra]

    def round_args(self, kind, torch_worker):
        """A round's options that make a warm worker (PyTorch or driver-API, whichever it is)
        run `kind`: --mode first, then every option of the kind, defaults spelled out, since a
        round starts from the worker's command line, not from the round before."""
        real_args, sim_args, torch_mode = KINDS[kind]
        if torch_worker:
            if not torch_mode:
                raise ValueError("no PyTorch workload for kind %s" % kind)
            return ["--mode", torch_mode]
        args = list(sim_args if self.sim else real_args)
        rest = args[1:]
        if "--sync-every" not in rest:
            rest += ["--sync-every", "8"]
        return ["--mode", args[0]] + rest

    def driver(self, mode, *args):
        return [self.client, mode, *[str(a) for a in args]]
