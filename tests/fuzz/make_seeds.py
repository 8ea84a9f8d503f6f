#!/usr/bin/env python3
"""Writes the binary seeds of two fracgpu fuzzers (the text seeds are plain files):

  corpus/segment/        quota + ledger images (include/fracgpu/tenant_segment.h, layout 1.4)
                         in segment_fuzz's input format: u16 LE quota length, the quota
                         file's bytes, the ledger file's bytes;
  corpus/device_plugin/  kubelet AllocateRequest / PreferredAllocationRequest messages
                         (k8s/device_plugin/proto/api.proto), serialised by hand.

Run it after a layout change (the offsets below follow the static_asserts of
tenant_segment.h): python3 tests/fuzz/make_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
GIB, MIB = 1 << 30, 1 << 20
GPU0 = "GPU-66726163-6770-7566-757a-7a0000000000"  # fuzz_admin_backend.cpp's simulated GPUs
GPU1 = "GPU-66726163-6770-7566-757a-7a0000000001"

QUOTA_MAGIC, LEDGER_MAGIC = 0x41544F5155504746, 0x5247444C55504746
QUOTA_SIZE, DEVICE_QUOTA = 192 + 16 * 192, 192
LEDGER_HEADER, DEVICE_USAGE, SLOT = 64, 64, 192
LEDGER_SIZE = 64 + 16 * 64 + 512 * 192 + 512 * 16 * 16


def put(buf, offset, fmt, *values):
    struct.pack_into("<" + fmt, buf, offset, *values)


def quota(devices, magic=QUOTA_MAGIC, minor=4, count=None, name=b"t"):
    """devices: (gpu, uuid, limit, request, grant, footprint, weight, ceiling, priority)."""
    q = bytearray(QUOTA_SIZE)
    put(q, 0, "QHHI", magic, 1, minor, QUOTA_SIZE)
    q[16:16 + len(name)] = name
    put(q, 80, "QII", 3, len(devices) if count is None else count, 0)
    for i, (gpu, uuid, limit, request, grant, footprint, weight, ceiling, prio) in enumerate(devices):
        base = 192 + i * DEVICE_QUOTA
        q[base:base + len(uuid)] = uuid.encode()
        put(q, base + 48, "IIQQQQIII", 1, gpu, limit, request, grant, footprint, weight, ceiling, prio)
        put(q, base + 144, "Q", (1 << 64) - 1)  # resident_target: none
    return q


def ledger(used, slots, magic=LEDGER_MAGIC, minor=4, size=LEDGER_SIZE, length=None):
    """used: {device: (used, peak)}; slots: {index: (state, pid, start, {device: used}, op_seq)}."""
    l = bytearray(LEDGER_SIZE)
    put(l, 0, "QHHI", magic, 1, minor, size)
    for d, (u, peak) in used.items():
        put(l, LEDGER_HEADER + d * DEVICE_USAGE, "QQ", u, peak)
    for i, (state, pid, start, per_device, op_seq) in slots.items():
        base = LEDGER_HEADER + 16 * DEVICE_USAGE + i * SLOT
        put(l, base, "IiQ", state, pid, start)
        for d, u in per_device.items():
            put(l, base + 16 + 8 * d, "Q", u)
        put(l, base + 144, "Q", op_seq)
    end = length if length is not None else LEDGER_HEADER + 16 * DEVICE_USAGE + (max(slots) + 1 if slots else 0) * SLOT
    return bytes(l[:end])


def segment_input(q, l):
    return struct.pack("<H", len(q)) + bytes(q) + bytes(l)


PUBLISHED = [(0, GPU0, 4 * GIB, GIB, GIB, 64 * MIB, 100, 0, 1),
             (1, GPU1, 8 * GIB, 0, 0, 512 * MIB, 30, 0, 1)]
LIVE, DEAD = 1, 2
TWO_PROCESSES = {0: (LIVE, 4242, 777, {0: 512 * MIB}, 6), 1: (LIVE, 4243, 778, {0: 256 * MIB, 1: GIB}, 2)}


def segment_seeds():
    q = quota(PUBLISHED)
    return {
        "fresh_tenant.bin": segment_input(b"", b""),
        "restart_two_processes.bin": segment_input(q, ledger({0: (768 * MIB, GIB), 1: (GIB, GIB)}, TWO_PROCESSES)),
        "ledger_header_zeroed.bin": segment_input(q, ledger({0: (768 * MIB, GIB)}, TWO_PROCESSES, magic=0, minor=0, size=0)),
        "ledger_garbage_slots.bin": segment_input(q, ledger(
            {0: (1 << 62, 3), 3: (5, 5)},
            {0: (7, 99, 1, {0: MIB}, 0), 1: (LIVE, 0, 5, {0: GIB}, 0), 2: (LIVE, 31337, 9, {0: 1 << 55}, 0),
             3: (LIVE, 4244, 10, {2: 4 * MIB}, 1), 5: (DEAD, 4245, 11, {0: 8 * MIB}, 3)},
            magic=0xDEADBEEF)),
        "died_inside_an_operation.bin": segment_input(q, ledger(
            {0: (900 * MIB, GIB)}, {0: (LIVE, 4242, 777, {0: 512 * MIB}, 8), 1: (LIVE, 4243, 778, {0: 400 * MIB}, 5)})),
        "old_minor_short_size.bin": segment_input(quota(PUBLISHED, minor=1), ledger(
            {0: (512 * MIB, 512 * MIB)}, {0: (LIVE, 4242, 777, {0: 512 * MIB}, 0)}, minor=1, size=64 + 16 * 64 + 512 * 192)),
        # The limit of device 0 was 15.75 GiB and the tenant holds 10 GiB; the spec now says 4 GiB.
        "limit_lowered_below_usage.bin": segment_input(
            quota([(0, GPU0, 16 * GIB - 256 * MIB, GIB, 10 * GIB, 64 * MIB, 100, 0, 1), PUBLISHED[1]]),
            ledger({0: (10 * GIB, 10 * GIB)}, {0: (LIVE, 4242, 777, {0: 10 * GIB}, 4)})),
        "quota_damaged_ledger_busy.bin": segment_input(
            quota(PUBLISHED, magic=0), ledger({0: (3 * GIB, 3 * GIB)}, {0: (LIVE, 4242, 777, {0: 3 * GIB}, 2)})),
        "quota_bad_device_count.bin": segment_input(quota(PUBLISHED, count=17), ledger({}, {})),
        "forged_slots.bin": segment_input(q, ledger(
            {0: (0, 0)}, {0: (LIVE, 4242, 777, {0: 512 * MIB}, 2), 7: (LIVE, 31337, 1, {0: 8 * GIB}, 0),
                          11: (DEAD, 4, 1, {0: 4 * GIB}, 0)})),
        "short_files.bin": segment_input(q[:100], ledger({}, {}, length=50)),
    }


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    data = payload.encode() if isinstance(payload, str) else payload
    return varint(number << 3 | 2) + varint(len(data)) + data


def ids(gpu, *slices):
    return [f"{gpu}::{k}" for k in slices]


def allocate(*containers):
    return b"".join(field(1, b"".join(field(1, i) for i in c)) for c in containers)


def preferred(*containers):
    body = b""
    for available, must, size in containers:
        c = b"".join(field(1, i) for i in available) + b"".join(field(2, i) for i in must) + field(3, size)
        body += field(1, c)
    return body


def device_plugin_seeds():
    everything = ids(GPU0, *range(6)) + ids(GPU1, *range(6))
    return {
        "allocate_two_normal.pb": allocate(ids(GPU0, 0, 1)),
        "allocate_high.pb": allocate(ids(GPU1, 6)),
        "allocate_besteffort.pb": allocate(ids(GPU1, 8, 9, 10)),
        "allocate_two_containers.pb": allocate(ids(GPU0, 0, 1), ids(GPU0, 2)),
        "allocate_across_gpus.pb": allocate(ids(GPU0, 0) + ids(GPU1, 0)),
        "allocate_unknown_gpu.pb": allocate(ids("GPU-00000000-0000-0000-0000-000000000009", 0)),
        "allocate_stale_holder.pb": allocate(ids(GPU0, 0, 1, 2, 3, 4, 5), ids(GPU0, 0, 1, 2, 3)),
        "allocate_bad_ids.pb": allocate(["not-a-slice", GPU0 + "::64", GPU0 + "::-1"]),
        "preferred_best_fit.pb": preferred((ids(GPU0, 0, 1, 2) + ids(GPU1, 0, 1, 2, 3, 4, 5), [], 2)),
        "preferred_pinned.pb": preferred((everything, ids(GPU1, 3), 3)),
        "preferred_too_many.pb": preferred((ids(GPU0, 0, 1) + ids(GPU1, 0), [], 5)),
        # GPU 0 offered "twice": best fit must not count a repeated ID as a free slice.
        "preferred_duplicates.pb": preferred((ids(GPU0, 0, 0) + ids(GPU1, 0, 1), [], 2)),
        "preferred_unparsed.pb": preferred((["x", "y"] + ids(GPU0, 4), ["z"], 3), ([], [], 0)),
    }


def write(directory, seeds):
    path = os.path.join(HERE, "corpus", directory)
    os.makedirs(path, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("segment", segment_seeds())
    write("device_plugin", device_plugin_seeds())
