"""Process and Prometheus plumbing of the monitoring integration test
(prometheus_integration_test.py): children that die with the test and are stopped group by
group, deadlines on every wait, and Prometheus's HTTP API (instant queries, rules, alerts).
Nothing here is fracgpu-specific.
"""
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request


class Failure(Exception):
    """A step that cannot go on (the rest of the checks would only repeat it)."""


def die_with_parent():
    """In the child before exec: SIGKILL when this script dies, however it dies."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=3.0):
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.status, reply.read().decode()


def wait_for(what, predicate, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, urllib.error.URLError):
            if predicate():
                return
        time.sleep(interval)
    raise Failure(f"timed out after {timeout:.0f} s waiting for {what}")


class Processes:
    """Children in their own process groups, stopped (group-wide) in reverse order."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.started = []  # (name, Popen)

    def start(self, name, argv, env, pass_fds=()):
        log = open(self.log_dir / f"{name}.log", "wb")
        process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, preexec_fn=die_with_parent, pass_fds=pass_fds)
        log.close()
        self.started.append((name, process))
        return process

    def expect_running(self, names):
        for name, process in self.started:
            if name in names and process.poll() is not None:
                raise Failure(f"{name} exited ({process.returncode}) early:\n{self.log(name)}")

    def log(self, name, tail=2000):
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def stop_all(self):
        for _, process in reversed(self.started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 3
        for _, process in reversed(self.started):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # what is left of the group
            process.wait()


class Prometheus:
    def __init__(self, url):
        self.url = url

    def api(self, path, **params):
        status, body = http_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=5)
        reply = json.loads(body)
        if reply.get("status") != "success":
            raise Failure(f"Prometheus refused {path} {params}: {reply}")
        return reply["data"]

    def query(self, expr, at=None):
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        return self.api("query", **params)["result"]

    def values(self, expr, at=None, keep=lambda metric: True):
        """{tenant (or ''): value} of an instant query's series that `keep` accepts."""
        return {s["metric"].get("tenant", ""): float(s["value"][1]) for s in self.query(expr, at) if keep(s["metric"])}
