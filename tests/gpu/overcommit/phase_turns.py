"""Phase t of the overcommit checks: three `--swap allow` tenants with nothing guaranteed
whose caps sum to twice the GPU, each holding a W GiB working set (three do not fit on the
GPU together, two do), training in turn T1 T2 T3 T1 T2 T3 while the broker moves the idle
ones to host (--swap-idle-after). Plus its native baseline (the third working set fails with
CUDA out of memory) and a reference training without the working set, compared bit for bit.

Why the host budget must hold TWO working sets: with nothing guaranteed only the broker's idle
pass moves memory (broker/core/guarantee_enforcer.cpp), and it moves a tenant only while the
budget has room for all of it, counting what is on host already. Before T1's second turn T1 is
on host and T2, T3 are on the GPU; one of them must go to host before T1 can come back, while
T1's copy still counts: budget >= 2 W. With one working set's budget (e.g. 72 GiB for W = 55)
the turn waits forever (the wait here is bounded and says so). And budget < 3 W keeps the
third resident, or every idle tenant would go and come back each turn.

The orchestration takes `b` (run_security_checks.Batch, or dry_turns.FakeBatch) and only uses
its cli/status/run_tenant/spawn/row/data/left/logs/work; cost: status every 0.25 s."""
import json
import os
import re
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TURN = os.path.join(HERE, "turn_tenant.py")
GIB = 1 << 30
MODES = {"default": "", "expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync"}
SETTLED = re.compile(r"tenant (\S+): idle, (.+?) of its memory on GPU (\d+) is on host now")
MARGIN = 2 * GIB  # room kept free when a turn or a start is let go (contexts, the reference)


def json_lines(path):
    out = []
    try:
        for line in open(path, errors="replace"):
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def wait_line(b, tag, pred, limit, proc=None):
    """The first JSON line of TAG.out for which pred holds, within `limit` seconds (never
    past the budget); None when the process died or time ran out."""
    end = time.time() + max(1.0, min(limit, b.left()))
    path = os.path.join(b.logs, tag + ".out")
    while True:
        for j in json_lines(path):
            if pred(j):
                return j
        if proc is not None and proc.poll() is not None:
            for j in json_lines(path):  # what it printed before it went
                if pred(j):
                    return j
            return None
        if time.time() > end:
            return None
        time.sleep(0.05)


class View:
    """The broker's figures the turns need: per tenant used/swapped (and pinned bytes when the
    status reports them), the GPU's capacity, the idle settlements in the broker's log; and a
    sampler thread keeping the host-memory peak."""

    def __init__(self, b, names):
        self.b, self.names = b, names
        self.peak_swapped = 0
        self.peak_host = 0  # swapped + the swap reserves pinned ahead: all pinned host memory
        self.min_available = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = None

    def devices(self):
        st = self.b.status()
        cap = 0
        for g in st.get("gpus", []):
            cap = cap or g.get("memory_capacity", 0)
        out = {}
        outside = 0  # the competing tenant's (and any other's) memory: not the turns' to use
        for t in st.get("tenants", []):
            if t.get("name") not in self.names and t.get("devices"):
                outside += t["devices"][0].get("memory_used", 0)
            if t.get("name") in self.names and t.get("devices"):
                d = t["devices"][0]
                pinned = d.get("memory_pinned", d.get("pinned"))
                out[t["name"]] = {"used": d.get("memory_used", 0), "swapped": d.get("memory_swapped", 0),
                                  "reserved": t.get("host_reserved", 0),
                                  "pinned": pinned, "procs": len(t.get("processes", []))}
        return (cap - outside if cap > outside else 0) if cap else cap, out

    def settlements(self):
        """{tenant: number of 'idle, ... is on host now' lines} in the current broker log."""
        path = self.b.broker_log()
        counts = {}
        try:
            for m in SETTLED.finditer(open(path, errors="replace").read()):
                counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        except (OSError, TypeError):
            pass
        return counts

    def host_available(self):
        try:
            for line in open("/proc/meminfo"):
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def _sample(self):
        while not self._stop.wait(0.5):
            try:
                _, devs = self.devices()
            except Exception:  # noqa: BLE001 - a sampler never ends the phase
                continue
            self.samples += 1
            self.peak_swapped = max(self.peak_swapped, sum(d["swapped"] for d in devs.values()))
            self.peak_host = max(self.peak_host,
                                 sum(d["swapped"] + d.get("reserved", 0) for d in devs.values()))
            avail = self.host_available()
            if avail is not None:
                self.min_available = avail if self.min_available is None else min(self.min_available, avail)

    def start(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(5)


class Turns:
    def __init__(self, b, cfg):
        self.b, self.cfg = b, cfg
        self.names = ["t1", "t2", "t3"]
        self.modes = dict(zip(self.names, cfg.turn_alloc))
        self.view = View(b, self.names)
        self.procs = {}
        self.pinned = {}        # tenant -> GiB that stayed on the GPU after its idle pass settled
        self.settled_at = {}    # tenant -> settlement count when it last became idle
        self.turns = []
        self.waits = []

    # ------------------------------------------------------------ room on the GPU
    def known_pinned(self, name, devs, settled):
        d = devs.get(name, {})
        if d.get("pinned") is not None:  # the status reports it: believe it
            return d["pinned"] > GIB
        if settled.get(name, 0) > self.settled_at.get(name, 0) and d.get("used", 0) > 4 * GIB:
            self.pinned[name] = d["used"] / GIB
            return True
        return name in self.pinned and d.get("used", 0) > 4 * GIB

    def wait_room(self, who, need_extra, limit, why):
        """Waits until the GPU has room for `who`'s memory that is not resident (need_extra
        bytes), or it is clear it never will (the others that hold the GPU are pinned), or
        `limit` passes. Returns (ok, seconds, figure)."""
        t0 = time.time()
        end = t0 + max(1.0, min(limit, self.b.left() - 10))
        while True:
            cap, devs = self.view.devices()
            others = sum(d["used"] for n, d in devs.items() if n != who)
            mine = devs.get(who, {}).get("used", 0)
            if need_extra <= 0 or (cap and others + mine + need_extra + MARGIN <= cap):
                return True, time.time() - t0, f"{why}: room after {time.time() - t0:.1f} s"
            settled = self.view.settlements()
            holders = [n for n, d in devs.items() if n != who and d["used"] > 4 * GIB]
            stuck = [n for n in holders if self.known_pinned(n, devs, settled)]
            # A holder whose process is gone is freeing its memory: not stuck, keep waiting.
            movable = [n for n in holders if n not in stuck]
            if holders and not movable:
                return False, time.time() - t0, (f"{why}: never fits: {', '.join(stuck)} "
                                                 f"({', '.join(self.modes[n] for n in stuck)}) "
                                                 f"not swappable, {others / GIB:.1f} GiB held by others")
            if time.time() > end:
                return False, time.time() - t0, (f"{why}: no room within {limit:.0f} s "
                                                 f"(others hold {others / GIB:.1f} GiB of {cap / GIB:.1f})")
            time.sleep(0.25)

    # ------------------------------------------------------------ steps
    def native_baseline(self):
        b, w = self.b, self.cfg.turn_gib
        procs, results = [], []
        for i in range(3):
            tag = f"t-native{i + 1}"
            p = b.spawn(tag, [b.py, TURN, "--gib", str(w), "--hold", "120", *b.stub_flag],
                        env=b.env(b.native_env()))
            procs.append(p)
            j = wait_line(b, tag, lambda j: "ready" in j or "oom" in j or "error" in j, 90, p)
            results.append(j or {})
            if not j or "ready" not in j:
                break
        for p in procs:
            b.finish(p, 0)
        third = results[2] if len(results) == 3 else {}
        ok = len(results) == 3 and all("ready" in r for r in results[:2]) and third.get("oom") is True
        b.data["t_native"] = results
        b.row("t", f"native: three {w} GiB working sets one after another, the third fails with CUDA OOM",
              ok, "; ".join(f"N{i + 1}: " + ("ready" if "ready" in r else f"oom after {r.get('held_gib')} GiB"
                                              if r.get("oom") else (r.get("error") or "no answer")[:80])
                            for i, r in enumerate(results)))

    def start_reference(self):
        b = self.b
        self.ref_path = os.path.join(b.work, "t-reference.params")
        return b.spawn("t-reference", [b.py, TURN, "--reference-out", self.ref_path, "--turns",
                                       str(self.cfg.turn_rounds), "--steps", str(self.cfg.turn_steps),
                                       *b.stub_flag], env=b.env(b.native_env()))

    def start_tenants(self):
        b, w = self.b, self.cfg.turn_gib
        for name in self.names:
            b.cli("tenant", "create", name, "--owner", "0", "--memory", f"{self.cfg.turn_cap}GiB",
                  "--memory-request", "0", "--swap", "allow", check=True)
        for name in self.names:
            ok, waited, fig = self.wait_room(name, (w + 1) * GIB, 120, f"start of {name}")
            self.waits.append({"what": f"start {name}", "s": round(waited, 2), "ok": ok, "figure": fig})
            if not ok:
                b.row("t", f"{name} ({self.modes[name]}) started", False, fig)
                continue
            env = {"FRACGPU_LOG_LEVEL": "info", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
            if MODES[self.modes[name]]:
                env["PYTORCH_CUDA_ALLOC_CONF"] = MODES[self.modes[name]]
            env.update(b.tenant_env(name))
            p = b.run_tenant(f"t-{name}", ["--tenant", name],
                             [b.py, TURN, "--gib", str(w), "--turns", str(self.cfg.turn_rounds), "--steps",
                              str(self.cfg.turn_steps), "--go", os.path.join(b.work, f"go-{name}"),
                              "--reference", self.ref_path, "--max-wait", "400", *b.stub_flag],
                             env_extra=env)
            self.procs[name] = p
            j = wait_line(b, f"t-{name}", lambda j: "ready" in j or "error" in j, 150, p)
            ok = bool(j) and "ready" in j
            if ok:
                self.settled_at[name] = self.view.settlements().get(name, 0)
            b.row("t", f"{name} ({self.modes[name]}) built {w} GiB of seeded data", ok,
                  f"after waiting {waited:.1f} s for room; alloc {j.get('alloc_s')} s" if ok else
                  f"{(j or {}).get('error', 'no ready line')}"[:160])
            if not ok:
                b.finish(p, 0)
                self.procs[name] = None

    def one_turn(self, name, k):
        b = self.b
        p = self.procs.get(name)
        if p is None or p.poll() is not None:
            self.turns.append({"tenant": name, "mode": self.modes[name], "turn": k, "done": False,
                               "why": "tenant not running"})
            return
        earlier = [t for t in self.turns if t["tenant"] == name and not t.get("done")]
        if earlier:  # it waits for its earlier turn's go file: this one cannot run either
            self.turns.append({"tenant": name, "mode": self.modes[name], "turn": k, "done": False,
                               "skipped": bool(earlier[0].get("skipped")),
                               "why": f"turn {earlier[0]['turn']} did not run"})
            return
        _, devs = self.view.devices()
        settled = self.view.settlements()
        for n in self.names:  # an idle tenant whose pass settled with its memory on the GPU
            if n != name:
                self.known_pinned(n, devs, settled)
        before = {n: dict(d) for n, d in devs.items()}
        to_bring = before.get(name, {}).get("swapped", 0)
        ok, waited, fig = self.wait_room(name, to_bring, self.cfg.turn_wait, f"{name} turn {k}")
        self.waits.append({"what": f"{name} turn {k}", "s": round(waited, 2), "ok": ok, "figure": fig})
        rec = {"tenant": name, "mode": self.modes[name], "turn": k, "wait_s": round(waited, 2),
               "wait": fig, "bring_back_gib": round(to_bring / GIB, 2)}
        if not ok and "never fits" in fig:
            rec.update(done=False, skipped=True, why=fig)  # expected with pinned tenants: not run
            self.turns.append(rec)
            return
        _, devs = self.view.devices()
        rec["bring_back_gib"] = round(devs.get(name, {}).get("swapped", 0) / GIB, 2)
        start = {n: d["swapped"] for n, d in devs.items()}
        open(os.path.join(b.work, f"go-{name}.{k}"), "w").close()
        j = wait_line(b, f"t-{name}", lambda j: j.get("turn") == k or "error" in j,
                      self.cfg.turn_limit, p)
        _, after = self.view.devices()
        moved_out = sum(max(0, after.get(n, {}).get("swapped", 0) - s) for n, s in start.items() if n != name)
        rec.update(done=bool(j) and j.get("turn") == k, result=j or {},
                   moved_out_gib=round(moved_out / GIB, 2), room_in_time=ok)
        if not rec["done"]:
            rec["why"] = (j or {}).get("error", f"no turn line within {self.cfg.turn_limit} s")
        else:
            self.settled_at[name] = self.view.settlements().get(name, 0)
        self.turns.append(rec)

    def finals(self):
        out = {}
        for name in self.names:
            p = self.procs.get(name)
            mine = [t for t in self.turns if t["tenant"] == name]
            if p is None or not mine or not all(t.get("done") for t in mine):
                continue  # it never reaches its final line: not waited for
            out[name] = wait_line(self.b, f"t-{name}", lambda j: j.get("final") or "error" in j, 60, p) or {}
        return out

    # ------------------------------------------------------------ rows
    def report(self, ref, finals):
        b = self.b
        feasible = [t for t in self.turns if not t.get("skipped")]
        skipped = [t for t in self.turns if t.get("skipped")]
        done = [t for t in feasible if t.get("done")]
        note = f"; {len(skipped)} not run by design: " + "; ".join(
            f"{t['tenant']}#{t['turn']} ({t['why']})" for t in skipped) if skipped else ""
        b.row("t", "every turn completed", bool(feasible) and len(done) == len(feasible),
              f"{len(done)}/{len(feasible)} turns" + note +
              "".join(f"; {t['tenant']}#{t['turn']}: {t.get('why')}" for t in feasible if not t.get("done")))
        b.row("t", "data intact every turn (exact checksums)",
              bool(done) and all(t["result"].get("intact") is True for t in done),
              ", ".join(f"{t['tenant']}#{t['turn']} {t['result'].get('intact')}" for t in done) or "no turn ran")
        b.row("t", "the next turn starts once the idle tenant is on host (wait per turn)",
              all(t.get("room_in_time", True) for t in done),
              ", ".join(f"{t['tenant']}#{t['turn']} {t.get('wait_s', '-')} s" for t in feasible))
        b.row("t", "resume time (first touch) and GiB moved per turn", bool(done),
              ", ".join(f"{t['tenant']}#{t['turn']}: resume {t['result'].get('resume_s')} s for "
                        f"{t['bring_back_gib']} GiB back, {t['moved_out_gib']} GiB of others out, "
                        f"train {t['result'].get('train_s')} s, loss {t['result'].get('loss'):.6g}"
                        for t in done if isinstance(t["result"].get("loss"), (int, float))))
        # Final parameters against the reference (bitwise, else within 1e-6 relative).
        full = [n for n in self.names if all(t.get("done") for t in self.turns if t["tenant"] == n)
                and any(t["tenant"] == n for t in self.turns)]
        figs, ok = [], bool(ref) and bool(full)
        for n in self.names:
            f = finals.get(n, {})
            if n not in full:
                by_design = all(t.get("done") or t.get("skipped") for t in self.turns if t["tenant"] == n)
                ok &= by_design
                figs.append(f"{n}: not all turns ran" + (" (by design: pinned tenants)" if by_design else ""))
                continue
            if f.get("bitwise_equal"):
                figs.append(f"{n}: bitwise equal")
            elif isinstance(f.get("rel_diff"), (int, float)):
                within = f["rel_diff"] <= 1e-6
                ok &= within
                figs.append(f"{n}: NOT bitwise equal, max |diff| / max |ref| = {f['rel_diff']:.2e} "
                            f"({'within' if within else 'over'} 1e-6)")
            else:
                ok = False
                figs.append(f"{n}: {f.get('error', 'no final line')}"[:100])
        b.row("t", "final parameters equal the reference (same seed, steps and turns, native, alone)",
              ok, ("; ".join(figs) if ref else "no reference: " + "; ".join(figs)) +
              (f"; reference {ref.get('seconds')} s" if ref else ""))
        for n, gib in self.pinned.items():
            b.row("t", f"{n} ({self.modes[n]}) memory not swappable", True,
                  f"its idle pass settled with {gib:.1f} GiB still on the GPU (reported, not a failure)")
        v = self.view
        b.row("t", "host memory peak (status: memory_swapped and host_reserved of all tenants)", True,
              f"{v.peak_swapped / GIB:.1f} GiB on host at most, {v.peak_host / GIB:.1f} GiB with the swap "
              f"reserves (budget {self.cfg.turn_host_budget} GiB), "
              f"host MemAvailable at least {(v.min_available or 0) / GIB:.1f} GiB, {v.samples} samples")
        b.data["turns"] = {"turns": self.turns, "waits": self.waits, "finals": finals, "reference": ref,
                           "pinned_gib": self.pinned, "peak_swapped": v.peak_swapped, "peak_host": v.peak_host,
                           "min_available": v.min_available, "modes": self.modes}


def phase_t(b, cfg):
    tu = Turns(b, cfg)
    if cfg.turn_native:
        tu.native_baseline()
    b.ensure_broker(("--swap-idle-after", str(cfg.turn_idle_after),
                     "--swap-host-budget", f"{cfg.turn_host_budget}GiB"))
    tu.view.start()
    # Next to a competing tenant (24 GiB, compute 50, matmuls) for the whole phase: the turns
    # share the GPU's compute and its memory with it.
    compete = getattr(cfg, "turn_competitor", False) and hasattr(b, "competitor")
    comp = b.competitor("t-competitor", 420) if compete else None
    try:
        ref_proc = tu.start_reference()  # small and native: it runs while the tenants start
        tu.start_tenants()
        ref = wait_line(b, "t-reference", lambda j: j.get("reference") or "error" in j, 120, ref_proc) or {}
        b.finish(ref_proc, 5)
        if not ref.get("reference"):
            b.row("t", "reference training (native, no working set)", False,
                  ref.get("error", "no answer within 120 s")[:160])
            ref = {}
        for k in range(1, cfg.turn_rounds + 1):
            for name in tu.names:
                if b.left() < 25:
                    tu.turns.append({"tenant": name, "turn": k, "done": False, "why": "out of budget"})
                    continue
                tu.one_turn(name, k)
        finals = tu.finals()
    finally:
        tu.view.stop()
        if comp is not None:
            b.finish(comp, 1)
    tu.report(ref, finals)
    return tu
