#!/usr/bin/env python3
"""Summary of run_multi_gpu_checks.sh: reads the JSON results in one directory and prints
a markdown table, one row per criterion of the multi-GPU issue with the measured figure
and PASS/FAIL, then writes the same rows to summary.json. Exit 0 when every criterion
that ran passed.
   multi_report.py DIR [--secs S] [--only "m1 m3 ..."]
"""
import argparse
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compute"))
from compute_report import common  # noqa: E402  (throughput over a shared window)

GIB = 1 << 30


def load(d, name):
    try:
        with open(os.path.join(d, name)) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


def gib(v):
    return "-" if v is None else "%.2f" % (v / GIB)


def measured(status):
    """'tenant@gpu share' for every tenant device in a `fracgpu status --json` answer."""
    out = []
    for t in status.get("tenants", []):
        for d in t.get("devices", []):
            if "compute_measured_share" in d:
                out.append("%s@%s %.3f" % (t.get("name"), str(d.get("index", d.get("gpu", "?"))),
                                           d["compute_measured_share"]))
    return ", ".join(out) or "-"


class Report:
    def __init__(self, d, only):
        self.d, self.only, self.rows, self.notes = d, only.split(), [], []

    def crit(self, phase, name, expected, measured, passed):
        if self.only and phase not in self.only:
            return
        self.rows.append({"phase": phase, "criterion": name, "expected": expected, "measured": measured,
                          "result": "PASS" if passed else "FAIL"})

    # ------------------------------------------------------------ m1: caps
    def caps(self):
        r = load(self.d, "m1.caps.json")
        devs = (r or {}).get("devices", [])
        for want_i, want in ((0, 24 * GIB), (1, 12 * GIB)):
            row = next((x for x in devs if x["index"] == want_i), None)
            got = "-" if row is None else "torch %s / NVML %s / filled %s GiB, oversize %s" % (
                gib(row["total"]), gib(row["nvml_total"]), gib(row["filled"]),
                "refused" if row["oversize_refused"] else "ALLOWED")
            self.crit("m1", "GPU %d cap seen by PyTorch and NVML, enforced" % want_i, "%s GiB" % gib(want), got,
                      bool(row and row.get("ok")))
        for tag, what in (("cvd_index", "CUDA_VISIBLE_DEVICES=1"), ("cvd_uuid", "CUDA_VISIBLE_DEVICES=<GPU 1 UUID>")):
            r = load(self.d, "m1.%s.json" % tag)
            devs = (r or {}).get("devices", [])
            got = ", ".join("device %d: %s GiB" % (x["index"], gib(x["total"])) for x in devs) or "-"
            self.crit("m1", "%s: one device, GPU 1's cap" % what, "device 0: 12.00 GiB", got,
                      bool(r and r.get("ok") and len(devs) == 1))
        smi = self.smi("m1.nvidia_smi.txt")
        self.crit("m1", "nvidia-smi inside the tenant, memory.total per GPU", "24576 / 12288 MiB",
                  " / ".join(smi) or "-", smi == ["24576", "12288"])

    def smi(self, name):
        try:
            with open(os.path.join(self.d, name)) as f:
                return [line.split(",")[2].strip() for line in f if line.count(",") >= 3]
        except OSError:
            return []

    # ------------------------------------------------------------ m2: peer to peer
    def peer(self):
        n, f = load(self.d, "m2.native.json"), load(self.d, "m2.frac.json")
        ok = bool(n and f and n.get("ok") and f.get("ok"))
        same_driver = ok and n["driver"] == f["driver"]
        self.crit("m2", "cuDeviceCanAccessPeer + 4 P2P attributes, both directions", "identical to native",
                  json.dumps((f or {}).get("driver", {}).get("pairs", "-"))[:160], same_driver)
        same_torch = ok and n["torch"]["can_access"] == f["torch"]["can_access"]
        self.crit("m2", "torch.cuda.can_device_access_peer", "identical to native",
                  json.dumps((f or {}).get("torch", {}).get("can_access", "-")), same_torch)
        if ok:
            ratios = {k: f["torch"]["copy_gbs"][k] / v for k, v in n["torch"]["copy_gbs"].items() if v}
            got = ", ".join("%s %.1f vs %.1f GB/s (%.3f)" % (k, f["torch"]["copy_gbs"][k], n["torch"]["copy_gbs"][k],
                                                             ratios[k]) for k in sorted(ratios))
            self.crit("m2", "1 GiB peer copy, fracgpu / native", ">= 0.95", got,
                      bool(ratios) and min(ratios.values()) >= 0.95)
        else:
            self.crit("m2", "1 GiB peer copy, fracgpu / native", ">= 0.95", "-", False)

    # ------------------------------------------------------------ m3: NCCL
    def nccl(self):
        runs = {m: [load(self.d, os.path.basename(p)) for p in sorted(glob.glob(os.path.join(self.d, "m3.%s.*.json" % m)))]
                for m in ("native", "frac")}
        good = {m: [r for r in v if r and r.get("sum_ok")] for m, v in runs.items()}
        total = sum(len(v) for v in runs.values())
        self.crit("m3", "all-reduce sums right (every rank, size and run)", "all runs",
                  "%d / %d runs" % (sum(len(v) for v in good.values()), total),
                  total > 0 and all(len(good[m]) == len(runs[m]) > 0 for m in runs))
        sizes = sorted({k for r in good["native"] + good["frac"] for k in r["busbw_gbs"]}, key=int)
        for size in sizes:
            med = {m: statistics.median([r["busbw_gbs"][size] for r in good[m]]) if good[m] else None for m in good}
            ratio = med["frac"] / med["native"] if med["frac"] and med["native"] else None
            self.crit("m3", "bus bandwidth %s MiB, fracgpu / native (medians of %d / %d)" % (
                size, len(good["frac"]), len(good["native"])), "1.00 +- 0.02",
                "-" if ratio is None else "%.3f (%.1f vs %.1f GB/s)" % (ratio, med["frac"], med["native"]),
                ratio is not None and abs(ratio - 1) <= 0.02)
        seen = sorted({(x["rank"], x["total"]) for r in good["frac"] for x in r["ranks"]})
        self.crit("m3", "each rank sees its GPU's cap under fracgpu", "rank 0: 40.00, rank 1: 30.00 GiB",
                  ", ".join("rank %d: %s" % (k, gib(t)) for k, t in seen) or "-",
                  seen == [(0, 40 * GIB), (1, 30 * GIB)])

    # ------------------------------------------------------------ m4: shares
    def gpu(self, phase, tags, g):
        res = [load(self.d, "%s.%s.g%d.json" % (phase, t, g)) for t in tags]
        return common(res)[0]

    def shares(self):
        alone = [self.gpu("m4a", ["solo"], g)[0] for g in (0, 1)]
        self.notes.append("alone TFLOP/s: GPU 0 %s, GPU 1 %s" % tuple("%.0f" % a if a else "-" for a in alone))
        for phase, label, targets in (("m4b", "native time slicing", None),
                                      ("m4c", "fracgpu A 70/20, B 30/80", (70, 20))):
            for g in (0, 1):
                a, b = self.gpu(phase, ["a", "b"], g)
                share = 100 * a / (a + b) if a and b else None
                eff = (a + b) / alone[g] if a and b and alone[g] else None
                want = "50 / 50 (no control)" if targets is None else "%d / %d, +-3 points" % (targets[g], 100 - targets[g])
                got = "-" if share is None else "%.1f / %.1f" % (share, 100 - share)
                passed = share is not None and (targets is None or abs(share - targets[g]) <= 3)
                self.crit(phase, "GPU %d shares A / B, %s" % (g, label), want, got, passed)
                self.crit(phase, "GPU %d sum / alone, %s" % (g, label), ">= 0.95" if targets else "(reference)",
                          "-" if eff is None else "%.3f" % eff, eff is not None and (targets is None or eff >= 0.95))
        a0 = self.gpu("m4d", ["a"], 0)[0]
        self.crit("m4d", "GPU 0: A alone there (B only on GPU 1) / alone", ">= 0.95",
                  "-" if not (a0 and alone[0]) else "%.3f" % (a0 / alone[0]), bool(a0 and alone[0] and a0 / alone[0] >= 0.95))
        a, b = self.gpu("m4d", ["a", "b"], 1)
        share = 100 * a / (a + b) if a and b else None
        self.crit("m4d", "GPU 1 shares A / B (50 / 50)", "50 / 50, +-3 points",
                  "-" if share is None else "%.1f / %.1f" % (share, 100 - share), share is not None and abs(share - 50) <= 3)

        a, b = self.gpu("m4e", ["a", "b"], 0)
        share = 100 * a / (a + b) if a and b else None
        self.crit("m4e", "GPU 0 only: A 20 / B 80 (control of m4c's GPU 1)", "20 / 80, +-3 points",
                  "-" if share is None else "%.1f / %.1f" % (share, 100 - share), share is not None and abs(share - 20) <= 3)
        for phase in ("m4c", "m4d", "m4e"):
            st = load(self.d, "%s.status.json" % phase)
            if st:
                self.notes.append("%s broker measured shares: %s" % (phase, measured(st)))

    def markdown(self):
        out = ["| phase | criterion | expected | measured | result |", "| --- | --- | --- | --- | --- |"]
        out += ["| %(phase)s | %(criterion)s | %(expected)s | %(measured)s | **%(result)s** |" % r for r in self.rows]
        out += ["- note: %s" % n for n in self.notes]
        passed = sum(r["result"] == "PASS" for r in self.rows)
        out.append("\nRESULT: %s (%d/%d criteria passed)" % ("PASS" if passed == len(self.rows) else "FAIL", passed,
                                                            len(self.rows)))
        return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--secs", type=float, default=10.0)
    p.add_argument("--only", default="")
    args = p.parse_args(argv)
    rep = Report(args.dir, args.only)
    for step in (rep.caps, rep.peer, rep.nccl, rep.shares):
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - a broken result is a FAIL row, not a crash
            rep.rows.append({"phase": step.__name__, "criterion": "report", "expected": "-",
                             "measured": "%s: %s" % (type(exc).__name__, exc), "result": "FAIL"})
    print(rep.markdown())
    with open(os.path.join(args.dir, "summary.json"), "w") as f:
        json.dump({"rows": rep.rows, "notes": rep.notes}, f, indent=1)
    return 0 if rep.rows and all(r["result"] == "PASS" for r in rep.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
