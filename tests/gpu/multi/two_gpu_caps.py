#!/usr/bin/env python3
"""Per-device memory caps as a real multi-GPU client sees them (PyTorch + NVML).

Run inside a fracgpu tenant with a different cap on each GPU (for example
`fracgpu run --memory 0=24GiB,1=12GiB --gpu 0,1 -- two_gpu_caps.py --expect 0=24GiB,1=12GiB`).
For every CUDA device the process sees, it reports torch.cuda.mem_get_info() (the shim
answers cuMemGetInfo with the cap), NVML's memory info for the same GPU (matched by UUID,
so it also holds under CUDA_VISIBLE_DEVICES), how much it could fill in 256 MiB tensors
before the first out-of-memory error, and whether a single tensor one GiB larger than the
cap is refused. --expect INDEX=SIZE (device index as this process numbers them) makes
"ok" require total == SIZE, NVML total == SIZE, filled within [SIZE - 2 GiB, SIZE] and the
oversize tensor refused. Prints ONE JSON line; exit 0 when ok.
"""
import argparse
import json
import sys

UNITS = {"gib": 1 << 30, "mib": 1 << 20, "gb": 10 ** 9, "mb": 10 ** 6, "": 1}
CHUNK = 256 << 20
SLACK = 2 << 30  # the context's own footprint and PyTorch's caching granularity


def parse_size(text):
    t = text.strip().lower()
    for unit in sorted(UNITS, key=len, reverse=True):
        if unit and t.endswith(unit):
            return int(float(t[: -len(unit)]) * UNITS[unit])
    return int(t)


def parse_expect(items):
    out = {}
    for item in items:
        for part in item.split(","):
            idx, _, size = part.partition("=")
            out[int(idx)] = parse_size(size)
    return out


def bare_uuid(text):
    """A GPU UUID without the "GPU-" prefix, lower case (NVML and torch spell it differently)."""
    t = str(text).strip().lower()
    return t[4:] if t.startswith("gpu-") else t


def nvml_totals():
    """{uuid: total bytes} from NVML, or {"error": text}."""
    try:
        import pynvml  # noqa: PLC0415

        pynvml.nvmlInit()
        try:
            out = {}
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = pynvml.nvmlDeviceGetUUID(h)
                uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
                out[bare_uuid(uuid)] = int(pynvml.nvmlDeviceGetMemoryInfo(h).total)
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - reported, judged by the caller
        return {"error": "%s: %s" % (type(exc).__name__, exc)}


def fill(torch, dev):
    """Bytes allocated in CHUNK tensors before the first OOM (all freed again)."""
    held = []
    try:
        while len(held) * CHUNK < (1 << 40):
            held.append(torch.empty(CHUNK, dtype=torch.uint8, device=dev))
    except torch.OutOfMemoryError:
        pass
    filled = len(held) * CHUNK
    del held
    torch.cuda.empty_cache()
    return filled


def refuses(torch, dev, nbytes):
    try:
        t = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        del t
        return False
    except torch.OutOfMemoryError:
        return True
    finally:
        torch.cuda.empty_cache()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--expect", action="append", default=[], help="INDEX=SIZE[,INDEX=SIZE]: the cap each device must show")
    args = p.parse_args(argv)
    expect = parse_expect(args.expect)
    import torch  # noqa: PLC0415

    nvml = nvml_totals()
    devices = []
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        free, total = torch.cuda.mem_get_info(dev)
        uuid = bare_uuid(torch.cuda.get_device_properties(dev).uuid)
        row = {"index": i, "uuid": uuid, "total": total, "free": free, "nvml_total": nvml.get(uuid)}
        row["filled"] = fill(torch, dev)
        row["oversize_refused"] = refuses(torch, dev, total + (1 << 30))
        want = expect.get(i)
        if want is not None:
            row["expected"] = want
            row["ok"] = (total == want and row["nvml_total"] == want and want - SLACK <= row["filled"] <= want
                         and row["oversize_refused"])
        devices.append(row)
    ok = bool(devices) and all(d.get("ok", True) for d in devices) and set(expect) <= {d["index"] for d in devices}
    print(json.dumps({"ok": ok, "devices": devices, "nvml_error": nvml.get("error")}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
