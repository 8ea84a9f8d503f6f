#!/usr/bin/env python3
"""Dry run of phase t's orchestration (phase_turns.py) without a GPU, a broker or torch: the
tenants are turn_tenant.py --stub processes, and a simulator thread plays the broker's books
and its idle pass the way broker/core/guarantee_enforcer.cpp decides (a tenant idle for
--idle s goes to host only when the host budget holds all of it, counting what is on host
and what open demands will move; a swap-in waits for room on the GPU), with made-up copy
speeds. Pinned modes (expandable, async) never move. Checks the waits, skips, rows and the
reference comparison before GPU time is spent; not a test of fracgpu itself.

    python3 tests/gpu/overcommit/dry_turns.py [--gib 48] [--budget-gib 100] [--alloc default,default,default]

Prints the rows; exit status 0 when every row passed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import phase_turns  # noqa: E402

GIB = 1 << 30


class Sim:
    def __init__(self, simdir, log, cap_gib, budget_gib, idle_s, out_gbs, in_gbs):
        self.dir, self.log = simdir, log
        self.cap, self.budget, self.idle = cap_gib * GIB, budget_gib * GIB, idle_s
        self.out_rate, self.in_rate = out_gbs * GIB, in_gbs * GIB
        self.t = {}          # name -> {used, swapped, state, since, demand, done, mode, total}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def status(self):
        with self.lock:
            return {"gpus": [{"memory_capacity": self.cap}],
                    "tenants": [{"name": n, "devices": [{"memory_used": int(v["used"]),
                                                         "memory_swapped": int(v["swapped"])}],
                                 "processes": [1]} for n, v in self.t.items()]}

    def read_states(self):
        for f in os.listdir(self.dir):
            if not f.endswith(".state"):
                continue
            name = f[:-6]
            try:
                st = json.load(open(os.path.join(self.dir, f)))
            except (OSError, ValueError):
                continue
            v = self.t.setdefault(name, {"used": 0.0, "swapped": 0.0, "state": "", "since": 0,
                                         "demand": False, "done": False, "total": 0})
            v["mode"] = st["mode"]
            if v["total"] == 0:
                v["total"] = (st["gib"] + 0.5) * GIB
                v["used"] = v["total"]
            if st["state"] != v["state"]:
                v["state"], v["since"] = st["state"], time.time()
                if st["state"] == "active":
                    if v["demand"] and v["swapped"] > 0:
                        self.shim(name, f"moved {v['swapped'] / (1 << 20):.1f} MiB of tenant '{name}' to host "
                                  f"memory at the broker's request in 2.000 s (25.0 GB/s)")
                    v["demand"], v["done"] = False, False
                if st["state"] == "exit":
                    v["used"] = v["swapped"] = 0

    def tick(self, dt):
        with self.lock:
            self.read_states()
            on_host = sum(v["swapped"] + (v["used"] - 0.5 * GIB if v["demand"] else 0) for v in self.t.values())
            left = self.budget - on_host
            resident = sum(v["used"] for v in self.t.values())
            for name, v in self.t.items():
                flag = os.path.join(self.dir, name + ".resident")
                if v["state"] == "active":
                    if v["swapped"] > 0:  # the shim brings it back as room allows (1 GiB pieces)
                        room = self.cap - resident
                        step = min(v["swapped"], self.in_rate * dt, max(0.0, room))
                        v["swapped"] -= step
                        v["used"] += step
                        resident += step
                        if v["swapped"] <= 0:
                            self.shim(name, f"brought {v['total'] / (1 << 20) - 512:.1f} MiB back from "
                                      f"host memory in 1.000 s (50.0 GB/s)")
                    if v["swapped"] <= 0 and not os.path.exists(flag):
                        open(flag, "w").close()
                    continue
                if os.path.exists(flag) and v["swapped"] > 0:
                    os.remove(flag)
                if v["state"] != "idle" or v["done"]:
                    continue
                if not v["demand"]:
                    if time.time() - v["since"] < self.idle or v["used"] > left:
                        continue
                    v["demand"], left = True, left - v["used"]
                    v["t0"] = time.time()
                if v["mode"] != "default":  # not swappable: settles after its deadline
                    if time.time() - v["t0"] > 1.0:
                        v["demand"], v["done"] = False, True
                        self.broker(f"tenant {name}: idle, 0 B of its memory on GPU 0 is on host now")
                    continue
                step = min(v["used"] - 0.5 * GIB, self.out_rate * dt)
                v["used"] -= step
                v["swapped"] += step
                if v["used"] <= 0.5 * GIB + 1:
                    v["demand"], v["done"] = False, True
                    os.path.exists(flag) and os.remove(flag)
                    self.shim(name, f"moved {v['swapped'] / (1 << 20):.1f} MiB of tenant '{name}' to host "
                              f"memory at the broker's request in 2.000 s (25.0 GB/s)")
                    self.broker(f"tenant {name}: idle, {v['swapped'] / GIB:.1f} GiB of its memory on GPU 0 "
                                "is on host now")
            for name, v in self.t.items():  # resident at start: the flag is there
                if v["swapped"] == 0 and v["state"] in ("idle", "alloc") and not v["demand"]:
                    open(os.path.join(self.dir, name + ".resident"), "w").close()

    def shim(self, name, text):
        with open(os.path.join(self.logdir, f"t-{name}.sim.err"), "a") as f:
            f.write(f"fracgpu[1] info: {text}\n")

    def broker(self, text):
        with open(self.log, "a") as f:
            f.write(f"[info] {text}\n")

    def run(self):
        last = time.time()
        while not self.stop.wait(0.05):
            now = time.time()
            self.tick(now - last)
            last = now


class Proc:
    def __init__(self, tag, cmd, env, logs):
        self.out = open(os.path.join(logs, tag + ".out"), "w")
        self.err = open(os.path.join(logs, tag + ".err"), "w")
        self.p = subprocess.Popen(cmd, env=env, stdout=self.out, stderr=self.err, start_new_session=True)
        self.pid = self.p.pid

    def poll(self):
        return self.p.poll()


class FakeBatch:
    def __init__(self, a, cfg):
        self.work = tempfile.mkdtemp(prefix="fgturns-dry.")
        self.logs = os.path.join(self.work, "logs")
        self.simdir = os.path.join(self.work, "sim")
        self.native = os.path.join(self.work, "native")
        for d in (self.logs, self.simdir, self.native):
            os.makedirs(d)
        self.sim = Sim(self.simdir, os.path.join(self.logs, "broker1.log"), 139.8, cfg.turn_host_budget,
                       cfg.turn_idle_after, a.out_gbs, a.in_gbs)
        self.sim.logdir = self.logs
        self.deadline = time.time() + a.budget
        self.rows, self.data, self.procs = [], {}, []
        self.py, self.stub_flag = sys.executable, ["--stub"]
        self.t0 = time.time()

    def say(self, text):
        print(f"[dry {time.time() - self.t0:5.1f}s] {text}", file=sys.stderr, flush=True)

    def left(self):
        return self.deadline - time.time()

    def env(self, extra=None):
        e = dict(os.environ, PYTHONUNBUFFERED="1", FAKE_TRAIN_S="0.2")
        e.update(extra or {})
        return e

    def native_env(self):
        return {"FAKE_NATIVE_DIR": self.native, "FAKE_CAPACITY_GIB": "139.8"}

    def tenant_env(self, name):
        return {"FAKE_SIM_DIR": self.simdir, "FAKE_TENANT": name}

    def spawn(self, tag, cmd, env=None):
        p = Proc(tag, cmd, env or self.env(), self.logs)
        self.procs.append(p)
        return p

    def run_tenant(self, tag, flags, cmd, env_extra=None):
        return self.spawn(tag, cmd, self.env(env_extra))

    def finish(self, p, limit):
        try:
            p.p.wait(limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.p.wait()
        if p.p.returncode is not None and "native" in str(p.out.name):
            for f in os.listdir(self.native):  # a killed holder's memory is free again
                if not os.path.exists(f"/proc/{f}"):
                    os.remove(os.path.join(self.native, f))
        return p.p.returncode

    def cli(self, *args, check=False, timeout=20):
        return subprocess.CompletedProcess(args, 0, "", "")

    def status(self):
        return self.sim.status()

    def ensure_broker(self, flags):
        self.say(f"broker flags {' '.join(flags)}")
        threading.Thread(target=self.sim.run, daemon=True).start()

    def broker_log(self):
        return self.sim.log

    def row(self, phase, check, ok, figure):
        self.rows.append((phase, check, "pass" if ok else "FAIL", figure))
        self.say(f"{phase} {check}: {'pass' if ok else 'FAIL'} ({figure})")

    def stop_all(self):
        self.sim.stop.set()
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
            p.p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=int, default=48)
    ap.add_argument("--budget-gib", type=int, default=100)
    ap.add_argument("--alloc", default="default,default,default")
    ap.add_argument("--budget", type=float, default=170)
    ap.add_argument("--out-gbs", type=float, default=24.0, help="simulated swap-out GiB/s")
    ap.add_argument("--in-gbs", type=float, default=100.0)
    ap.add_argument("--turn-wait", type=float, default=15)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    cfg = argparse.Namespace(turn_gib=a.gib, turn_cap=93, turn_host_budget=a.budget_gib, turn_idle_after=0.5,
                             turn_steps=50, turn_rounds=2, turn_alloc=a.alloc.split(","),
                             turn_wait=a.turn_wait, turn_limit=20, turn_native=True)
    b = FakeBatch(a, cfg)
    try:
        phase_turns.phase_t(b, cfg)
        import swap_log
        swap_log.rows(b, "t", ["t-t"], expect_moves=True)
    finally:
        b.stop_all()
    for r in b.rows:
        print(" | ".join(r))
    if not a.keep:
        shutil.rmtree(b.work, ignore_errors=True)
    else:
        print("work:", b.work)
    # The swap-bandwidth rows judge made-up speeds: only the orchestration's rows count here.
    return 0 if all(r[2] == "pass" for r in b.rows if "vs link" not in r[1]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
