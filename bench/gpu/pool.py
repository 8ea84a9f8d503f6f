"""Warm workers of the benchmark: a workload process started once (its context, buffers, model
and, under fracgpu, its tenant made once) that then measures once per round, so that a phase
pays each framework's start-up (seconds for PyTorch) once per way of sharing instead of once
per measurement. The protocol (fracgpu-bench-client and torch_tenant.py --serve DIR): the
worker touches DIR/ready when warm; round N starts when DIR/go.N appears (written atomically)
and holds that round's options; the result is one JSON line at the round's --out; DIR/quit
(or SIGTERM) ends it. Workers are started in waves (all of a phase's stage at once, so their
start-ups overlap) and released together for a round, like the old per-group barrier. Costs
nothing on the measured paths: files are written between rounds only."""
import json
import os
import time

DRIVER_READY_S, TORCH_READY_S = 45, 150


class Worker:
    def __init__(self, b, spec):
        self.b, self.spec, self.name, self.mode = b, spec, spec["name"], spec.get("mode", "native")
        self.dir = b.path("w", "%s.%d" % (self.name, b.next_seq()))  # never an earlier worker's files
        os.makedirs(self.dir, exist_ok=True)
        self.ready_path = os.path.join(self.dir, "ready")
        self.torch = b.wl.impl(spec["kind"], spec.get("driver", False)) == "torch"
        self.round, self.round_ready = 0, None
        self.tenant = None
        self.error = None
        cmd = b.wl.serve_command(spec["kind"], self.dir, self.ready_path, self.name, extra=spec.get("extra", ()),
                                 driver=spec.get("driver", False), prepare=spec.get("prepare", ()))
        env = b.env_for(dict(spec, tag=self.name), worker=self)
        self.proc = b.spawn("w-" + self.name, cmd, env, max(5.0, b.left() - 5), track=False)
        self.pid = self.proc.pid

    def ready(self):
        return os.path.exists(self.ready_path)

    def kind_measures(self):
        """Whether its rounds are throughput windows (the ones a barrier lines up)."""
        return self.spec["kind"] not in ("latency", "launch", "alloc", "encoder", "llm")

    def alive(self):
        return self.proc.running()

    def why_dead(self):
        r = self.proc.json()
        return self.error or r.get("error") or "worker %s exited (rc %s): %s" % (
            self.name, self.proc.poll(), self.proc.err_tail())

    def go(self, args, barrier=None):
        """Starts the next round with `args` (a list of --option value; a --mode first); returns
        its out path. With `barrier`, the worker warms up, touches self.round_ready and waits."""
        self.round += 1
        out = os.path.join(self.dir, "res.%d.json" % self.round)
        args = [str(a) for a in args] + ["--out", out, "--tag", self.name]
        self.round_ready = None
        if barrier:
            self.round_ready = os.path.join(self.dir, "ready.%d" % self.round)
            args += ["--ready", self.round_ready, "--barrier", barrier]
        line = " ".join(args)
        tmp = os.path.join(self.dir, ".go.tmp")
        with open(tmp, "w") as f:
            f.write(line + "\n")
        os.replace(tmp, os.path.join(self.dir, "go.%d" % self.round))
        return out

    def collect(self, out, limit):
        """The round's result (waits up to `limit` s); {"ok": False, ...} if the worker died or
        the round did not finish in time."""
        end = time.time() + limit
        while time.time() < end:
            if os.path.exists(out):
                try:
                    with open(out) as f:
                        r = json.loads(f.read().strip().splitlines()[-1])
                    break
                except (OSError, ValueError, IndexError):
                    pass
            if not self.alive():
                if os.path.exists(out):
                    continue
                r = {"ok": False, "error": self.why_dead()}
                break
            time.sleep(0.005)
        else:
            r = {"ok": False, "error": "round %d of worker %s did not finish within %.0f s" % (
                self.round, self.name, limit)}
        r["os_pid"] = self.pid
        r["worker"] = self.name
        if not r.get("ok"):
            self.b.say("  %s round %d failed: %s" % (self.name, self.round, str(r.get("error"))[:200]))
        return r

    def stop(self):
        try:
            open(os.path.join(self.dir, "quit"), "w").close()
        except OSError:
            pass
        self.proc.stop(2.0)
        if self.tenant is not None:
            broker, name = self.tenant
            if broker.running():
                broker.delete_tenant(name)
            self.tenant = None


class Pool:
    """The run's warm workers by name; a wave starts the missing ones of a list of specs."""

    def __init__(self, b):
        self.b = b
        self.workers = {}
        self.waves = []  # {"phase", "workers", "torch", "seconds"}: what the start-ups cost

    def start(self, specs):
        """Starts every spec (dict: name, kind, mode, frac flags / pct, extra, driver) not already
        warm, waits until each is ready (or dead), returns the workers in order."""
        t0 = time.time()
        fresh = []
        for s in specs:
            w = self.workers.get(s["name"])
            if w is None or not w.alive():
                try:
                    w = Worker(self.b, s)
                except Exception as e:  # noqa: BLE001 - a worker that cannot start is reported per round
                    w = _Broken(s, "%s: %s" % (type(e).__name__, e))
                self.workers[s["name"]] = w
                fresh.append(w)
        limit = TORCH_READY_S if any(getattr(w, "torch", False) for w in fresh) else DRIVER_READY_S
        if self.b.sim:
            limit = 30
        end = time.time() + min(limit, max(5.0, self.b.left() - 10))
        while time.time() < end and not all(w.ready() or not w.alive() for w in fresh):
            time.sleep(0.02)
        for w in fresh:
            if not w.ready() and w.alive():
                w.error = "worker %s not ready after %.0f s: %s" % (w.name, time.time() - t0, w.proc.err_tail())
                w.stop()
        if fresh:
            secs = time.time() - t0
            self.waves.append({"phase": self.b.current_phase, "workers": len(fresh),
                               "torch": sum(1 for w in fresh if getattr(w, "torch", False)), "seconds": round(secs, 2)})
            self.b.say("  %d warm workers started in %.1f s (%d PyTorch)" % (len(fresh), secs, self.waves[-1]["torch"]))
        return [self.workers[s["name"]] for s in specs]

    def round(self, items, during=None, witness=False, limit=None, barrier=True):
        """Releases every (worker, args) together; during(stop_path) runs while they measure
        (a worker given "--stop-file STOP" runs until it is touched); returns the results in
        order. A worker that is not alive yields {"ok": False} at once. barrier: throughput
        workers warm up first (the round's --warmup-ms, and a kind's first use) and all start
        measuring when the last is warm, so that the common window is the whole window."""
        b = self.b
        seq = b.next_seq()
        stop, gate = b.path("stop.%d" % seq), b.path("gate.%d" % seq)
        wit = None
        b.last_witness = None
        outs = []
        try:
            for w, args in items:
                args = [stop if a == "STOP" else a for a in args]
                outs.append(w.go(args, gate if barrier and w.kind_measures() else None) if w.alive() else None)
            if barrier:
                self.wait_warm([w for (w, _), o in zip(items, outs) if o])
            wit = b.pf.witness() if witness else None
            b.last_witness = wit
            open(gate, "w").close()
            if during is not None:
                during(stop)
                open(stop, "w").close()  # the workers given "--stop-file STOP" stop measuring
            res = []
            for (w, args), out in zip(items, outs):
                secs = _seconds(args)
                lim = limit or (secs + (20 if w.torch else 10))
                res.append(w.collect(out, lim) if out else {"ok": False, "error": w.why_dead(), "worker": w.name})
        finally:
            open(stop, "w").close()
            if wit is not None:
                wit.stop()
        return res

    def wait_warm(self, workers):
        """Until every worker's round is warm (its ready file) or it died; 60 s at most."""
        end = time.time() + (20 if self.b.sim else 60)
        pending = [w for w in workers if w.round_ready]
        while pending and time.time() < end:
            pending = [w for w in pending if not os.path.exists(w.round_ready) and w.alive()]
            if pending:
                time.sleep(0.002)

    def retire(self, keep=lambda w: False):
        """Stops every worker for which keep(worker) is false (their tenants deleted)."""
        for name in list(self.workers):
            w = self.workers[name]
            if not keep(w):
                w.stop()
                del self.workers[name]


class _Broken:
    """A worker whose start failed (its tenant could not be made, say): every round reports it."""

    def __init__(self, spec, error):
        self.spec, self.name, self.mode, self.error = spec, spec["name"], spec.get("mode"), error
        self.torch, self.pid, self.round, self.round_ready = False, None, 0, None

    def ready(self):
        return False

    def kind_measures(self):
        return False

    def alive(self):
        return False

    def why_dead(self):
        return self.error

    def stop(self):
        pass


def _seconds(args):
    for a, v in zip(args, list(args)[1:]):
        if a == "--seconds":
            return float(v)
    return 10.0
