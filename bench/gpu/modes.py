"""The ways of sharing the benchmark compares and what each needs: native time slicing
(nothing), NVIDIA MPS (the suite's own control daemon, private pipe and log directories),
fracgpu (a tenant of the node broker per process), fracgpu-mps (a tenant of a second broker
started with --mps, which starts and supervises its own MPS control daemon in
<run-dir>/mps/{pipe,log}; the shim makes every tenant process an MPS client, high-priority
tenants at client priority 0) and HAMi-core (its libvgpu.so preloaded, one shared region per
tenant). The two MPS daemons never run at once: starting one stops the other and the workers
that were its clients. A mixin of Bench (bench.py); nothing here is on a measured path."""
import os
import shutil
import subprocess

from gpubench import Mps, NodeBroker, run

MODE_NAMES = {"native": "native", "mps": "mps", "frac": "fracgpu", "fmps": "fracgpu_mps", "hami": "hami"}
SETUPS = {"native": "native", "mps": "MPS", "frac": "fracgpu", "fmps": "fracgpu-mps", "hami": "HAMi-core"}


class Sharing:
    def init_sharing(self):
        self.mps_failed = False
        # The MPS control program: NVIDIA's, or on the simulated GPU with --sim-mps its stand-in
        # (for fracgpu-mps only: the stand-in ignores active-thread percentages, so the suite's
        # own MPS rows would mislead there).
        fake = os.path.join(self.pf.build, "bin", "fakecuda-mps-control")
        self.mps_control = fake if self.sim and self.args.sim_mps and os.access(fake, os.X_OK) else \
            "nvidia-cuda-mps-control"
        self.mps = Mps(self.work, self.pf.base_env())
        self.fmps_why = self.fmps_support()
        self.fmps = None
        if not self.fmps_why:
            extra = ["--mps-control", self.mps_control] if self.sim else []
            self.fmps = NodeBroker(self.pf.fracgpu, self.path("rm"), self.path("sm"), self.logs,
                                   env=self.pf.broker_env(), deps=self.pf.deps,
                                   flags=self.pf.broker_flags() + ["--mps"] + extra, name="broker-mps")
            self.fmps_mps = Mps(self.work, self.pf.base_env(), pipe=self.path("rm", "mps", "pipe"),
                                log=self.path("rm", "mps", "log"), control=self.mps_control)
        self.fmps_seen = None  # whether the broker's MPS server ran (its server.log), once used
        self.fmps_used = False

    def fmps_support(self):
        """'' when fracgpu-mps can run here, else why not (recorded as a note)."""
        if self.args.no_fracgpu_mps:
            return "left out (--no-fracgpu-mps)"
        if self.sim and not self.sim_mps():
            return "the simulated GPU has no MPS (--sim-mps: its fakecuda-mps-control, where the build has it)"
        if not shutil.which(self.mps_control):
            return "%s not found" % self.mps_control
        env = dict(self.pf.broker_env())
        if self.pf.deps:
            env["LD_LIBRARY_PATH"] = self.pf.deps + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        rc, out, err = run([self.pf.fracgpu, "broker", "--help"], env, 20)
        if "--mps" not in out + err:
            return "this fracgpu broker has no --mps (fracgpu broker --help)"
        return ""

    def sim_mps(self):
        """The simulated GPU's MPS stand-in is in use (--sim-mps and bin/fakecuda-mps-control)."""
        return self.sim and self.mps_control != "nvidia-cuda-mps-control"

    def note_sharing(self):
        if self.sim:
            self.rec.note("MPS skipped: the simulated GPU has no MPS")
        if self.sim_mps() and not self.fmps_why:
            self.rec.note("fracgpu-mps: over the simulated GPU's MPS stand-in (%s)" % self.mps_control)
        if self.fmps_why:
            self.rec.note("fracgpu-mps skipped: %s" % self.fmps_why)
        if not self.hami:
            self.rec.note("HAMi-core skipped: no --hami PATH")
        elif self.sim:
            self.rec.note("HAMi-core skipped: not on the simulated GPU")
            self.hami = None
        elif not os.path.exists(self.hami):
            self.rec.note("HAMi-core skipped: %s does not exist" % self.hami)

    # ------------------------------------------------------------ tenants and environments
    def tenant(self, name, *flags, memory=None, request="0", broker=None, worker=None):
        """A fracgpu tenant of `broker` (default the node broker; started if needed); returns
        its socket. A worker's tenant is deleted when the worker stops, a group's at its end."""
        broker = broker or self.broker
        broker.ensure()
        broker.delete_tenant(name)
        sock = broker.create_tenant(name, "--memory", memory or self.mem_cap, "--memory-request", request, *flags)
        if worker is not None:
            worker.tenant = (broker, name)
        elif broker is self.broker:
            self.tenants.append(name)
        return sock

    def env_for(self, spec, worker=None):
        mode = spec.get("mode", "native")
        if mode == "fracb":  # fracgpu with another build of the shim (--shim-b): the A/B of a shim change
            sock = self.tenant(spec["tag"], *spec.get("frac", []), memory=spec.get("memory"), worker=worker)
            return dict(self.pf.env("frac", socket=sock), LD_PRELOAD=os.path.abspath(self.args.shim_b))
        if mode in ("frac", "fmps"):
            broker = self.broker
            if mode == "fmps":
                if not self.mode_ok("fmps"):
                    raise RuntimeError("fracgpu-mps is not available: %s" % self.fmps_why)
                broker = self.fmps
            sock = self.tenant(spec["tag"], *spec.get("frac", []), memory=spec.get("memory"), broker=broker,
                               worker=worker)
            return self.pf.env("frac", socket=sock)
        if mode == "mps":
            if not self.mode_ok("mps"):
                raise RuntimeError("MPS is not available: %s" % self.mps.why_not)
            return self.pf.env(mode, mps=self.mps, percent=spec.get("pct"))
        if mode == "shim":  # the shim loaded, no tenant to join: the interposition's own cost
            return self.pf.env("shim")
        if mode == "hami":
            os.makedirs(self.path("hami"), exist_ok=True)
            return self.pf.env(mode, hami=self.hami, percent=spec.get("pct"), memory="24g",
                               hami_cache=self.path("hami", spec["tag"] + ".cache"))
        return self.pf.env("native")

    def set_tenant(self, worker, *flags):
        """`fracgpu tenant update` of a warm worker's tenant (weights apply at once)."""
        if worker.tenant is None:
            return False
        broker, name = worker.tenant
        rc, _, err = broker.cli("tenant", "update", name, *flags)
        if rc != 0:
            self.say("  tenant update %s %s: rc %d %s" % (name, " ".join(flags), rc, err.strip()[-200:]))
        return rc == 0

    # ------------------------------------------------------------ which ways run here
    def modes(self):
        """The ways of sharing this run compares, in the order a phase measures them."""
        return [m for m in ("native", "frac", "hami", "mps", "fmps") if self.available(m)]

    def available(self, mode):
        """Whether `mode` can run here, without starting anything."""
        if mode == "mps":
            return not self.sim and not self.mps_failed and self.mps.available()
        if mode == "fmps":
            return not self.fmps_why
        if mode == "hami":
            return bool(self.hami) and os.path.exists(self.hami)
        if mode == "fracb":
            return bool(getattr(self.args, "shim_b", "")) and os.path.exists(self.args.shim_b)
        return True

    def mode_ok(self, mode):
        """available(), and for the MPS ways their daemon started (the other one stopped)."""
        if not self.available(mode):
            return False
        if mode == "mps":
            if not self.mps.started:
                self.stop_fmps()
                if self.mps.start():
                    self.say("  MPS control daemon started (%s)" % self.mps.pipe)
                else:
                    self.mps_failed = True
                    self.rec.note("MPS skipped: %s" % self.mps.why_not)
            return self.mps.started
        if mode == "fmps":
            if not self.fmps.running():
                self.stop_mps()
                try:
                    secs = self.fmps.start()
                    self.fmps_used = True
                    self.say("  fracgpu broker --mps started in %.1f s" % secs)
                except RuntimeError as e:
                    self.fmps_why = "broker --mps did not start: %s" % str(e)[:300]
                    self.rec.note("fracgpu-mps skipped: %s" % self.fmps_why)
                    return False
            return True
        return True

    def stop_mps(self):
        self.pool.retire(keep=lambda w: w.mode != "mps")
        self.mps.stop()

    def stop_fmps(self):
        if self.fmps is None:
            return
        self.pool.retire(keep=lambda w: w.mode != "fmps")
        if self.fmps.running():
            self.fmps.stop()
        if self.fmps_used and not self.sim_mps():  # the stand-in's server lives in its daemon: no server.log
            seen = os.path.exists(os.path.join(self.fmps_mps.log, "server.log"))
            if not seen and self.fmps_seen is None:
                self.rec.note("fracgpu-mps: no MPS server log in %s: its tenants may not have run as MPS clients"
                              % self.fmps_mps.log)
            self.fmps_seen = bool(self.fmps_seen) or seen
        if self.fmps_mps.adopt():  # its daemon outlived the broker: quit it
            self.say("  the fracgpu-mps broker's MPS daemon outlived it: quitting it")
            self.fmps_mps.stop()

    def stop_sharing(self):
        self.stop_mps()
        self.stop_fmps()

    # ------------------------------------------------------------ versions
    def versions(self):
        """What ran: fracgpu's commit (the packed tree's PACKED.txt, else git), the suite's own
        commit, PyTorch, the interpreters, HAMi-core's library."""
        v = {"torch": self.torch_version, "python": _python_version(self.args.python),
             "hami": self.hami, "client": self.client, "fracgpu_mps": not self.fmps_why,
             "fracgpu_mps_server_seen": self.fmps_seen}
        packed = os.path.join(self.pf.build, "bin", "PACKED.txt")
        try:
            with open(packed) as f:
                for line in f:
                    k, _, val = line.partition(":")
                    if k in ("packed", "repo_commit"):
                        v["fracgpu_" + k] = val.strip()
        except OSError:
            pass
        # FRACGPU_BENCH_COMMIT: a copy of the suite run outside its checkout (the GPU machine's
        # carried folder) says which commit it is; git there would name the wrong checkout.
        commit = os.environ.get("FRACGPU_BENCH_COMMIT")
        if commit:
            v["bench_commit"] = commit
        commit = None if commit else _git(["rev-parse", "HEAD"])
        if commit:
            dirty = _git(["status", "--porcelain", "--untracked-files=no"])
            v["bench_commit"] = commit + (" (dirty)" if dirty else "")
        v.setdefault("fracgpu_repo_commit", v.get("bench_commit"))
        return v


def _git(args):
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        r = subprocess.run(["git", "-C", here, *args], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _python_version(python):
    rc, out, _ = run([python, "-c", "import platform; print(platform.python_version())"], None, 20)
    return out.strip() if rc == 0 else None
