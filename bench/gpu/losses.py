"""Where fracgpu loses, derived from a run's rows (docs_section.py's list): every row where a
peer (native time slicing, MPS, HAMi-core) beats fracgpu, and the rows where fracgpu wins at a
price (a batch that keeps less than 0.9 of its native throughput). Also the latency goal
(phases_latency.py records it per row; older runs get it computed here the same way) and the
grouping of share rows into scenarios. Pure functions of the rows."""
from collections import OrderedDict

GOAL = {"alone_factor": 1.5, "alone_plus_ms": 0.1, "batch_ratio": 0.9}
SHARE_POINTS, EFFICIENCY = 0.005, 0.01  # share differences below these are within a run's spread
SPLIT_ORDER = ["70/30", "50/50", "90/10", "50/30/20"]
WORKLOAD_ORDER = ["compute", "memory", "mixed"]


def goal(row):
    """meets_goal: the better fracgpu way (lower p99) has p99 < MPS's, p99 <= 1.5 x alone + 0.1
    ms, and its batch_ratio >= 0.9; goal_checks holds each condition for both ways."""
    mps, alone = row.get("mps_p99_ms"), row.get("alone_p99_ms")
    checks = {}
    for mode, key, ratio_key in (("fracgpu", "fracgpu", "batch_ratio"),
                                 ("fracgpu-mps", "fracgpu_mps", "fracgpu_mps_batch_ratio")):
        p99, ratio = row.get(key + "_p99_ms"), row.get(ratio_key)
        if p99 is None:
            continue
        checks[mode] = {"p99_ms": p99, "below_mps": mps is not None and p99 < mps,
                        "near_alone": alone is not None and p99 <= GOAL["alone_factor"] * alone + GOAL["alone_plus_ms"],
                        "batch_kept": ratio is not None and ratio >= GOAL["batch_ratio"]}
    best = min(checks, key=lambda m: checks[m]["p99_ms"]) if checks else None
    met = best is not None and all(v for k, v in checks[best].items() if k != "p99_ms")
    row.update(best_fracgpu_mode=best, meets_goal=bool(met), meets_goal_by=best if met else None,
               goal_checks=checks)
    return row


def goal_of(row):
    if "meets_goal" not in row:
        g = goal(dict(row))
        return {"met": g["meets_goal"], "by": g["meets_goal_by"], "best": g["best_fracgpu_mode"]}
    return {"met": row["meets_goal"], "by": row.get("meets_goal_by"), "best": row.get("best_fracgpu_mode")}


def share_scenarios(rows):
    """{(split, workload): {setup: [tenant rows]}} in split and workload order. Tenants of one
    measurement share setup, split and efficiency (and, in newer runs, "scenario")."""
    groups, last = [], None
    for r in rows:
        if r.get("skipped") or r.get("split") in (None, "-"):
            continue
        key = (r.get("setup"), r.get("split"), r.get("scenario") or r.get("efficiency"))
        if key != last or (groups and r.get("tenant") in [t.get("tenant") for t in groups[-1]]):
            groups.append([])
            last = key
        groups[-1].append(r)
    table = OrderedDict()
    for g in groups:
        kinds = {k for t in g for k in str(t.get("workload")).split("+")}  # "a+b": a failed measurement's row
        wk = g[0].get("scenario") or (kinds.pop() if len(kinds) == 1 else "mixed")
        table.setdefault((g[0]["split"], wk), OrderedDict())[g[0]["setup"]] = g
    order = lambda k: (SPLIT_ORDER.index(k[0]) if k[0] in SPLIT_ORDER else 9,  # noqa: E731
                       WORKLOAD_ORDER.index(k[1]) if k[1] in WORKLOAD_ORDER else 9)
    return OrderedDict(sorted(table.items(), key=lambda kv: order(kv[0])))


def _err(group):
    if not group or any(t.get("measured") is None or t.get("target") is None for t in group):
        return None
    return max(abs(t["measured"] - t["target"]) for t in group)


# ---------------------------------------------------------------- the list
def bullets(doc):
    out = []
    out += overhead(doc.get("overhead") or [])
    out += shares(doc.get("shares") or [])
    out += conserve(doc.get("conserve") or [])
    out += ceilings(doc.get("ceilings") or [])
    out += latency(doc.get("latency") or [])
    out += ["- memory: %s (expected %s, measured %s)" % (r["check"], r.get("expected"), r.get("measured"))
            for r in doc.get("memory") or [] if r.get("ok") is False]
    return out


def overhead(rows):
    out = []
    for r in rows:
        ratio, hami = r.get("ratio"), r.get("hami_ratio")
        if ratio is not None and hami is not None and hami < ratio:
            out.append("- overhead, %s: HAMi-core costs less (%.3f of native against fracgpu's %.3f)" % (
                r["metric"], hami, ratio))
        low = (r.get("ratio_spread") or {}).get("min")
        if ratio is not None and low is not None and low > 1.0:
            out.append("- overhead, %s: fracgpu slower than native in every pair (%.3f, min %.3f)" % (
                r["metric"], ratio, low))
    return out


def shares(rows):
    out = []
    for (split, wk), by in share_scenarios(rows).items():
        fr = by.get("fracgpu")
        ef, eff = _err(fr), (fr[0].get("efficiency") if fr else None)
        if ef is None:
            continue
        said = []
        for peer in ("MPS", "HAMi-core", "native"):
            g = by.get(peer)
            ep = _err(g)
            if ep is not None and ep < ef - SHARE_POINTS:
                said.append("%s is closer to the target (worst tenant %.1f points off, fracgpu %.1f)" % (
                    peer, ep * 100, ef * 100))
            pe = g[0].get("efficiency") if g else None
            if pe is not None and eff is not None and pe > eff + EFFICIENCY:
                said.append("%s loses less capacity (efficiency %.3f, fracgpu %.3f)" % (peer, pe, eff))
        if said:
            out.append("- shares %s %s: %s" % (split, wk, "; ".join(said)))
    return out


def conserve(rows):
    lone = next((r for r in rows if r.get("case") == "lone --compute 30"), None)
    mps = next((r for r in rows if str(r.get("case", "")).startswith("MPS 30")), None)
    if lone and mps and lone.get("of_alone") is not None and mps.get("of_alone") is not None \
            and mps["of_alone"] > lone["of_alone"]:
        return ["- conservation: MPS 30 %% alone keeps %.3f of alone, a lone --compute 30 tenant %.3f" % (
            mps["of_alone"], lone["of_alone"])]
    return []


def ceilings(rows):
    out = []
    frac = {r.get("limit"): r for r in rows if str(r.get("setup", "")).startswith("fracgpu") and r.get("limit")}
    for r in rows:
        if not str(r.get("setup", "")).startswith("HAMi") or not r.get("limit"):
            continue
        f = frac.get(r["limit"])
        if f and f.get("gpu_time") is not None and r.get("gpu_time") is not None and \
                abs(r["gpu_time"] - r["limit"]) < abs(f["gpu_time"] - f["limit"]):
            out.append("- ceiling %.2f: HAMi-core's GPU time %.3f is closer to it than fracgpu's %.3f" % (
                r["limit"], r["gpu_time"], f["gpu_time"]))
    return out


def latency(rows):
    out = []
    for r in rows:
        if r.get("skipped"):
            continue
        mine = {m: r.get(k) for m, k in (("fracgpu", "fracgpu_p99_ms"), ("fracgpu-mps", "fracgpu_mps_p99_ms"))
                if r.get(k) is not None}
        if not mine:
            continue
        best_mode = min(mine, key=mine.get)
        best = mine[best_mode]
        peers = [(n, r.get(k)) for n, k in (("MPS", "mps_p99_ms"), ("native", "native_p99_ms"),
                                            ("HAMi-core", "hami_p99_ms")) if r.get(k) is not None and r[k] < best]
        where = "latency %s%s %s" % (r["batch"], "/" + r["tenant"] if r.get("tenant") else "", r.get("arrival", ""))
        if peers:
            out.append("- %s: p99 %s against %s %.3f ms" % (
                where, ", ".join("%s %.3f" % p for p in sorted(peers, key=lambda p: p[1])), best_mode, best))
        ratio = r.get("batch_ratio" if best_mode == "fracgpu" else "fracgpu_mps_batch_ratio")
        if not peers and ratio is not None and ratio < GOAL["batch_ratio"]:
            out.append("- %s: %s has the lowest p99 (%.3f ms) but its batch keeps only %.3f of native's throughput"
                       % (where, best_mode, best, ratio))
    return out
