"""A fracgpu node broker for GPU scripts: started from a build's `fracgpu broker` with a
private run and state directory, its CLI (the binaries' own deps/ on LD_LIBRARY_PATH,
never the tenants'), tenants created and deleted through that CLI, and the faults the
benchmarks inject (SIGKILL and restart). Not on any measured path."""
import json
import os
import signal
import subprocess
import time

from .procs import alive, child_env, run


class NodeBroker:
    def __init__(self, fracgpu, run_dir, state_dir, logdir, env=None, deps=None, flags=(), name="broker"):
        """env: the environment of the broker and the CLI (a platform's, e.g. the simulated
        driver's variables); deps: a directory put first on their LD_LIBRARY_PATH; name: its
        logs' prefix (NAME1.log, NAME2.log, ... one per start)."""
        self.fracgpu, self.run_dir, self.state_dir, self.logdir = fracgpu, run_dir, state_dir, logdir
        self.name = name
        self.flags = list(flags)
        self.env = dict(env if env is not None else child_env())
        if deps and os.path.isdir(deps):
            self.env["LD_LIBRARY_PATH"] = deps + (":" + self.env["LD_LIBRARY_PATH"]
                                                   if self.env.get("LD_LIBRARY_PATH") else "")
        self.proc = None
        self.starts = 0
        os.makedirs(run_dir, exist_ok=True)
        os.makedirs(state_dir, exist_ok=True)

    # ------------------------------------------------------------ lifecycle
    def start(self, *flags, timeout=60):
        """(Re)starts the broker with self.flags + flags; raises RuntimeError if it does not
        answer within `timeout` seconds. Returns the seconds it took."""
        self.stop()
        self.starts += 1
        log = os.path.join(self.logdir, "%s%d.log" % (self.name, self.starts))
        t0 = time.time()
        with open(log, "w") as f:
            self.proc = subprocess.Popen(
                [self.fracgpu, "--run-dir", self.run_dir, "broker", "--state-dir", self.state_dir,
                 *self.flags, *flags], env=self.env, stdout=f, stderr=f, stdin=subprocess.DEVNULL,
                start_new_session=True)
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("broker %d exited (rc %s): %s" % (self.starts, self.proc.returncode,
                                                                     _tail(log)))
            if os.path.exists(os.path.join(self.run_dir, "admin.sock")) and \
                    self.cli("tenant", "list", timeout=10)[0] == 0:
                return time.time() - t0
            time.sleep(0.02)
        raise RuntimeError("broker %d did not answer within %d s: %s" % (self.starts, timeout, _tail(log)))

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def ensure(self):
        if not self.running():
            self.start()

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc = None

    def sigkill(self):
        """SIGKILL of the broker process (a crash); returns the time of the kill."""
        t = time.time()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return t

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None and alive(self.proc.pid) else None

    # ------------------------------------------------------------ CLI
    def cli(self, *args, timeout=20, user=None):
        """(rc, stdout, stderr) of `fracgpu --run-dir RUN ARGS...`."""
        return run([self.fracgpu, "--run-dir", self.run_dir, *args], self.env, timeout, user=user)

    def status(self):
        rc, out, _ = self.cli("status", "--json")
        try:
            return json.loads(out) if rc == 0 else {}
        except ValueError:
            return {}

    def tenant(self, name):
        for t in self.status().get("tenants", []):
            if t.get("name") == name:
                return t
        return None

    def create_tenant(self, name, *flags):
        """Creates tenant NAME (`tenant create NAME FLAGS...`) and returns its socket path."""
        rc, out, err = self.cli("tenant", "create", name, *flags)
        if rc != 0:
            raise RuntimeError("tenant create %s %s: rc %d: %s" % (name, " ".join(flags), rc, err.strip()[-300:]))
        t = self.tenant(name) or {}
        sock = t.get("socket")
        if not sock:
            raise RuntimeError("tenant %s has no socket in status --json" % name)
        return sock

    def delete_tenant(self, name):
        return self.cli("tenant", "delete", name)[0] == 0

    def delete_all(self):
        for t in self.status().get("tenants", []):
            self.delete_tenant(t.get("name", ""))


def _tail(path, n=3):
    try:
        with open(path, errors="replace") as f:
            return " ".join(f.read().splitlines()[-n:])[:500]
    except OSError:
        return ""
