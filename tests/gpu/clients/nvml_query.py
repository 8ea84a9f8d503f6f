#!/usr/bin/env python3
"""NVML through pynvml (nvidia-ml-py), GPU index 0. Prints one JSON line.

  nvml_query.py memory      nvmlDeviceGetMemoryInfo (v1) and, where pynvml has it, the
                            _v2 struct (version=nvmlMemory_v2): what a process sees, e.g.
                            inside a fracgpu tenant (the shim answers with the cap)
  nvml_query.py processes   the memory figures plus nvmlDeviceGetComputeRunningProcesses:
                            host PIDs and per-process usedGpuMemory, seen from outside
ok: nvmlInit and the v1 query succeeded.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_client  # noqa: E402


def as_int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "memory"
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        out = {"v1": {"total": as_int(m.total), "free": as_int(m.free), "used": as_int(m.used)}}
        try:
            v2ver = getattr(pynvml, "nvmlMemory_v2")
            m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=v2ver)
            out["v2"] = {"total": as_int(m2.total), "reserved": as_int(getattr(m2, "reserved", None)),
                         "free": as_int(m2.free), "used": as_int(m2.used)}
        except Exception as exc:  # noqa: BLE001 - older pynvml or no _v2 in the driver
            out["v2_error"] = "%s: %s" % (type(exc).__name__, exc)
        if mode == "processes":
            procs = []
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                procs.append({"pid": as_int(p.pid), "used": as_int(getattr(p, "usedGpuMemory", None))})
            out["processes"] = procs
        out["ok"] = True
        out["info"] = {"driver": str(pynvml.nvmlSystemGetDriverVersion()), "pid": os.getpid()}
        return out
    finally:
        pynvml.nvmlShutdown()


if __name__ == "__main__":
    sys.exit(run_client("nvml_query", main))
