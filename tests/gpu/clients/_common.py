"""Shared harness of the fracgpu GPU check clients.

Every client prints exactly one JSON line on stdout, as its last line, and nothing else:
file descriptor 1 is pointed at stderr while the client runs (libraries that print to
stdout, from Python or from C, end up on stderr), and the JSON line is written to the saved
descriptor at the end. The line always has "client" and "ok"; "info" holds what is not
deterministic (versions, timings, free memory) and is left out of native/shim comparisons.
Exit status: 0 when ok is true, 1 otherwise (including any exception).
"""
import json
import os
import sys
import time
import traceback


def _claim_stdout():
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    return saved


def _emit(fd, obj):
    line = json.dumps(obj, sort_keys=True, default=str) + "\n"
    data = line.encode("utf-8")
    while data:
        n = os.write(fd, data)
        data = data[n:]


def run_client(name, body):
    """Runs body() -> dict (with "ok"), prints the JSON line, returns the exit status."""
    saved = _claim_stdout()
    t0 = time.time()
    try:
        result = body()
        if not isinstance(result, dict):
            raise TypeError("client body returned %r" % type(result))
        rc = 0 if result.get("ok") is True else 1
    except BaseException as exc:  # noqa: BLE001 - any failure becomes one JSON line
        traceback.print_exc()
        result = {"ok": False, "error": ("%s: %s" % (type(exc).__name__, exc))[:2000]}
        rc = 1
    result["client"] = name
    info = result.setdefault("info", {})
    if isinstance(info, dict):
        info["elapsed_s"] = round(time.time() - t0, 3)
        info["python"] = sys.version.split()[0]
    sys.stderr.flush()
    try:
        _emit(saved, result)
    finally:
        os.close(saved)
    return rc


def rel_diff(a, b):
    a = float(a)
    b = float(b)
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-300)
