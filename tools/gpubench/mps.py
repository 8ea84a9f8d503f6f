"""The NVIDIA MPS control daemon for GPU scripts: private pipe and log directories, start,
the environment of its clients, and a stop that always happens (quit, else the servers and
the daemon by pid). Does not change the GPU's compute mode or any other setting."""
import os
import shutil
import signal
import subprocess

from .procs import run


class Mps:
    def __init__(self, work, env, pipe=None, log=None, control="nvidia-cuda-mps-control"):
        """pipe/log: the daemon's directories (default WORK/mps-pipe, WORK/mps-log); a daemon
        someone else started (fracgpu's broker --mps) is stopped through the same pipe;
        control: the control program (the simulated GPU's fakecuda-mps-control stands in)."""
        self.pipe = pipe or os.path.join(work, "mps-pipe")
        self.log = log or os.path.join(work, "mps-log")
        self.control = control
        self.base_env = dict(env)
        self.started = False
        self.quit_rc = None
        self.why_not = ""

    def control_env(self):
        e = dict(self.base_env)
        e["CUDA_MPS_PIPE_DIRECTORY"] = self.pipe
        e["CUDA_MPS_LOG_DIRECTORY"] = self.log
        return e

    def client_env(self, percent=None):
        e = {"CUDA_MPS_PIPE_DIRECTORY": self.pipe, "CUDA_MPS_LOG_DIRECTORY": self.log}
        if percent is not None:
            e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(percent)
        return e

    def available(self):
        return shutil.which(self.control) is not None

    def start(self):
        """True when the daemon runs; False (and why_not) when it is missing or did not start."""
        if not self.available():
            self.why_not = "%s not found" % self.control
            return False
        os.makedirs(self.pipe, exist_ok=True)
        os.makedirs(self.log, exist_ok=True)
        rc, out, err = run([self.control, "-d"], self.control_env(), 20)
        self.started = rc == 0
        if not self.started:
            self.why_not = "%s -d: rc %d %s" % (self.control, rc, (out + err).strip()[-200:])
        return self.started

    def server_log_present(self):
        p = os.path.join(self.log, "server.log")
        return os.path.exists(p) and os.path.getsize(p) > 0

    def daemon_pid(self):
        """The control daemon's pid from its pipe directory (None if there is none running)."""
        try:
            with open(os.path.join(self.pipe, "nvidia-cuda-mps-control.pid")) as f:
                pid = int(f.read().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def adopt(self):
        """Takes over a daemon started by someone else (so that stop() quits it) if one runs."""
        self.started = self.daemon_pid() is not None
        return self.started

    def stop(self):
        """Quits the daemon; where quit fails, kills its servers and the daemon by pid."""
        if not self.started:
            return
        servers = _pipe_command(self.control, "get_server_list\n", self.control_env(), 5)[1]
        rc = _pipe_command(self.control, "quit\n", self.control_env(), 30)
        self.quit_rc = rc[0]
        if rc[0] != 0:
            for pid in servers.split():
                if pid.isdigit():
                    _kill(int(pid), signal.SIGKILL)
            try:
                with open(os.path.join(self.pipe, "nvidia-cuda-mps-control.pid")) as f:
                    _kill(int(f.read().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        self.started = False


def _pipe_command(control, text, env, timeout):
    try:
        r = subprocess.run([control], input=text, env=env, capture_output=True,
                           text=True, timeout=timeout)
        return r.returncode, r.stdout
    except (subprocess.TimeoutExpired, OSError):
        return 124, ""


def _kill(pid, sig):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
