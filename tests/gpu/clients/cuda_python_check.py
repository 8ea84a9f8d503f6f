#!/usr/bin/env python3
"""cuda-python check: the driver API through NVIDIA's Python bindings, which dlopen
libcuda.so.1 and resolve entry points themselves: cuInit, device name and memory,
primary context, cuMemAlloc / cuMemsetD32 / cuMemcpyHtoD / cuMemcpyDtoH / cuMemFree.
"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_client  # noqa: E402


def load_driver():
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6 / cuda-bindings

        return driver, "cuda.bindings.driver"
    except ImportError:
        from cuda import cuda as driver  # older cuda-python

        return driver, "cuda.cuda"


def main():
    driver, api = load_driver()

    def ck(what, res):
        if isinstance(res, tuple):
            err, rest = res[0], res[1:]
        else:
            err, rest = res, ()
        success = False
        try:
            success = err == driver.CUresult.CUDA_SUCCESS or int(err) == 0
        except Exception:  # noqa: BLE001 - an unexpected type is a failure
            success = False
        if not success:
            name = str(err)
            try:
                r = driver.cuGetErrorName(err)
                if r[0] == driver.CUresult.CUDA_SUCCESS:
                    name = r[1].decode() if isinstance(r[1], bytes) else str(r[1])
            except Exception:  # noqa: BLE001 - keep the raw error
                pass
            raise RuntimeError("%s failed: %s" % (what, name))
        if len(rest) == 0:
            return None
        return rest[0] if len(rest) == 1 else rest

    ck("cuInit", driver.cuInit(0))
    version = ck("cuDriverGetVersion", driver.cuDriverGetVersion())
    count = ck("cuDeviceGetCount", driver.cuDeviceGetCount())
    dev = ck("cuDeviceGet", driver.cuDeviceGet(0))
    raw_name = ck("cuDeviceGetName", driver.cuDeviceGetName(256, dev))
    if isinstance(raw_name, (bytes, bytearray)):
        name = bytes(raw_name).split(b"\0", 1)[0].decode(errors="replace")
    else:
        name = str(raw_name)
    device_total = int(ck("cuDeviceTotalMem", driver.cuDeviceTotalMem(dev)))
    ctx = ck("cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain(dev))
    ck("cuCtxSetCurrent", driver.cuCtxSetCurrent(ctx))

    words = 1 << 20  # 4 MiB of 32-bit words
    nbytes = words * 4
    fill = 0x5EED1234
    half = (ctypes.c_uint32 * (words // 2))()
    for i in range(words // 2):
        half[i] = (i * 2654435761) & 0xFFFFFFFF
    back = (ctypes.c_uint32 * words)()

    dptr = ck("cuMemAlloc", driver.cuMemAlloc(nbytes))
    ck("cuMemsetD32", driver.cuMemsetD32(dptr, fill, words))
    ck("cuMemcpyHtoD", driver.cuMemcpyHtoD(dptr, ctypes.addressof(half), nbytes // 2))
    ck("cuMemcpyDtoH", driver.cuMemcpyDtoH(ctypes.addressof(back), dptr, nbytes))
    ck("cuCtxSynchronize", driver.cuCtxSynchronize())
    free_b, total_b = ck("cuMemGetInfo", driver.cuMemGetInfo())
    ck("cuMemFree", driver.cuMemFree(dptr))
    ck("cuDevicePrimaryCtxRelease", driver.cuDevicePrimaryCtxRelease(dev))

    mismatches = 0
    checksum = 0
    for i in range(words):
        expect = half[i] if i < words // 2 else fill
        if back[i] != expect:
            mismatches += 1
        checksum += back[i]
    free_b, total_b = int(free_b), int(total_b)
    ok = mismatches == 0 and count >= 1 and 0 < free_b <= total_b and device_total > 0
    return {
        "ok": bool(ok),
        "device_name": name,
        "device_count": int(count),
        "device_total_mem": device_total,
        "mem_get_info_total": total_b,
        "free_le_total": free_b <= total_b,
        "memcpy_mismatches": mismatches,
        "checksum": checksum,
        "info": {"api": api, "driver_version": int(version), "free_bytes": free_b},
    }


if __name__ == "__main__":
    sys.exit(run_client("cuda_python", main))
