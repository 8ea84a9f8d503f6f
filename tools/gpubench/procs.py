"""Processes for GPU scripts: each one in its own session (so that its whole process group
can be killed), stdout/stderr to log files, a hard time limit, and the helpers to read what
it printed. Costs nothing on the measured paths: it only starts and reaps processes."""
import json
import os
import signal
import subprocess
import time

# Variables a tenant must never inherit from the harness: they would change its route.
SCRUBBED_PREFIXES = ("FRACGPU_", "CUDA_MPS_", "FAKECUDA_")


def child_env(extra=None, scrub=True, base=None):
    """The caller's environment without fracgpu/MPS/fake-driver variables and LD_PRELOAD,
    plus PYTHONUNBUFFERED=1 and `extra` (a None value removes a variable)."""
    env = dict(os.environ if base is None else base)
    if scrub:
        env = {k: v for k, v in env.items() if not k.startswith(SCRUBBED_PREFIXES) and k != "LD_PRELOAD"}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def killgroup(pgid, grace=3.0):
    """TERM to the group, up to `grace` seconds, then KILL (even if its leader is gone)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    end = time.time() + grace
    while time.time() < end and alive(pgid):
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Proc:
    """A command in its own session with logs in `logdir` (TAG.out, TAG.err) and a hard
    limit of `limit` seconds from its start (enforced by wait() and by the group kill)."""

    def __init__(self, tag, cmd, env, logdir, limit, user=None, cwd=None):
        self.tag, self.cmd, self.limit = tag, [str(c) for c in cmd], limit
        self.out_path = os.path.join(logdir, tag + ".out")
        self.err_path = os.path.join(logdir, tag + ".err")
        self.t0 = time.time()
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.p = subprocess.Popen(self.cmd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                      start_new_session=True, user=user, cwd=cwd)
        self.pid = self.p.pid
        self.timed_out = False

    def poll(self):
        return self.p.poll()

    def running(self):
        return self.p.poll() is None

    def wait(self, limit=None):
        """Waits up to min(limit, what is left of the hard limit); kills the group then.
        Returns the exit status (negative: killed by that signal; 124 if timed out)."""
        left = self.limit - (time.time() - self.t0)
        if limit is not None:
            left = min(left, limit)
        try:
            self.p.wait(max(0.0, left))
        except subprocess.TimeoutExpired:
            self.timed_out = True
            killgroup(self.pid, grace=1.0)
            self.p.wait()
            return 124
        return self.p.returncode

    def stop(self, grace=3.0):
        """Ends the process and its group (TERM, then KILL) and reaps it."""
        if self.p.poll() is None:
            killgroup(self.pid, grace)
        else:
            killgroup(self.pid, 0.2)  # children it left behind
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            pass
        return self.p.returncode

    def signal(self, sig):
        try:
            os.kill(self.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def json(self):
        return last_json(self.out_path)

    def err_tail(self, n=3):
        return tail(self.err_path, n)


def last_json(path):
    """The last line of `path` that parses as a JSON object ({} if none)."""
    try:
        with open(path, errors="replace") as f:
            lines = [l for l in f.read().splitlines() if l.startswith("{")]
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            obj = json.loads(line)
            if isinstance(obj, dict):
                return obj
        except ValueError:
            continue
    return {}


def tail(path, n=3):
    try:
        with open(path, errors="replace") as f:
            return " ".join(x.strip() for x in f.read().splitlines()[-n:] if x.strip())[:600]
    except OSError:
        return ""


def run(cmd, env, timeout, **kw):
    """subprocess.run with a time limit that never raises: (rc, stdout, stderr)."""
    try:
        r = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL, **kw)
        return r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        dec = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")  # noqa: E731
        return 124, dec(e.stdout), dec(e.stderr) + " (timed out)"
    except OSError as e:
        return 127, "", str(e)
