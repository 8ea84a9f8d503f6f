"""Latency isolation: a latency-sensitive tenant (one short kernel + sync per request) next to
each batch kind, natively, under MPS, under fracgpu (the latency tenant --priority high, the
batch normal) and under HAMi-core where given; regular arrivals (a think time after each
reply) and Poisson arrivals (open loop: latency counted from the arrival, queueing included).
The batch keeps running through both arrival patterns; its throughput over each latency
window, against native sharing's over the same pattern, is the price it pays."""
import analysis

# batch kind: (workload kinds of its processes, nominal kernel ms)
BATCHES = [
    ("k0.05", ["k0.05"], 0.05), ("k0.2", ["k0.2"], 0.2), ("k1.5", ["k1.5"], 1.5),
    ("copy", ["memory"], None), ("train", ["train"], None), ("graph", ["graph"], 0.2),
    ("multi", ["k0.2", "k0.2", "k0.2"], 0.2),
]
ARRIVALS = ("regular", "poisson")
REQUEST_US = 100
# Regular: a think time after each reply (closed loop). Poisson: open loop at 250 requests/s, low
# enough that native time slicing (a reply can wait a whole time slice) keeps up.
THINK_US = {"regular": 1000, "poisson": 4000}
MODE_NAMES = {"native": "native", "mps": "mps", "frac": "fracgpu", "hami": "hami"}


# --quick on a real GPU: these five (driver-API processes only: no framework start-up).
QUICK_BATCHES = ("k0.05", "k1.5", "copy", "graph", "multi")


def requests(b, arrival):
    n = 120 if b.sim and b.quick else 600 if b.quick else 1500
    return n if arrival == "regular" else int(n * 0.4)


def latency_cmd(b, arrival, out, tag):
    return b.wl.driver("latency", "--kernel-us", REQUEST_US, "--think-us", THINK_US[arrival], "--arrival", arrival,
                       "--requests", requests(b, arrival), "--seconds", 30, "--warmup-ms", 200, "--out", out, "--tag", tag)


def run_latency_pair(b, mode, label):
    """during(): the latency tenant, regular then Poisson, while the batch runs."""
    got = {}

    def during(procs, stop):
        for arrival in ARRIVALS:
            tag = "lat-%s-%s-%s" % (label, mode, arrival[:3])
            spec = {"mode": mode, "tag": tag, "frac": ["--priority", "high"]}
            p = b.spawn(tag, latency_cmd(b, arrival, b.path(tag + ".json"), tag), b.env_for(spec), 30)
            (r,) = b.finish([p])
            got[arrival] = r
        open(stop, "w").close()
    return got, during


def cdf_points(lat_us, n=400):
    """n quantiles of the latencies (ms), for the CDF plots."""
    s = sorted(x / 1000.0 for x in lat_us)
    if not s:
        return []
    return [s[min(len(s) - 1, int(i * (len(s) - 1) / (n - 1)))] for i in range(n)]


def latency(b):
    alone, during = run_latency_pair(b, "native", "alone")
    b.group([], 1, during=during)
    for name, kinds, kernel_ms in BATCHES:
        if b.quick and not b.sim and name not in QUICK_BATCHES:
            b.rec.add("latency", batch=name, skipped="not in --quick")
            continue
        if b.left() < 40:
            b.rec.add("latency", batch=name, skipped="time budget")
            continue
        per_mode = {}
        for mode in b.modes():
            got, during = run_latency_pair(b, mode, name)
            # Copies are the same through the driver API as through PyTorch: no framework start-up.
            specs = [{"tag": "batch-%s-%s-%d" % (name, mode, i), "kind": k, "mode": mode, "stop": True,
                      "seconds": 90, "driver": k == "memory"} for i, k in enumerate(kinds)]
            batch = b.group(specs, 90, during=during)
            per_mode[mode] = (got, batch)
        for arrival in ARRIVALS:
            row_for(b, name, kinds, kernel_ms, arrival, alone.get(arrival, {}), per_mode)


def batch_rate(batch, lat):
    if not lat.get("ok") or not all(r.get("ok") for r in batch):
        return None
    rates = [analysis.rate(r, lat["t_start"], min(lat["t_end"], r["t_end"])) for r in batch]
    return sum(rates) if all(x is not None for x in rates) else None


def row_for(b, name, kinds, kernel_ms, arrival, alone, per_mode):
    row = {"batch": name, "arrival": arrival, "batch_kernel_ms": kernel_ms, "batch_processes": len(kinds),
           "batch_impl": b.wl.impl(kinds[0], kinds[0] == "memory"), "request_kernel_ms": REQUEST_US / 1000.0,
           "alone_p50_ms": alone.get("p50_ms"), "alone_p99_ms": alone.get("p99_ms"),
           "alone_p999_ms": alone.get("p999_ms")}
    rates = {}
    curves = {"alone": cdf_points(alone.get("lat_us", []))}
    for mode in ("native", "mps", "frac", "hami"):
        key = MODE_NAMES[mode]
        if mode not in per_mode:
            row.update({key + "_p50_ms": None, key + "_p99_ms": None, key + "_p999_ms": None})
            continue
        got, batch = per_mode[mode]
        lat = got.get(arrival, {})
        ok = lat.get("ok")
        row[key + "_p50_ms"] = lat.get("p50_ms") if ok else None
        row[key + "_p99_ms"] = lat.get("p99_ms") if ok else None
        row[key + "_p999_ms"] = lat.get("p999_ms") if ok else None
        row[key + "_requests"] = lat.get("requests")
        if not ok:
            row[key + "_error"] = lat.get("error")
        rates[mode] = batch_rate(batch, lat)
        row[key + "_batch_rate"] = rates[mode]
        curves[key] = cdf_points(lat.get("lat_us", []))
    nat = rates.get("native")
    for mode in ("frac", "mps", "hami"):
        v = rates.get(mode)
        ratio = v / nat if v is not None and nat else None
        row["batch_ratio" if mode == "frac" else MODE_NAMES[mode] + "_batch_ratio"] = ratio
    b.rec.add("latency", **row)
    b.series["latency"].setdefault(name, {})[arrival] = curves
    b.say("  %s %s: p99 native %s / mps %s / fracgpu %s ms (alone %s), batch ratio %s" % (
        name, arrival, _f(row.get("native_p99_ms")), _f(row.get("mps_p99_ms")), _f(row.get("fracgpu_p99_ms")),
        _f(row.get("alone_p99_ms")), _f(row.get("batch_ratio"))))


def _f(v):
    return "-" if v is None else "%.3f" % v


PHASES = {"latency": (latency, 200, 90)}
