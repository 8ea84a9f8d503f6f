#!/usr/bin/env python3
"""fracgpu trust-boundary checks on a real GPU (issue "Trust boundary"): the broker's audit
catches a tenant process that reaches the driver without the shim, its cost, and the
environment / ownership rules, each next to a competing tenant. One batch (--budget, 420 s).

    tests/gpu/security/run_security_checks.py [--bin DIR] [--out DIR] [--budget S] [--only "a b"]

--bin DIR (default $B, else devrun/bin of the repo): fracgpu, libfracgpu.so, deps/
(tools/pack_devrun.sh). --out DIR (default $OUT, else /tmp/fracgpu-security-out): results in
DIR/security: summary.md (the table, also printed), summary.json, logs.tar.gz.
Phases (ids for --only):
 a  audit, log: a tenant capped at 1 GiB whose process loads libcuda by absolute path
    (bypass_alloc.py: no shim in the path) and takes 8 GiB, next to a matmul tenant; time from
    its allocation to the violation in `fracgpu status --json` (must be <= 1 s)
 b  audit, kill: the same with `--audit-action kill`: the process must be gone within 1 s
 c  no false alarm: PyTorch (3 allocators), JAX and CuPy filling their caps through the shim
    next to the matmul tenant: 0 violations; NVML's real bytes vs the books, per process
 d  cost: empty-kernel launch rate and cuMemAlloc/cuMemFree pairs in a tenant with the audit
    on and off (broker restarted), alternated 3 times; the broker's CPU over 10 s with the
    audit on and 4 tenants
 e  environment: FRACGPU_DISABLE=1 and FRACGPU_SOCKET=<a fake socket> inside a 1 GiB tenant:
    PyTorch still stops at the cap (or the process fails closed)
 f  ownership: an unprivileged user (created here, removed after): `fracgpu run` beside the
    node broker is refused and starts no private broker; with --tenant of a tenant it owns it
    runs capped; another user's --tenant of that tenant is refused
Exit status 0 only if every check passed.
"""
import argparse
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools"))
from gpubench import NodeBroker, child_env, killgroup, last_json, tail  # noqa: E402  (shared with bench/gpu)

CLIENTS = os.path.join(REPO, "tests", "gpu", "clients")
COMPUTE = os.path.join(REPO, "tests", "gpu", "compute")
REAL_DRIVER = "/usr/local/nvidia/lib64/libcuda.so.1"
PY = sys.executable


class Batch:
    def __init__(self, args):
        self.bin = os.path.abspath(args.bin)
        self.fracgpu = os.path.join(self.bin, "fracgpu")
        self.shim = os.path.join(self.bin, "libfracgpu.so")
        self.deps = os.path.join(self.bin, "deps")
        self.deadline = time.time() + args.budget - 20
        self.work = tempfile.mkdtemp(prefix="fgsec.")
        os.chmod(self.work, 0o711)  # the unprivileged user of phase f reaches the run dir
        # The node's own run directory: the shim's rules about a node broker look there.
        self.run_dir = "/run/fracgpu"
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.state_dir = os.path.join(self.work, "s")
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs)
        # One node broker, restarted with each phase's flags (gpubench.NodeBroker: logs brokerN.log).
        self.broker = NodeBroker(self.fracgpu, self.run_dir, self.state_dir, self.logs,
                                 env=self.env(), deps=self.deps)
        self.rows = []  # (phase, check, result, figure)
        self.data = {}
        self.users = []
        self.procs = []

    # ------------------------------------------------------------ helpers
    def say(self, text):
        print(f"[security {int(time.time() - START):4d}s] {text}", file=sys.stderr, flush=True)

    def left(self):
        return self.deadline - time.time()

    def env(self, extra=None, deps=False):
        env = child_env({"FRACGPU_SHIM": self.shim})
        if deps:
            env["LD_LIBRARY_PATH"] = self.deps + (":" + env["LD_LIBRARY_PATH"]
                                                   if env.get("LD_LIBRARY_PATH") else "")
        env.update(extra or {})
        return env

    def cli(self, *args, user=None, timeout=20, check=False, fracgpu=None):
        cmd = [fracgpu or self.fracgpu, "--run-dir", self.run_dir, *args]
        r = subprocess.run(cmd, env=self.env(deps=True), capture_output=True, text=True,
                           timeout=timeout, user=user)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: rc {r.returncode}: {r.stderr.strip()}")
        return r

    def status(self):
        r = self.cli("status", "--json")
        try:
            return json.loads(r.stdout)
        except ValueError:
            return {}

    def tenant(self, name):
        for t in self.status().get("tenants", []):
            if t.get("name") == name:
                return t
        return None

    def violations(self, name):
        t = self.tenant(name)
        return (t or {}).get("violations", {}).get("total", 0)

    def start_broker(self, *flags):
        self.broker.start(*flags)
        self.say(f"broker {self.broker.starts} up (pid {self.broker.pid}) {' '.join(flags)}")

    def stop_broker(self):
        self.broker.stop()

    def spawn(self, tag, cmd, env=None, user=None):
        out = open(os.path.join(self.logs, tag + ".out"), "w")
        err = open(os.path.join(self.logs, tag + ".err"), "w")
        p = subprocess.Popen(cmd, env=env or self.env(), stdout=out, stderr=err,
                             start_new_session=True, user=user)
        p.tag = tag
        self.procs.append(p)
        return p

    def run_tenant(self, tag, run_flags, cmd, env_extra=None, user=None, fracgpu=None):
        full = [fracgpu or self.fracgpu, "--run-dir", self.run_dir, "run", *run_flags, "--", *cmd]
        env = self.env(env_extra)
        env["LD_LIBRARY_PATH"] = self.deps  # fracgpu's own libraries; rpath covers the rest
        return self.spawn(tag, full, env=env, user=user)

    def finish(self, p, limit):
        try:
            p.wait(limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        return p.returncode

    def last_json(self, tag):
        return last_json(os.path.join(self.logs, tag + ".out"))

    def competitor(self, tag, seconds):
        return self.run_tenant(tag, ["--memory", "24GiB", "--compute", "50"],
                               [PY, os.path.join(COMPUTE, "matmul_tenant.py"), "--seconds",
                                str(seconds), "--out", os.path.join(self.logs, tag + ".json")])

    def row(self, phase, check, ok, figure):
        self.rows.append((phase, check, "pass" if ok else "FAIL", figure))
        self.say(f"{phase} {check}: {'pass' if ok else 'FAIL'} ({figure})")

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                killgroup(p.pid, grace=0)
            p.wait()
        self.procs = []


def read_line_with_timeout(path, key, limit):
    end = time.time() + limit
    while time.time() < end:
        try:
            for line in open(path):
                if line.startswith("{") and key in line:
                    return json.loads(line)
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    return None


# ---------------------------------------------------------------- phases
def bypass_command(b, route):
    """The command of a tenant process that takes 8 GiB behind the shim's back."""
    if route == "copy":  # a renamed copy of the driver, loaded with ctypes
        copy = os.path.join(b.work, "libnotcuda.so")
        if not os.path.exists(copy):
            shutil.copy(REAL_DRIVER, copy)
        return [PY, os.path.join(HERE, "bypass_alloc.py"), "--driver", copy, "--gib", "8",
                "--hold", "6"]
    return [os.path.join(b.bin, "fracgpu-bypass-client"), "--driver", REAL_DRIVER,  # dlmopen
            "--bytes", str(8 << 30), "--hold-ms", "6000"]


def bypass_attempt(b, phase, name, action_kill, route):
    comp = b.competitor(f"{phase}-matmul", 20)
    p = b.run_tenant(f"{phase}-bypass", ["--name", name, "--memory", "1GiB", "--compute", "50"],
                     bypass_command(b, route))
    held = read_line_with_timeout(os.path.join(b.logs, f"{phase}-bypass.out"), '"pid"', 60)
    if held is not None:
        held.setdefault("t_allocated", time.time())  # the C client prints no time: now, ±10 ms
        b.data[f"{phase}_route"] = route
    if not held:
        b.row(phase, "bypass process allocated 8 GiB", False, tail(os.path.join(b.logs,
                                                                               f"{phase}-bypass.err")))
        return
    seen = None
    while time.time() - held["t_allocated"] < 5:
        if b.violations(name) > 0:
            seen = time.time() - held["t_allocated"]
            break
        time.sleep(0.05)
    t = b.tenant(name) or {}
    b.data[f"{phase}_violations"] = t.get("violations")
    b.row(phase, "violation reported <= 1 s", seen is not None and seen <= 1.0,
          "not seen in 5 s" if seen is None else f"{seen:.2f} s")
    if action_kill:
        gone = None
        while time.time() - held["t_allocated"] < 5:
            if not os.path.exists(f"/proc/{held['pid']}") or \
                    open(f"/proc/{held['pid']}/stat").read().split()[2] == "Z":
                gone = time.time() - held["t_allocated"]
                break
            time.sleep(0.02)
        b.row(phase, "bypass process killed <= 1 s", gone is not None and gone <= 1.0,
              "still alive after 5 s" if gone is None else f"{gone:.2f} s")
    b.finish(p, 20)
    # Asked while the competitor still runs (its tenant goes away with its `fracgpu run`).
    others = [t for t in b.status().get("tenants", []) if t.get("name") != name]
    b.row(phase, "competitor has no violations",
          bool(others) and all(t.get("violations", {}).get("total", 0) == 0 for t in others),
          f"{len(others)} other tenant(s)")
    b.finish(comp, 30)


def bypass_absolute_path(b):
    """Loading libcuda.so.1 by its absolute path is not a bypass: the shim gets the call."""
    p = b.run_tenant("a-abspath", ["--name", "abspath", "--memory", "1GiB"],
                     [PY, os.path.join(HERE, "bypass_alloc.py"), "--driver", REAL_DRIVER,
                      "--gib", "8", "--hold", "1"])
    rc = b.finish(p, 60)
    err = open(os.path.join(b.logs, "a-abspath.err")).read()
    b.row("a", "libcuda.so.1 by absolute path stays under the cap", rc != 0 and "memory cap" in err,
          f"rc {rc}")


def phase_a(b):
    b.start_broker("--audit-action", "log", "--audit-interval", "500")
    bypass_attempt(b, "a", "bypass-log", action_kill=False, route="copy")
    bypass_absolute_path(b)


def phase_b(b):
    b.start_broker("--audit-action", "kill", "--audit-interval", "500")
    bypass_attempt(b, "b", "bypass-kill", action_kill=True, route="dlmopen")


def phase_c(b):
    b.start_broker("--audit-action", "log", "--audit-interval", "500")
    comp = b.competitor("c-matmul", 120)
    clients = [("torch-default", [PY, os.path.join(CLIENTS, "torch_cap.py")], {}),
               ("torch-expandable", [PY, os.path.join(CLIENTS, "torch_cap.py")],
                {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
               ("torch-async", [PY, os.path.join(CLIENTS, "torch_cap.py")],
                {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
               ("jax", [PY, os.path.join(CLIENTS, "jax_cap.py"), "--ready",
                        os.path.join(b.work, "jax.ready"), "--release",
                        os.path.join(b.work, "jax.release")], {}),
               ("cupy", [PY, os.path.join(CLIENTS, "cupy_cap.py")], {})]
    for tag, cmd, extra in clients:
        if b.left() < 40:
            b.row("c", f"{tag} no false alarm", False, "skipped: out of budget")
            continue
        name = "fit-" + tag
        p = b.run_tenant("c-" + tag, ["--name", name, "--memory", "8GiB"], cmd, env_extra=extra)
        worst = 0
        real = {}  # NVML's bytes per pid (max seen) and the tenant's books, side by side
        ready_at = None
        while p.poll() is None:
            t = b.tenant(name)
            if t:
                worst = max(worst, t.get("violations", {}).get("total", 0))
                books = sum(d.get("memory_used", 0) for d in t.get("devices", []))
                real["books_max"] = max(real.get("books_max", 0), books)
            for pid, mib in nvml_processes():
                real.setdefault("nvml_mib", {})
                real["nvml_mib"][pid] = max(real["nvml_mib"].get(pid, 0), mib)
            if tag == "jax" and os.path.exists(os.path.join(b.work, "jax.ready")):
                ready_at = ready_at or time.time()
                if time.time() - ready_at > 3:
                    open(os.path.join(b.work, "jax.release"), "w").close()
            time.sleep(0.2)
        rc = p.returncode
        b.data["c_" + tag] = {"client": b.last_json("c-" + tag), "audit_view": real}
        b.row("c", f"{tag} fills 8 GiB cap: no violation", rc == 0 and worst == 0,
              f"rc {rc}, violations {worst}")
    b.finish(comp, 5)


def phase_d(b):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    client = os.path.join(b.work, "cuda_client")
    r = subprocess.run([nvcc, "-O2", "-arch=sm_90", "-o", client,
                        os.path.join(REPO, "tests", "gpu", "cuda_client.cu"), "-lcuda"],
                       capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        b.row("d", "build cuda_client", False, r.stderr[-200:])
        return
    series = {"on": {"launch_ns": [], "alloc_us": []}, "off": {"launch_ns": [], "alloc_us": []}}
    for rep in range(4):
        for mode in ("on", "off"):
            if b.left() < 40:
                break
            b.start_broker("--audit-interval", "500" if mode == "on" else "0")
            comp = b.competitor(f"d-matmul-{mode}{rep}", 60)
            tag = f"d-launch-{mode}{rep}"
            p = b.run_tenant(tag, ["--memory", "4GiB", "--compute", "50"],
                             [client, "--mode", "launch-rate", "200000"])
            b.finish(p, 60)
            series[mode]["launch_ns"].append(b.last_json(tag).get("ns_per_launch"))
            tag = f"d-alloc-{mode}{rep}"
            p = b.run_tenant(tag, ["--memory", "4GiB", "--compute", "50"],
                             [PY, os.path.join(HERE, "alloc_pairs.py")])
            b.finish(p, 60)
            series[mode]["alloc_us"].append(b.last_json(tag).get("us_per_pair_median"))
            b.finish(comp, 1)
    b.data["d_series"] = series

    def med(xs):
        xs = sorted(x for x in xs if isinstance(x, (int, float)))
        return xs[len(xs) // 2] if xs else None

    # The audit runs in the broker only: a difference inside the run-to-run spread of the
    # off series (or within 2 %) is no cost.
    for key in ("launch_ns", "alloc_us"):
        on, off = med(series["on"][key]), med(series["off"][key])
        offs = [x for x in series["off"][key] if isinstance(x, (int, float))]
        ratio = on / off if on and off else None
        spread = (max(offs) - min(offs)) / off if offs and off else 0
        b.row("d", f"{key} audit on / off", ratio is not None and ratio <= 1 + max(0.02, spread),
              "n/a" if ratio is None else
              f"{ratio:.3f} (on {on:.2f}, off {off:.2f}; off spread {spread * 100:.1f} %)")
    # Broker CPU over 10 s with the audit on and 4 tenants (one busy, three idle).
    b.start_broker("--audit-interval", "500")
    comp = b.competitor("d-matmul-cpu", 30)
    idle = [b.run_tenant(f"d-idle{i}", ["--memory", "2GiB"],
                         [PY, "-c", "import torch,time; torch.ones(1,device='cuda'); time.sleep(25)"])
            for i in range(3)]
    time.sleep(8)
    t0, c0 = time.time(), cpu_seconds(b.broker.pid)
    time.sleep(10)
    pct = (cpu_seconds(b.broker.pid) - c0) / (time.time() - t0) * 100
    b.data["d_broker_cpu_pct"] = pct
    b.row("d", "broker CPU with the audit on, 4 tenants", pct < 1.0, f"{pct:.2f} % of one core")
    for p in idle + [comp]:
        b.finish(p, 1)


def nvml_processes():
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True)
    out = []
    for line in r.stdout.splitlines():
        try:
            pid, mib = (x.strip() for x in line.split(","))
            out.append((pid, int(mib)))
        except ValueError:
            pass
    return out


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase_e(b):
    b.start_broker("--audit-interval", "500")
    comp = b.competitor("e-matmul", 60)
    fake = os.path.join(b.work, "fake.sock")
    for tag, extra in (("disable", {"FRACGPU_DISABLE": "1"}),
                       ("socket", {"FRACGPU_SOCKET": fake})):
        # The variable is set INSIDE the tenant (by the command), as a tenant would.
        cmd = ["env", *[f"{k}={v}" for k, v in extra.items()], PY,
               os.path.join(CLIENTS, "torch_cap.py")]
        p = b.run_tenant("e-" + tag, ["--memory", "1GiB"], cmd)
        rc = b.finish(p, 90)
        res = b.last_json("e-" + tag)
        held = res.get("held_at_oom") or 0
        capped = (rc == 0 and held <= (1 << 30)) or (rc != 0 and held == 0)
        b.row("e", f"FRACGPU_{tag.upper()} inside a 1 GiB tenant", capped,
              f"rc {rc}, held {held / 2**30:.2f} GiB")
    b.finish(comp, 1)


def make_user(b, name):
    subprocess.run(["userdel", name], capture_output=True)
    r = subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--shell",
                        "/usr/sbin/nologin", name], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"useradd {name}: {r.stderr.strip()}")
    b.users.append(name)
    return pwd.getpwnam(name).pw_uid


def phase_f(b):
    b.start_broker("--audit-interval", "500")
    make_user(b, "fgsec-alice")
    make_user(b, "fgsec-bob")
    # The users need binaries and clients they can reach (the checkout may be root's alone).
    ubin, uclients = os.path.join(b.work, "ubin"), os.path.join(b.work, "uclients")
    shutil.copytree(b.bin, ubin)
    shutil.copytree(CLIENTS, uclients)
    for top in (ubin, uclients):
        for root, dirs, files in os.walk(top):
            for n in dirs + files:
                path = os.path.join(root, n)
                os.chmod(path, os.stat(path).st_mode | 0o555 if n in dirs or os.access(path, os.X_OK)
                         else os.stat(path).st_mode | 0o444)
        os.chmod(top, 0o755)
    ufrac = os.path.join(ubin, "fracgpu")
    b.shim = os.path.join(ubin, "libfracgpu.so")
    b.deps = os.path.join(ubin, "deps")
    comp = b.competitor("f-matmul", 60)
    before = set(os.listdir("/tmp"))
    r = b.cli("run", "--memory", "1GiB", "--", "true", user="fgsec-alice", fracgpu=ufrac)
    new_private = [d for d in set(os.listdir("/tmp")) - before if "fracgpu" in d]
    b.row("f", "non-root run beside the node broker refused", r.returncode != 0 and not new_private,
          f"rc {r.returncode}: {r.stderr.strip()[:120]}")
    b.cli("tenant", "create", "alice", "--memory", "1GiB", "--owner", "fgsec-alice", check=True)
    p = b.run_tenant("f-alice", ["--tenant", "alice"], [PY, os.path.join(uclients, "torch_cap.py")],
                     user="fgsec-alice", fracgpu=ufrac)
    rc = b.finish(p, 90)
    res = b.last_json("f-alice")
    held = res.get("held_at_oom", 0)
    b.row("f", "owner's --tenant run is capped at 1 GiB", rc == 0 and 0 < held <= (1 << 30),
          f"rc {rc}, held {held / 2**30:.2f} GiB")
    r = b.cli("run", "--tenant", "alice", "--", PY, "-c", "print(1)", user="fgsec-bob",
              fracgpu=ufrac)
    b.row("f", "another user's --tenant refused", r.returncode != 0,
          f"rc {r.returncode}: {r.stderr.strip()[:120]}")
    b.finish(comp, 1)


PHASES = {"a": phase_a, "b": phase_b, "c": phase_c, "d": phase_d, "e": phase_e, "f": phase_f}


def report(b, final):
    lines = ["| phase | check | result | figure |", "| --- | --- | --- | --- |"]
    lines += [f"| {p} | {c} | {r} | {f} |" for p, c, r, f in b.rows]
    text = "\n".join(lines)
    print(text)
    open(os.path.join(final, "summary.md"), "w").write(text + "\n")
    json.dump({"rows": b.rows, "data": b.data}, open(os.path.join(final, "summary.json"), "w"),
              indent=1, default=str)
    with tarfile.open(os.path.join(final, "logs.tar.gz"), "w:gz") as tar:
        tar.add(b.logs, arcname="logs")
    return all(r == "pass" for _, _, r, _ in b.rows) and bool(b.rows)


def run_phases(b, phases, only):
    """Runs the phases named in `only` (space-separated ids of `phases`) within the budget; one
    phase's exception is a failed row, not the end of the batch. Shared by the GPU scripts."""
    for ph in only.split():
        if ph not in phases:
            raise SystemExit(f"unknown phase {ph}")
        if b.left() < 30:
            b.row(ph, "phase", False, "skipped: out of budget")
            continue
        b.say(f"== phase {ph}")
        try:
            phases[ph](b)
        except Exception as exc:  # noqa: BLE001 - one phase's failure is reported, not fatal
            b.row(ph, "phase ran", False, f"{type(exc).__name__}: {exc}")
        b.stop_all()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("B", os.path.join(REPO, "devrun", "bin")))
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/fracgpu-security-out"))
    ap.add_argument("--budget", type=int, default=420)
    ap.add_argument("--only", default="a b c d e f")
    args = ap.parse_args()
    final = os.path.join(args.out, "security")
    os.makedirs(final, exist_ok=True)
    b = Batch(args)
    try:
        run_phases(b, PHASES, args.only)
    finally:
        b.stop_all()
        b.stop_broker()
        for u in b.users:
            subprocess.run(["userdel", u], capture_output=True)
    return 0 if report(b, final) else 1


START = time.time()
if __name__ == "__main__":
    raise SystemExit(main())
