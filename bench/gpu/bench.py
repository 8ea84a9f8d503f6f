#!/usr/bin/env python3
"""fracgpu benchmark suite (bench/gpu/run.sh): fracgpu side by side with native time slicing,
NVIDIA MPS, fracgpu over MPS (its broker's --mps, where the broker has it) and (given its
libvgpu.so) HAMi-core, on any NVIDIA GPU or on fracgpu's simulated GPU, in one run within a
time budget. See bench/gpu/README.md for what each phase measures.

    bench/gpu/run.sh [--quick] [--only "overhead shares ..."] [--hami PATH] [--build DIR]
        [--out DIR] [--budget S] [--client PATH] [--gpu real|sim|auto] [--backend auto|driver]

This file is the harness: the budget (budget.py), progress lines, warm workers (pool.py),
tenant groups started together behind a barrier, the ways of sharing (the MPS daemon and the
fracgpu-mps broker, never both at once) and the phase loop (a phase that fails is recorded
and the run goes on). The phases are in phases_throughput.py, phases_shares.py,
phases_latency.py and phases_system.py; the outputs come from report.py and plots.py.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, HERE)

from budget import Budget  # noqa: E402
from gpubench import NodeBroker, Platform, Proc, Records, run  # noqa: E402
from gpubench.procs import child_env  # noqa: E402
from pool import Pool  # noqa: E402
from workloads import Workloads  # noqa: E402
import modes as sharing  # noqa: E402

# Latency and faults first: what a shorter budget must not lose; overhead is last.
PHASE_ORDER = ["latency", "faults", "shares", "conserve", "ceilings", "memory", "overhead"]


class Bench(sharing.Sharing):
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.t0 = time.time()
        self.budget = Budget(args.budget, args.quick, self.t0, args.phases)
        self.deadline = self.budget.deadline
        self.out = os.path.abspath(args.out)
        os.makedirs(self.out, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="fgb.", dir="/tmp")  # short: sockets live under it
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs)
        self.pf = Platform(args.build, self.work, kind=args.gpu)
        self.sim = self.pf.sim
        self.client = self.find_client()
        self.torch_version = None if self.sim or args.backend == "driver" else self.probe_torch()
        self.torch_ok = self.torch_version is not None
        self.wl = Workloads(self.client, self.sim, self.torch_ok, args.backend, python=args.python)
        self.broker = NodeBroker(self.pf.fracgpu, os.path.join(self.work, "r"), os.path.join(self.work, "s"),
                                 self.logs, env=self.pf.broker_env(), deps=self.pf.deps,
                                 flags=self.pf.broker_flags() + self.metrics_flags())
        self.recorder = self.start_recorder()
        self.hami = os.path.abspath(args.hami) if args.hami else None
        self.rec = Records()
        self.series = {"shares": {}, "latency": {}, "overhead": {}}
        self.live = []
        self.tenants = []
        self.alone = {}
        self.seq = 0
        self.last_witness = None
        self.current_phase = None
        self.plan = None  # the running phase's RoundPlan, where it has one
        self.mps30_alone = None  # MPS 30 % alone / native alone, measured by the shares phase
        self.pool = Pool(self)
        self.init_sharing()
        # Nominal window of the share phases; the simulated GPU in CI gets short ones.
        self.win = args.window or (1.5 if self.quick else 2.0)
        self.mem_cap = "2GiB" if self.sim else "24GiB"

    # ------------------------------------------------------------ metrics recording
    def metrics_flags(self):
        port = self.args.metrics_port
        return ["--metrics-listen", "127.0.0.1:%d" % port] if port else []

    def start_recorder(self):
        """--metrics-port: every broker of the run serves /metrics there and
        tools/metrics_recorder.py keeps one scrape a second in logs/metrics.jsonl of the archive."""
        if not self.args.metrics_port:
            return None
        return subprocess.Popen(
            [sys.executable, os.path.join(REPO, "tools", "metrics_recorder.py"), "record", "--url",
             "http://127.0.0.1:%d/metrics" % self.args.metrics_port, "--out",
             os.path.join(self.logs, "metrics.jsonl"), "--interval", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def stop_recorder(self):
        if self.recorder is not None and self.recorder.poll() is None:
            self.recorder.terminate()
            try:
                self.recorder.wait(10)
            except subprocess.TimeoutExpired:
                self.recorder.kill()

    # ------------------------------------------------------------ basics
    def say(self, text):
        print("[bench %4ds/%ds] %s" % (time.time() - self.t0, self.args.budget, text), file=sys.stderr, flush=True)

    def left(self):
        return self.deadline - time.time()

    def next_seq(self):
        self.seq += 1
        return self.seq

    def find_client(self):
        for p in (self.args.client, os.path.join(self.pf.build, "bin", "fracgpu-bench-client")):
            if p and os.access(p, os.X_OK):
                if client_serves(p):
                    return os.path.abspath(p)
                self.say("%s predates warm workers (no --serve): building the client from source" % p)
        # Not packed: build it here (g++ and cuda.h are on the GPU machine; no driver at link time).
        dst = os.path.join(self.work, "fracgpu-bench-client")
        inc = next((d for d in ("/usr/local/cuda/include", "/usr/include") if os.path.exists(os.path.join(d, "cuda.h"))), None)
        srcs = [os.path.join(HERE, "clients", f) for f in ("bench_client.cpp", "client.cpp", "latency.cpp")]
        rc, _, err = run(["g++", "-std=c++20", "-O2", "-I" + (inc or "/usr/local/cuda/include"), *srcs, "-ldl", "-o", dst],
                         child_env(), 240)
        if rc != 0:
            raise RuntimeError("no fracgpu-bench-client and building it failed: %s" % err[-300:])
        self.say("built fracgpu-bench-client from source (%s)" % dst)
        return dst

    def probe_torch(self):
        """PyTorch's version where it imports with CUDA, else None."""
        rc, out, _ = run([self.args.python, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
                         self.pf.base_env(), 120)
        words = out.split()
        return words[-2] if rc == 0 and len(words) >= 2 and words[-1] == "True" else None

    def limit(self, seconds):
        """A process's hard limit: its work plus start-up, never past the budget."""
        startup = 90 if self.torch_ok else 30
        return max(5.0, min(seconds + startup, self.left() - 5))

    def path(self, *names):
        return os.path.join(self.work, *names)

    # ------------------------------------------------------------ processes and groups
    def spawn(self, tag, cmd, env, seconds, track=True):
        """A process under a hard limit; tracked ones are stopped when their group ends."""
        p = Proc("%03d-%s" % (self.next_seq(), tag), cmd, env, self.logs,
                 self.limit(seconds) if track else seconds)
        if track:
            self.live.append(p)
        return p

    def finish(self, procs, limit=None):
        """Waits for procs (their own limits, or `limit`), returns their JSON results."""
        out = []
        for p in procs:
            rc = p.wait(limit)
            r = p.json()
            if rc != 0 or not r.get("ok"):
                r.setdefault("ok", False)
                r.setdefault("error", "rc %s: %s" % (rc, p.err_tail()))
                self.say("  %s failed: %s" % (p.tag, r["error"][:200]))
            r["rc"] = rc
            r["os_pid"] = p.pid
            out.append(r)
            p.stop(1)
        return out

    def cleanup_group(self):
        for p in self.live:
            p.stop(1)
        self.live = []
        for name in self.tenants:
            if self.broker.running():
                self.broker.delete_tenant(name)
        self.tenants = []

    def group(self, specs, seconds, during=None, ready_limit=None, witness=False):
        """One-off processes: starts every spec (dict: tag, kind, mode, frac flags / pct,
        extra), releases them together once all are ready, calls during(procs, stop) if given,
        and returns the results in order. A spec with "stop" set gets the group's stop file.
        (Phases that measure many configurations use warm workers instead: pool.py.)"""
        gid = self.next_seq()
        barrier, stop = self.path("go.%d" % gid), self.path("stop.%d" % gid)
        procs = []
        for s in specs:
            ready = self.path("ready.%d.%s" % (gid, s["tag"]))
            out = self.path("res.%d.%s.json" % (gid, s["tag"]))
            cmd = self.wl.command(s["kind"], s.get("seconds", seconds), out, s["tag"], ready=ready, barrier=barrier,
                                  stop_file=stop if s.get("stop") else "", extra=s.get("extra", ()),
                                  driver=s.get("driver", False))
            p = self.spawn(s["tag"], cmd, self.env_for(s), s.get("seconds", seconds))
            p.ready = ready
            procs.append(p)
        end = time.time() + (ready_limit or (120 if self.torch_ok else 30))
        while time.time() < end and not all(os.path.exists(p.ready) or not p.running() for p in procs):
            time.sleep(0.01)
        self.last_witness = self.pf.witness() if witness else None
        open(barrier, "w").close()
        try:
            if during is not None:
                during(procs, stop)
            res = self.finish(procs)
        finally:
            if self.last_witness is not None:
                self.last_witness.stop()
        self.cleanup_group()
        return res

    def alone_rate(self, kind, driver=False):
        """Units/s of `kind` alone, natively (cached): the reference of every share, measured
        by the warm native worker n-0 (n-drv for the driver-API client where PyTorch runs the
        rest), which the share phases use too."""
        impl = self.wl.impl(kind, driver)
        key = (kind, impl)
        if key not in self.alone:
            drv = impl == "driver" and self.torch_ok
            (w,) = self.pool.start([native_worker("n-drv" if drv else "n-0", driver=drv)])
            win = self.plan.window() if self.plan else self.win
            (r,) = self.pool.round([(w, self.wl.round_args(kind, w.torch) + ["--seconds", "%.3f" % win,
                                                                            "--warmup-ms", "50"])])
            if self.plan:
                self.plan.done()
            self.alone[key] = r.get("rate") if r.get("ok") else None
            self.rec.add("alone", kind=kind, impl=impl, rate=self.alone[key], unit=r.get("unit"),
                         seconds=r.get("seconds"), error=r.get("error"))
        return self.alone[key]

    # ------------------------------------------------------------ phases
    def run_phases(self, phases):
        import phases_latency
        import phases_shares
        import phases_system
        import phases_throughput
        table = {**phases_throughput.PHASES, **phases_shares.PHASES, **phases_latency.PHASES, **phases_system.PHASES}
        self.note_sharing()
        for i, name in enumerate(phases):
            fn = table[name]
            t = time.time()
            pb = self.budget.begin(name)
            if self.left() < 25:
                self.say("== [%d/%d] %s: SKIPPED (%.0f s left)" % (i + 1, len(phases), name, self.left()))
                self.rec.phase(name, "skipped", 0, "time budget")
                self.budget.end(name, "skipped", 0)
                continue
            self.current_phase = name
            self.say("== [%d/%d] %s (planned %.0f s, allotted %.0f s, %.0f s left)" % (
                i + 1, len(phases), name, pb.planned, pb.allotted, self.left()))
            status, detail = "ok", ""
            try:
                fn(self, pb)
            except Exception as e:  # noqa: BLE001 - one phase's failure is recorded, not fatal
                self.say("  %s FAILED: %s: %s" % (name, type(e).__name__, e))
                status, detail = "failed", "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()[-1500:])
            finally:
                self.plan = None
                self.pool.retire(keep=self.kept)
                self.cleanup_group()
                self.stop_sharing()  # the MPS daemon and the fracgpu-mps broker: once per phase
            secs = time.time() - t
            self.rec.phase(name, status, secs, detail)
            self.budget.end(name, status, secs)
            self.say("   %s done in %.1f s (planned %.0f s)" % (name, secs, pb.planned))
        self.current_phase = None

    def kept(self, worker):
        """Whether a warm worker stays for a phase still to run (its spec's "keep")."""
        return any(p in self.budget.pending for p in worker.spec.get("keep", ()))

    def close(self):
        self.stop_recorder()
        self.pool.retire()
        self.cleanup_group()
        self.stop_sharing()
        self.broker.stop()
        self.pf.cleanup()


def client_serves(path):
    """Whether a fracgpu-bench-client knows the warm-worker options (an older packed one does
    not): it parses its options before it touches the driver, so this costs no GPU time."""
    rc, _, err = run([path, "probe", "--idle-s", "1", "--bogus-option", "1"], child_env(), 20)
    return "unknown option --bogus-option" in err


def native_worker(name, driver=False):
    """The native workers that the alone references, shares, conserve and ceilings share: kept
    warm from one phase to the next (spec "keep")."""
    return {"name": name, "kind": "compute", "mode": "native", "driver": driver,
            "keep": ["shares", "conserve", "ceilings"]}


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short windows and fewer runs (~3.5 min on a GPU)")
    ap.add_argument("--only", default="", help="phases to run, of: " + " ".join(PHASE_ORDER))
    ap.add_argument("--hami", default="", help="path of HAMi-core's libvgpu.so: compare it too")
    ap.add_argument("--build", default=os.environ.get("B_BUILD", os.path.join(REPO, "devrun")),
                    help="build tree or tools/pack_devrun.sh tree (default devrun)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/fracgpu-bench-out"))
    ap.add_argument("--metrics-port", type=int, default=0,
                    help="brokers serve /metrics on this port; logs/metrics.jsonl in the archive records it each second")
    ap.add_argument("--budget", type=float, default=0, help="seconds for the whole run (default 480, --quick 210)")
    ap.add_argument("--client", default="", help="fracgpu-bench-client (default BUILD/bin, else built here)")
    ap.add_argument("--gpu", choices=["auto", "real", "sim"], default="auto")
    ap.add_argument("--backend", choices=["auto", "driver"], default="auto",
                    help="driver: the driver-API client for every workload, even where PyTorch is there")
    ap.add_argument("--latency-tenants", choices=["spin", "real"], default="spin",
                    help="latency phase: spin (a 0.1 ms kernel per request, spin-kernel batches) or real "
                         "(transformer models served request by request next to real PyTorch batch work)")
    ap.add_argument("--shim-b", default="",
                    help="overhead phase: another build's libfracgpu.so, measured as a fracgpu tenant beside "
                         "the build's own in the same alternation (fracb_ratio: the A/B of a shim change)")
    ap.add_argument("--overhead-pairs", type=int, default=0,
                    help="overhead phase: alternated pairs of every metric (default 4, --quick 3 and 2 loop pairs)")
    ap.add_argument("--window", type=float, default=0, help="nominal measurement window of the share phases (s)")
    ap.add_argument("--no-fracgpu-mps", action="store_true", help="leave fracgpu over MPS (broker --mps) out")
    ap.add_argument("--sim-mps", action="store_true",
                    help="simulated GPU: fracgpu-mps over the build's fakecuda-mps-control, where it has one")
    ap.add_argument("--keep-work", action="store_true", help="keep the work directory (/tmp/fgb.*)")
    ap.add_argument("--python", default=os.environ.get("PYTHON", sys.executable))
    args = ap.parse_args(argv)
    args.argv = ["bench/gpu/run.sh"] + list(sys.argv[1:] if argv is None else argv)
    args.budget = args.budget or (210 if args.quick else 480)
    only = args.only.replace(",", " ").split()
    bad = [p for p in only if p not in PHASE_ORDER]
    if bad:
        ap.error("unknown phase(s) %s; phases: %s" % (" ".join(bad), " ".join(PHASE_ORDER)))
    args.phases = [p for p in PHASE_ORDER if not only or p in only]
    return args


def main(argv=None):
    args = parse(argv)
    b = Bench(args)
    b.say("fracgpu bench: %s GPU, build %s, client %s, %s workloads, out %s, budget %d s" % (
        "simulated" if b.sim else "real", b.pf.build, b.client, "PyTorch" if b.torch_ok else "driver-API",
        b.out, args.budget))
    signal.signal(signal.SIGTERM, _interrupted)
    machine = {}
    try:
        machine = b.pf.machine()
        b.run_phases(args.phases)
        machine["clocks_end"] = b.pf.machine().get("clocks")
    except KeyboardInterrupt:
        b.rec.note("interrupted")
    finally:
        b.close()
    import report
    ok = report.write(b, machine)
    b.say("done in %.0f s: %s" % (time.time() - b.t0, b.out))
    if args.keep_work:
        b.say("work directory kept: %s" % b.work)
    else:
        shutil.rmtree(b.work, ignore_errors=True)
    return 0 if ok else 1


def _interrupted(*_):
    raise KeyboardInterrupt()


def archive(b, names):
    """DIR/bench.tar.gz: the outputs and every log (the GPU machine returns few files)."""
    path = os.path.join(b.out, "bench.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for n in names:
            p = os.path.join(b.out, n)
            if os.path.exists(p):
                tar.add(p, arcname="bench/" + n)
        tar.add(b.logs, arcname="bench/logs")
    return path


if __name__ == "__main__":
    sys.exit(main())
