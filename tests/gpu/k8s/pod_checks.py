#!/usr/bin/env python3
"""The Python half of run_pod_checks.sh: reads the JSON the shell cannot (jq is not on the GPU
machine), runs the small programs that go inside the "container", and judges and reports.

  get FILE KEY...          print one value of FILE's last JSON object (strings raw, the rest as
                           JSON); each KEY is one level (an object key or a list index), so keys
                           with dots or slashes (fracgpu.io/tenant) need no quoting
  mounts FILE              the fake kubelet's mounts as fracgpu-test-container-run arguments
                           (--mount HOST CONTAINER ro|rw ...), NUL-separated
  envs FILE                its envs as KEY=VALUE, NUL-separated
  capacity STATUS          gpus[0].memory_capacity, memory_total of `fracgpu status --json`
  probe                    (inside) what a container process sees of the shim: one JSON line
  hold --bytes N           (inside, real GPU) hold N bytes with PyTorch until killed
  judge KIND ...           one check: prints its detail line, exit 0 = pass, 1 = fail (see JUDGES)
  report DIR               DIR/checks.tsv -> DIR/results.json and the PASS/FAIL table (stdout)
"""
import json
import os
import sys
import time

MIB = 1 << 20


def last_json(path):
    """PATH as one JSON object (`fracgpu status --json` is pretty-printed), else its last
    line that parses as one (programs print logs before their result line)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    try:
        whole = json.loads(text)
        if isinstance(whole, dict):
            return whole
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def dig(value, keys):
    for key in keys:
        if isinstance(value, list):
            value = value[int(key)]
        else:
            value = value[key]
    return value


def cmd_get(path, *keys):
    value = dig(last_json(path), keys)
    print(value if isinstance(value, str) else json.dumps(value))


def emit_nul(words):
    sys.stdout.write("".join(w + "\0" for w in words))


def cmd_mounts(path):
    words = []
    for m in last_json(path)["allocate"]["mounts"]:
        words += ["--mount", m["host_path"], m["container_path"], "ro" if m.get("read_only") else "rw"]
    emit_nul(words)


def cmd_envs(path):
    emit_nul("%s=%s" % kv for kv in sorted(last_json(path)["allocate"]["envs"].items()))


def cmd_capacity(path):
    gpu = last_json(path)["gpus"][0]
    print(gpu["memory_capacity"], gpu["memory_total"])


def cmd_probe():
    """Runs in the container: the shim must be mapped although LD_PRELOAD is unset."""
    with open("/proc/self/maps", encoding="utf-8") as f:
        maps = f.read()
    try:
        with open("/etc/ld.so.preload", encoding="utf-8", errors="replace") as f:
            preload = f.read().strip()
    except OSError as exc:
        preload = "unreadable: %s" % exc
    print(json.dumps({
        "pid": os.getpid(),
        "ld_preload": os.environ.get("LD_PRELOAD"),
        "preload_file": preload,
        "shim_mapped": "/usr/local/fracgpu/lib/libfracgpu.so" in maps,
        "any_fracgpu_mapped": "libfracgpu" in maps,
        "socket": os.path.exists("/run/fracgpu/broker.sock"),
        "preload_writable": os.access("/etc/ld.so.preload", os.W_OK),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nvidia_visible_devices": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        "fracgpu_socket": os.environ.get("FRACGPU_SOCKET"),
    }), flush=True)


def cmd_hold(*args):
    nbytes = int(args[args.index("--bytes") + 1])
    import torch  # noqa: PLC0415

    held = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    held.fill_(1)
    torch.cuda.synchronize()
    print(json.dumps({"holding": nbytes, "pid": os.getpid()}), flush=True)
    while True:
        time.sleep(1)


# --- judging: each returns (ok, detail) -------------------------------------------------


def j_probe(out):
    p = last_json(out)
    if p is None:
        return False, "no JSON from the probe"
    ok = (p["shim_mapped"] and p["ld_preload"] is None and p["socket"]
          and p["preload_file"] == "/usr/local/fracgpu/lib/libfracgpu.so" and not p["preload_writable"]
          and p["cuda_visible_devices"] == p["nvidia_visible_devices"] and p["cuda_visible_devices"])
    return ok, "shim mapped %s, LD_PRELOAD %s, ld.so.preload %r (read-only %s), socket %s, CUDA_VISIBLE_DEVICES %s" % (
        p["shim_mapped"], "unset" if p["ld_preload"] is None else repr(p["ld_preload"]), p["preload_file"],
        not p["preload_writable"], p["socket"], p["cuda_visible_devices"])


def j_caps(out, expect):
    """two_gpu_caps.py --expect 0=EXPECT (torch total, NVML total, fill, oversize refused)."""
    expect = int(expect)
    r = last_json(out)
    if r is None or not r.get("devices"):
        return False, "no result from two_gpu_caps.py (see its log)"
    d = r["devices"][0]
    ok = bool(r.get("ok")) and len(r["devices"]) == 1 and d["total"] == expect and d.get("expected") == expect
    return ok, (
        "%d device(s); torch total %d, NVML total %s, expected %d; filled %.2f GiB; oversize refused %s%s" % (
            len(r["devices"]), d["total"], d.get("nvml_total"), expect, d["filled"] / (1 << 30),
            d["oversize_refused"], "; nvml error: %s" % r["nvml_error"] if r.get("nvml_error") else ""))


def j_info(out, expect):
    """fracgpu-alloc-client info (simulated driver): cuMemGetInfo / cuDeviceTotalMem total."""
    expect = int(expect)
    r = last_json(out)
    if r is None:
        return False, "no JSON from fracgpu-alloc-client info"
    return r.get("total") == expect and r.get("device_total") == expect, "cuMemGetInfo total %s, cuDeviceTotalMem %s, expected %d" % (
        r.get("total"), r.get("device_total"), expect)


def j_refused(out, rc):
    """fracgpu-alloc-client hold above the cap (simulated driver) must be refused."""
    text = open(out, encoding="utf-8", errors="replace").read() if os.path.exists(out) else ""
    return rc == "1" and "CUDA_ERROR_OUT_OF_MEMORY" in text, "exit %s, %s" % (
        rc, "CUDA_ERROR_OUT_OF_MEMORY" if "CUDA_ERROR_OUT_OF_MEMORY" in text else "no OOM in the output")


def j_smi(out, expect):
    """nvidia-smi --query-gpu=memory.total (MiB) inside: the cap, to the MiB."""
    expect = int(expect)
    try:
        values = [int(v.strip()) for v in open(out, encoding="utf-8").read().split() if v.strip()]
    except (OSError, ValueError):
        return False, "unreadable nvidia-smi output"
    ok = len(values) == 1 and abs(values[0] - expect / MIB) <= 1
    return ok, "memory.total %s MiB, cap %.1f MiB" % (values, expect / MIB)


def j_status(path, tenant, pid, priority, limit):
    s = last_json(path)
    if s is None:
        return False, "no status JSON"
    for t in s.get("tenants", []):
        if t.get("name") != tenant:
            continue
        pids = [p["pid"] for p in t.get("processes", [])]
        d = t["devices"][0] if t.get("devices") else {}
        ok = (int(pid) in pids and len(t["devices"]) == 1 and d.get("priority") == priority
              and d.get("memory_limit") == int(limit))
        return ok, "tenant %s: pids %s (want %s), priority %s (want %s), memory_limit %s (want %s), used %s" % (
            tenant, pids, pid, d.get("priority"), priority, d.get("memory_limit"), limit, d.get("memory_used"))
    return False, "tenant %s not in the broker's status (%s)" % (tenant, [t.get("name") for t in s.get("tenants", [])])


def j_host(out, full, cap, mode):
    """The host process: no shim, the whole GPU."""
    full, cap = int(full), int(cap)
    r = last_json(out)
    if r is None:
        return False, "no JSON from the host process"
    if mode == "fake":
        return r.get("total") == full, "cuMemGetInfo total %s, the GPU's %d (slice cap %d)" % (r.get("total"), full, cap)
    if not r.get("devices"):
        return False, "no device seen"
    d = r["devices"][0]
    ok = d["total"] == full and (d.get("nvml_total") or 0) > cap and d["filled"] > cap
    return ok, "torch total %d (broker's memory_total %d), NVML total %s, filled %.2f GiB (slice cap %.2f GiB)" % (
        d["total"], full, d.get("nvml_total"), d["filled"] / (1 << 30), cap / (1 << 30))


def j_maps(out):
    text = open(out, encoding="utf-8", errors="replace").read().strip() if os.path.exists(out) else ""
    return text == "0", "libfracgpu lines in the host process's maps: %s" % (text or "?")


JUDGES = {"probe": j_probe, "caps": j_caps, "info": j_info, "refused": j_refused, "smi": j_smi,
          "status": j_status, "host": j_host, "maps": j_maps}


def cmd_judge(kind, *args):
    try:
        ok, detail = JUDGES[kind](*args)
    except Exception as exc:  # noqa: BLE001 - a malformed result is a failed check
        ok, detail = False, "%s: %s" % (type(exc).__name__, exc)
    print(detail)
    return 0 if ok else 1


def cmd_report(directory):
    rows = []
    with open(os.path.join(directory, "checks.tsv"), encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 4:
                rows.append({"case": parts[0], "check": parts[1], "result": parts[2], "detail": parts[3]})
    extra = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json") and name != "results.json":
            extra[name] = last_json(os.path.join(directory, name))
    ok = bool(rows) and all(r["result"] == "PASS" for r in rows)
    with open(os.path.join(directory, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"ok": ok, "checks": rows, "files": extra}, f, indent=1)
    width = max([len(r["case"] + r["check"]) for r in rows] + [10]) + 3
    print("%-*s %-6s %s" % (width, "case/check", "result", "detail"))
    for r in rows:
        print("%-*s %-6s %s" % (width, r["case"] + "/" + r["check"], r["result"], r["detail"]))
    print("overall: %s (%d checks, %d failed)" % ("PASS" if ok else "FAIL", len(rows),
                                                  sum(r["result"] != "PASS" for r in rows)))
    return 0 if ok else 1


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    handlers = {"get": cmd_get, "mounts": cmd_mounts, "envs": cmd_envs, "capacity": cmd_capacity,
                "probe": cmd_probe, "hold": cmd_hold, "judge": cmd_judge, "report": cmd_report}
    if cmd not in handlers:
        print("pod_checks.py: unknown command %s" % cmd, file=sys.stderr)
        return 2
    return handlers[cmd](*args) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
