"""The swap engine's own account of its moves, read from the tenants' stderr logs
(FRACGPU_LOG_LEVEL=info; interpose/core/swap_engine.cpp), for the overcommit checks'
bandwidth rows. Lines:

    fracgpu[484] info: moved 15360.0 MiB of tenant 'ab' to host memory at the broker's request in 3.658 s (4.4 GB/s)
    fracgpu[484] info: brought 15360.0 MiB back from host memory in 0.340 s (47.4 GB/s)

and, where the shim logs it, a line naming the pinning and copying times of a move (any
fracgpu line with "pin" and "cop" and seconds in it: its format is not fixed yet, so its
figures are taken loosely and the line itself is kept). Standard library only."""
import glob
import os
import re

MOVED = re.compile(r"moved ([\d.]+) MiB of tenant '([^']*)' to host memory.* in ([\d.]+) s \(([\d.]+) GB/s\)")
BROUGHT = re.compile(r"brought ([\d.]+) MiB back from host memory in ([\d.]+) s \(([\d.]+) GB/s\)")
PIN_S = re.compile(r"pin\w*\D{0,40}?([\d.]+) ?s\b")
COPY_S = re.compile(r"cop\w*\D{0,40}?([\d.]+) ?s\b")
GOAL = 0.8  # of the link's measured peak
# The link of the last H200 run (docs/benchmarks.md), when phase l did not run.
DOCUMENTED_LINK = {"d2h": 55.2, "h2d": 55.3, "source": "2026-12-01 run (phase l not run)"}


def parse_text(text, source=""):
    moves = {"out": [], "in": [], "pin_copy": []}
    for line in text.splitlines():
        if "fracgpu[" not in line:
            continue
        m = MOVED.search(line)
        if m:
            moves["out"].append({"mib": float(m.group(1)), "tenant": m.group(2), "s": float(m.group(3)),
                                 "gbps": float(m.group(4)), "log": source})
            continue
        m = BROUGHT.search(line)
        if m:
            moves["in"].append({"mib": float(m.group(1)), "s": float(m.group(2)),
                                "gbps": float(m.group(3)), "log": source})
            continue
        low = line.lower()
        if "pin" in low and "cop" in low:
            pin, cop = PIN_S.search(low), COPY_S.search(low)
            moves["pin_copy"].append({"line": line.strip()[-300:], "log": source,
                                      "pin_s": float(pin.group(1)) if pin else None,
                                      "copy_s": float(cop.group(1)) if cop else None})
    return moves


def parse_logs(logdir, prefixes):
    """Every move in the .err logs of `logdir` whose names start with one of `prefixes`."""
    total = {"out": [], "in": [], "pin_copy": []}
    for prefix in prefixes:
        for path in sorted(glob.glob(os.path.join(logdir, prefix + "*.err"))):
            try:
                text = open(path, errors="replace").read()
            except OSError:
                continue
            for k, v in parse_text(text, os.path.basename(path)).items():
                total[k] += v
    return total


def summary(moves):
    """Bytes-weighted GB/s (all bytes / all seconds) and the per-move range."""
    if not moves:
        return None
    mib = sum(m["mib"] for m in moves)
    s = sum(m["s"] for m in moves)
    rates = [m["gbps"] for m in moves]
    return {"moves": len(moves), "gib": mib / 1024, "s": s,
            "gbps": mib * (1 << 20) / 1e9 / s if s > 0 else 0.0, "min": min(rates), "max": max(rates)}


def rows(b, phase, prefixes, expect_moves):
    """Adds the rows "swap-out / swap-in (shim log) vs the link" of one phase to b; returns
    the parsed moves. expect_moves: whether this phase must have moved memory (a phase whose
    tenants are not swappable reports "none logged" as a pass)."""
    moves = parse_logs(b.logs, prefixes)
    link = b.data.get("link") or DOCUMENTED_LINK
    note = "" if "source" not in link else f" [link of the {link['source']}]"
    for kind, key, label in (("out", "d2h", "swap-out (shim log) vs link DtoH"),
                             ("in", "h2d", "swap-in (shim log) vs link HtoD")):
        s = summary(moves[kind])
        if s is None:
            b.row(phase, f"{label}, goal >= {GOAL:.0%}", not expect_moves,
                  "none logged" + ("" if expect_moves else " (nothing was expected to move)"))
            continue
        share = s["gbps"] / link[key] if link.get(key) else 0.0
        b.row(phase, f"{label}, goal >= {GOAL:.0%}", share >= GOAL,
              f"{s['moves']} moves, {s['gib']:.1f} GiB in {s['s']:.2f} s = {s['gbps']:.1f} GB/s = "
              f"{share:.0%} of {link[key]:.1f} (per move {s['min']:.1f}-{s['max']:.1f} GB/s){note}")
    if moves["pin_copy"]:
        pins = [m["pin_s"] for m in moves["pin_copy"] if m["pin_s"] is not None]
        copies = [m["copy_s"] for m in moves["pin_copy"] if m["copy_s"] is not None]
        b.row(phase, "swap-out pinning vs copying (shim log)", True,
              f"{len(moves['pin_copy'])} lines; pin {sum(pins):.2f} s, copy {sum(copies):.2f} s in all; "
              f"e.g. {moves['pin_copy'][0]['line'][-160:]}")
    b.data.setdefault("swap_log", {})[phase] = moves
    return moves
