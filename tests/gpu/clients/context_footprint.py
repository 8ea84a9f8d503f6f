#!/usr/bin/env python3
"""What one CUDA context costs on this GPU, natively (run without the shim).

Driver API through ctypes on libcuda.so.1, GPU 0:
  - first context: NVML's used memory (and this process's usedGpuMemory) before and after
    cuDevicePrimaryCtxRetain (cuMemGetInfo needs a context, so NVML measures this one);
  - one more context: cuMemGetInfo free with the primary context, then after cuCtxCreate
    (what fracgpu's broker measures at start-up and charges per context).
Prints one JSON line (bytes). ok: the driver calls succeeded.
"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_client  # noqa: E402


def nvml_state():
    """(used, own_process_used) from NVML, or (None, None)."""
    try:
        import pynvml
    except Exception:  # noqa: BLE001 - NVML figures are optional
        return None, None
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        used = int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
        mine = None
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if int(p.pid) == os.getpid() and p.usedGpuMemory is not None:
                mine = int(p.usedGpuMemory)
        pynvml.nvmlShutdown()
        return used, mine
    except Exception as exc:  # noqa: BLE001
        print("context_footprint: NVML: %s" % exc, file=sys.stderr)
        return None, None


def main():
    cu = ctypes.CDLL("libcuda.so.1")
    c_int, c_uint, c_size_t, c_void_p, POINTER = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p, ctypes.POINTER
    cu.cuInit.argtypes = [c_uint]
    cu.cuDeviceGet.argtypes = [POINTER(c_int), c_int]
    cu.cuDeviceTotalMem_v2.argtypes = [POINTER(c_size_t), c_int]
    cu.cuDevicePrimaryCtxRetain.argtypes = [POINTER(c_void_p), c_int]
    cu.cuDevicePrimaryCtxRelease_v2.argtypes = [c_int]
    cu.cuCtxSetCurrent.argtypes = [c_void_p]
    cu.cuMemGetInfo_v2.argtypes = [POINTER(c_size_t), POINTER(c_size_t)]
    cu.cuCtxDestroy_v2.argtypes = [c_void_p]

    def ck(rc, what):
        if rc != 0:
            raise RuntimeError("%s failed with CUresult %d" % (what, rc))

    def mem_info():
        free, total = c_size_t(), c_size_t()
        ck(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
        return free.value, total.value

    ck(cu.cuInit(0), "cuInit")
    dev = c_int()
    ck(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    device_total = c_size_t()
    ck(cu.cuDeviceTotalMem_v2(ctypes.byref(device_total), dev.value), "cuDeviceTotalMem_v2")

    nvml_before, _ = nvml_state()
    primary = c_void_p()
    ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(primary), dev.value), "cuDevicePrimaryCtxRetain")
    ck(cu.cuCtxSetCurrent(primary), "cuCtxSetCurrent")
    free1, total = mem_info()
    nvml_after, own = nvml_state()

    extra = c_void_p()
    if hasattr(cu, "cuCtxCreate_v2"):
        cu.cuCtxCreate_v2.argtypes = [POINTER(c_void_p), c_uint, c_int]
        ck(cu.cuCtxCreate_v2(ctypes.byref(extra), 0, dev.value), "cuCtxCreate_v2")
        how = "cuCtxCreate_v2"
    else:
        cu.cuCtxCreate_v4.argtypes = [POINTER(c_void_p), c_void_p, c_uint, c_int]
        ck(cu.cuCtxCreate_v4(ctypes.byref(extra), None, 0, dev.value), "cuCtxCreate_v4")
        how = "cuCtxCreate_v4"
    free2, _ = mem_info()  # the new context is current
    ck(cu.cuCtxDestroy_v2(extra), "cuCtxDestroy_v2")
    ck(cu.cuCtxSetCurrent(primary), "cuCtxSetCurrent")
    free3, _ = mem_info()
    cu.cuDevicePrimaryCtxRelease_v2(dev.value)

    first = None if nvml_before is None or nvml_after is None else nvml_after - nvml_before
    return {
        "ok": True,
        "first_context_nvml": first,
        "first_context_process_nvml": own,
        "one_more_context": free1 - free2,
        "given_back_on_destroy": free3 - free2,
        "free_with_primary": free1,
        "mem_info_total": total,
        "device_total": device_total.value,
        "created_with": how,
    }


if __name__ == "__main__":
    sys.exit(run_client("context_footprint", main))
