#!/usr/bin/env python3
"""fracgpu memory quotas on a real GPU: the checks behind run_memory_checks.sh.

  memory_checks.py --bin DIR --work DIR --summary FILE --table FILE [--budget S] [--python PY]

DIR (--bin) holds fracgpu, fracgpu-broker, libfracgpu.so and deps/ (shared libraries of the
two binaries, given to them only, through LD_LIBRARY_PATH). Every process runs in its own
session under a time limit and is killed with its whole process group when the limit or
the batch's deadline passes; every process group started is listed in WORK/pgids so that
the shell wrapper can make sure nothing is left behind. Each check is independent: one
that fails or is skipped does not stop the others. Logs go to WORK/logs.

Checks (ids are those of the table; the order they run in puts the C++ checks before the
slow framework imports):
  0  nvml_layout_check.cpp compiles against the real nvml.h
  1  context footprint, natively (informational) and as the broker measured it
  2  alloc_client fill at a 4 GiB cap (fracgpu run)
  3  PyTorch at an 8 GiB cap, three allocators
  4  JAX preallocation inside an 8 GiB tenant (node broker)
  5  CuPy at a 4 GiB cap
  6  nvidia-smi and pynvml inside a 6 GiB tenant
  7  NVML from outside: a holder of 3 GiB in a 4 GiB tenant (node broker)
  8  overcommit: two tenants whose limits exceed the GPU (node broker)
  9  every allocation route charged and released (fracgpu run)

Exit status: 0 only if every pass/fail check passed (informational rows do not count;
skipped ones do, as failures).
"""
import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLIENTS = os.path.join(HERE, "clients")
sys.path.insert(0, HERE)
from compare_results import last_json_line, tail  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
NVML_NOT_AVAILABLE = (1 << 64) - 1


def mib(n):
    return "-" if n is None else "%d MiB" % round(n / MiB)


def gib(n):
    return "-" if n is None else "%.2f GiB" % (n / GiB)


def as_int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


class Run(object):
    def __init__(self, tag, rc, out, err, elapsed, timed_out=False, skipped=False):
        self.tag, self.rc, self.out, self.err = tag, rc, out, err
        self.elapsed, self.timed_out, self.skipped = elapsed, timed_out, skipped

    def json(self):
        obj, _ = last_json_line(self.out)
        return obj

    def json_error(self):
        return last_json_line(self.out)[1]

    def stderr_text(self):
        try:
            with open(self.err, "r", encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def why(self):
        """Short reason a run gave nothing usable."""
        if self.skipped:
            return "skipped (time budget)"
        if self.timed_out:
            return "timed out after %.0fs" % self.elapsed
        t = tail(self.err, 3, 200)
        return "rc=%s%s" % (self.rc, (": " + " / ".join(t)) if t else "")


class Checks(object):
    def __init__(self, args):
        self.args = args
        self.bin = os.path.realpath(args.bin)
        self.fracgpu = os.path.join(self.bin, "fracgpu")
        self.shim = os.path.join(self.bin, "libfracgpu.so")
        self.deps = os.path.join(self.bin, "deps")
        self.work = os.path.realpath(args.work)
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs, exist_ok=True)
        os.makedirs(os.path.join(self.work, "bin"), exist_ok=True)
        self.python = args.python
        self.start = time.time()
        self.deadline = self.start + args.budget
        # Short paths: tenant sockets live under broker run directories (108-byte limit).
        self.tmp = tempfile.mkdtemp(prefix="fgm.", dir="/tmp")
        self.rows = []
        self.bg = []
        self.broker = None
        self.broker_starts = 0
        self.broker_gpu = None
        self.alloc = None
        self.footprint = None
        self.footprint_source = "none"
        self.native_footprint = None
        self.notes = []
        self.orig_ld = os.environ.get("LD_LIBRARY_PATH")
        base = dict(os.environ)
        for k in ("LD_PRELOAD", "FRACGPU_SOCKET", "FRACGPU_HOOK_STATS", "FRACGPU_RUN_DIR", "FRACGPU_DISABLE",
                  "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR",
                  "PYTORCH_CUDA_ALLOC_CONF"):
            base.pop(k, None)
        base["PYTHONDONTWRITEBYTECODE"] = "1"
        base["PYTHONUNBUFFERED"] = "1"
        base.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        self.base_env = base
        cli = dict(base)
        cli["LD_LIBRARY_PATH"] = self.deps + (":" + self.orig_ld if self.orig_ld else "")
        cli["FRACGPU_SHIM"] = self.shim
        self.cli_env = cli
        with open(os.path.join(self.work, "runs.tsv"), "w") as f:
            f.write("tag\trc\telapsed_s\tlimit_s\ttimed_out\tcommand\n")

    # ------------------------------------------------------------------ processes
    def left(self):
        return self.deadline - time.time()

    def _note_pgid(self, pid):
        with open(os.path.join(self.work, "pgids"), "a") as f:
            f.write("%d\n" % pid)

    @staticmethod
    def _killpg(pid, sig):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError, OSError):
            pass

    def _stop(self, p, grace=5.0):
        """SIGTERM to p's process group, SIGKILL after `grace` seconds, then reap."""
        if p.poll() is None:
            self._killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        self._killpg(p.pid, signal.SIGKILL)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def run(self, tag, cmd, env, limit, quiet=False):
        out = os.path.join(self.logs, tag + ".out")
        err = os.path.join(self.logs, tag + ".err")
        left = self.left()
        if left < 3:
            with open(out, "w"), open(err, "w") as fe:
                fe.write("skipped: the time budget is used up\n")
            print("  %-28s skipped (time budget)" % tag, flush=True)
            return Run(tag, None, out, err, 0.0, skipped=True)
        limit = max(1.0, min(float(limit), left))
        t0 = time.time()
        timed_out = False
        with open(out, "wb") as fo, open(err, "wb") as fe:
            try:
                p = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True, cwd=REPO)
            except OSError as exc:
                fe.write(("cannot start %s: %s\n" % (cmd[0], exc)).encode())
                return Run(tag, 127, out, err, 0.0)
            self._note_pgid(p.pid)
            try:
                p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                self._stop(p, grace=3.0)  # also ends anything the command left in its group
        rc = p.returncode
        el = time.time() - t0
        with open(os.path.join(self.work, "runs.tsv"), "a") as f:
            f.write("%s\t%s\t%.2f\t%.0f\t%s\t%s\n" % (tag, rc, el, limit, timed_out, " ".join(cmd)))
        if not quiet:
            print("  %-28s rc=%-4s %6.1fs%s" % (tag, rc, el, " (TIMED OUT at %.0fs)" % limit if timed_out else ""),
                  flush=True)
        return Run(tag, rc, out, err, el, timed_out=timed_out)

    def start_bg(self, tag, cmd, env):
        out = os.path.join(self.logs, tag + ".out")
        err = os.path.join(self.logs, tag + ".err")
        fo, fe = open(out, "wb"), open(err, "wb")
        try:
            p = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env,
                                 start_new_session=True, cwd=REPO)
        finally:
            fo.close()
            fe.close()
        self._note_pgid(p.pid)
        self.bg.append(p)
        p.fracgpu_out, p.fracgpu_err, p.fracgpu_tag = out, err, tag
        print("  %-28s started, pid %d" % (tag, p.pid), flush=True)
        return p

    def stop_bg(self, p, sig=signal.SIGKILL):
        if p.poll() is None:
            self._killpg(p.pid, sig)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._stop(p, grace=2.0)
        if p in self.bg:
            self.bg.remove(p)

    def wait_for(self, predicate, limit, step=0.1):
        end = time.time() + max(0.0, min(limit, self.left()))
        while True:
            try:
                if predicate():
                    return True
            except Exception:  # noqa: BLE001 - a predicate reading a half-written file
                pass
            if time.time() >= end:
                return False
            time.sleep(step)

    @staticmethod
    def file_has(path, text):
        try:
            with open(path, "r", encoding="utf-8", errors="replace") as f:
                return text in f.read()
        except OSError:
            return False

    # ------------------------------------------------------------------ environments
    def wrap(self, cmd, extra_env=None):
        """The command as fracgpu run should start it: with the caller's LD_LIBRARY_PATH
        (the CLI's deps/ must not reach PyTorch or JAX) and the extra variables."""
        w = ["env"]
        if self.orig_ld is None:
            w += ["-u", "LD_LIBRARY_PATH"]
        else:
            w.append("LD_LIBRARY_PATH=" + self.orig_ld)
        for k, v in sorted((extra_env or {}).items()):
            w.append("%s=%s" % (k, v))
        return w + list(cmd)

    def fracgpu_run(self, tag, memory, cmd, limit, extra_env=None, name=None):
        run_dir = tempfile.mkdtemp(prefix="norun.", dir=self.tmp)  # no node broker here
        env = dict(self.cli_env)
        env["FRACGPU_RUN_DIR"] = run_dir
        argv = [self.fracgpu, "run", "--memory", memory]
        if name:
            argv += ["--name", name]
        return self.run(tag, argv + ["--"] + self.wrap(cmd, extra_env), env, limit)

    def tenant_env(self, name, extra=None):
        env = dict(self.base_env)
        env["LD_PRELOAD"] = self.shim
        env["FRACGPU_SOCKET"] = os.path.join(self.broker["run_dir"], "tenants", name, "broker.sock")
        env.update(extra or {})
        return env

    # ------------------------------------------------------------------ node broker
    def broker_alive(self):
        return self.broker is not None and self.broker["proc"].poll() is None

    def cli(self, tag, args, limit=20):
        return self.run(tag, [self.fracgpu, "--run-dir", self.broker["run_dir"]] + list(args), self.cli_env, limit,
                        quiet=True)

    def ensure_broker(self):
        """A node broker, started (again) if none is alive. Raises if it does not come up."""
        if self.broker_alive():
            return self.broker
        if self.broker is not None:
            self.notes.append("node broker %d had exited (rc %s); started another" % (
                self.broker_starts, self.broker["proc"].returncode))
        self.broker_starts += 1
        n = self.broker_starts
        run_dir = os.path.join(self.tmp, "r%d" % n)
        state_dir = os.path.join(self.tmp, "s%d" % n)
        os.makedirs(run_dir, exist_ok=True)
        os.makedirs(state_dir, exist_ok=True)
        p = self.start_bg("broker%d" % n, [self.fracgpu, "--run-dir", run_dir, "broker", "--state-dir", state_dir],
                          self.cli_env)
        self.broker = {"proc": p, "run_dir": run_dir, "state_dir": state_dir}
        probe = {"i": 0}

        def up():
            if p.poll() is not None:
                raise StopIteration
            if not os.path.exists(os.path.join(run_dir, "admin.sock")):
                return False
            probe["i"] += 1
            return self.cli("broker%d.probe%d" % (n, probe["i"]), ["tenant", "list"], 10).rc == 0

        ok = False
        end = time.time() + min(60.0, max(0.0, self.left()))
        while time.time() < end:
            try:
                if up():
                    ok = True
                    break
            except StopIteration:
                break
            time.sleep(0.2)
        if not ok:
            why = "exited rc %s" % p.returncode if p.poll() is not None else "no answer within 60 s"
            raise RuntimeError("the node broker did not come up (%s): %s" % (why, " / ".join(tail(p.fracgpu_err, 4))))
        print("  node broker %d up at %s" % (n, run_dir), flush=True)
        return self.broker

    def status(self, tag):
        r = self.cli(tag, ["status", "--json"], 20)
        try:
            with open(r.out, "r", encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError) as exc:
            raise RuntimeError("fracgpu status --json: %s (%s)" % (exc, r.why()))

    @staticmethod
    def tenant_device(status, name):
        for t in status.get("tenants", []):
            if t.get("name") == name and t.get("devices"):
                return t["devices"][0]
        return None

    def create_tenant(self, tag, name, memory, request=None):
        args = ["tenant", "create", name, "--memory", memory, "--gpu", "0"]
        if request:
            args += ["--memory-request", request]
        r = self.cli(tag, args, 30)
        if r.rc != 0:
            raise RuntimeError("tenant create %s failed: %s" % (name, r.why()))

    def delete_tenant(self, tag, name):
        if self.broker_alive():
            self.cli(tag, ["tenant", "delete", name], 30)

    def delete_all_tenants(self, tag):
        st = self.status(tag + ".status")
        for i, t in enumerate(st.get("tenants", [])):
            self.delete_tenant("%s.%d" % (tag, i), t.get("name", ""))

    def stop_broker(self):
        if self.broker is None:
            return
        p = self.broker["proc"]
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.notes.append("node broker did not stop within 15 s of SIGTERM; killed")
        self.stop_bg(p)

    # ------------------------------------------------------------------ rows
    def row(self, cid, name, expected, measured, passed, details=None, problems=None):
        r = {"id": cid, "name": name, "expected": expected, "measured": measured,
             "pass": passed, "details": details or {}, "problems": problems or []}
        self.rows.append(r)
        state = {True: "PASS", False: "FAIL", None: "info"}[passed]
        print("  -> [%s] %s: %s%s" % (cid, name, state, ("  (" + "; ".join(problems) + ")") if problems else ""),
              flush=True)
        return r

    def judge(self, cid, name, expected, measured, conds, details=None):
        problems = [label for label, ok in conds if not ok]
        return self.row(cid, name, expected, measured, not problems, details, problems)

    def fail_row(self, cid, name, expected, why, details=None):
        return self.row(cid, name, expected, "-", False, details, [why])

    def client_failed(self, cid, name, expected, run, obj, need_key):
        """A row for a client that gave no usable result (no JSON, its own exception, or no
        `need_key`); None when the result is usable."""
        if obj is None:
            return self.fail_row(cid, name, expected, "no JSON: " + run.why())
        if obj.get("error") or need_key not in obj:
            return self.fail_row(cid, name, expected, "rc=%s: %s" % (run.rc, (obj.get("error") or run.why())[:300]),
                                 {"result": obj})
        return None

    def fp(self):
        return self.footprint if self.footprint is not None else 512 * MiB

    def need_alloc(self):
        if not self.alloc:
            raise RuntimeError("alloc_client was not built (see logs/build_alloc_client.err)")
        return self.alloc

    # ------------------------------------------------------------------ builds
    def build(self):
        out = os.path.join(self.work, "bin", "alloc_client")
        inc = "/usr/local/cuda/include"
        stubs = "/usr/local/cuda/lib64/stubs"
        r = self.run("build_alloc_client", ["g++", "-O2", "-std=c++17", "-I" + inc,
                                            os.path.join(REPO, "tests", "programs", "alloc_client.cpp"), "-o", out,
                                            "-L" + stubs, "-lcuda"], self.base_env, 120)
        if r.rc == 0 and os.access(out, os.X_OK):
            self.alloc = out
        else:
            self.notes.append("alloc_client build failed: " + r.why())

    # ------------------------------------------------------------------ check 0
    def check0_nvml_layout(self):
        name = "nvml.h layout == include/fracgpu/nvml_types.h"
        candidates = ["/usr/local/cuda/targets/x86_64-linux/include", "/usr/local/cuda/include"]
        candidates += sorted(glob.glob("/usr/local/cuda*/targets/*/include")) + ["/usr/include"]
        candidates = [d for i, d in enumerate(candidates) if d not in candidates[:i]]
        inc = next((d for d in candidates if os.path.isfile(os.path.join(d, "nvml.h"))), None)
        if inc is None:
            return self.fail_row("0", name, "compiles", "nvml.h not found in " + ", ".join(candidates))
        r = self.run("c0_nvml_layout", ["g++", "-std=c++17", "-fsyntax-only", "-I" + os.path.join(REPO, "include"),
                                        "-I" + inc, os.path.join(HERE, "nvml_layout_check.cpp")], self.base_env, 60)
        errors = [ln for ln in r.stderr_text().splitlines() if "error" in ln][:6]
        return self.judge("0", name, "static_asserts hold (g++ -fsyntax-only)",
                          "compiles" if r.rc == 0 else "rc=%s: %s" % (r.rc, (errors[0] if errors else r.why())[:160]),
                          [("compile failed", r.rc == 0)], {"nvml_h": os.path.join(inc, "nvml.h"), "errors": errors})

    # ------------------------------------------------------------------ check 1
    def check1_footprint(self):
        name = "context footprint"
        r = self.run("c1_footprint_native", [self.python, os.path.join(CLIENTS, "context_footprint.py")],
                     self.base_env, 60)
        native = r.json() or {}
        if native.get("ok"):
            self.native_footprint = as_int(native.get("one_more_context"))
        broker_fp = None
        broker_error = None
        try:
            self.ensure_broker()
            st = self.status("c1_status")
            gpus = st.get("gpus") or []
            if gpus:
                self.broker_gpu = gpus[0]
                broker_fp = as_int(gpus[0].get("context_footprint"))
        except Exception as exc:  # noqa: BLE001
            broker_error = str(exc)
        if broker_fp:
            self.footprint, self.footprint_source = broker_fp, "broker status (gpus[0].context_footprint)"
        elif self.native_footprint:
            self.footprint, self.footprint_source = self.native_footprint, "native measurement (broker reported none)"
        else:
            self.footprint, self.footprint_source = None, "unknown: 512 MiB assumed for tolerances"
        measured = "native: first ctx %s (NVML), one more ctx %s; broker: %s" % (
            mib(as_int(native.get("first_context_nvml"))), mib(self.native_footprint),
            mib(broker_fp) if broker_fp is not None else "n/a")
        details = {"native": native, "native_error": None if native.get("ok") else r.why(),
                   "broker_context_footprint": broker_fp, "broker_error": broker_error,
                   "broker_gpu": self.broker_gpu, "footprint_used_for_tolerances": self.fp(),
                   "footprint_source": self.footprint_source}
        return self.row("1", name, "informational", measured, None, details)

    # ------------------------------------------------------------------ check 2
    def check2_cpp_cap(self):
        name = "C++ fill at a 4 GiB cap"
        cap, chunk, fp = 4 * GiB, 64 * MiB, self.fp()
        lo = cap - fp - chunk
        expected = "OOM, total 4096 MiB, alloc %s..4096 MiB, again, cap line" % mib(lo)
        r = self.fracgpu_run("c2_cpp_fill", "4GiB", [self.need_alloc(), "fill", "--chunk", str(chunk)], 60,
                             name="c2-cpp")
        o = r.json()
        if o is None or "allocated" not in o:
            return self.fail_row("2", name, expected, "no result: " + ((o or {}).get("error") or r.why()),
                                 {"result": o})
        alloc = as_int(o.get("allocated"))
        cap_line = "memory cap" in r.stderr_text()
        measured = "%s, total %s, alloc %s, again=%s, cap line=%s" % (
            "OOM" if o.get("refused_with") == "CUDA_ERROR_OUT_OF_MEMORY" else o.get("refused_with"),
            mib(as_int(o.get("info_total"))), mib(alloc), o.get("again"), cap_line)
        return self.judge("2", name, expected, measured, [
            ("exit status %s" % r.rc, r.rc == 0),
            ("refused_with", o.get("refused_with") == "CUDA_ERROR_OUT_OF_MEMORY"),
            ("info_total != cap", as_int(o.get("info_total")) == cap),
            ("allocated above the cap", alloc is not None and alloc <= cap),
            ("allocated below cap - footprint - chunk", alloc is not None and alloc >= lo),
            ("again", o.get("again") is True),
            ("no 'memory cap' line on stderr", cap_line),
        ], {"result": o, "footprint": fp, "allocated_plus_footprint": (alloc or 0) + fp})

    # ------------------------------------------------------------------ check 3
    def check3_torch(self):
        cap, chunk, fp = 8 * GiB, 256 * MiB, self.fp()
        lo = cap - fp - 512 * MiB
        variants = [("3a", "default", None), ("3b", "expandable_segments", "expandable_segments:True"),
                    ("3c", "cudaMallocAsync", "backend:cudaMallocAsync")]
        for cid, label, conf in variants:
            name = "PyTorch 8 GiB cap, %s" % label
            expected = "total 8192 MiB, OOM error at %s..8192 MiB" % mib(lo)
            try:
                extra = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
                r = self.fracgpu_run("c3_torch_%s" % label, "8GiB",
                                     [self.python, os.path.join(CLIENTS, "torch_cap.py"), "--chunk", str(chunk),
                                      "--max-bytes", str(2 * cap)], 75, extra_env=extra, name="c3-torch")
                o = r.json()
                if self.client_failed(cid, name, expected, r, o, "held_at_oom"):
                    continue
                held = as_int(o.get("held_at_oom"))
                measured = "total %s, %s at %s (reserved %s), usable after=%s" % (
                    mib(as_int(o.get("total"))), "OOM error" if o.get("oom_raised") else "NO OOM",
                    mib(held), mib(as_int(o.get("reserved_at_oom"))), o.get("usable_after"))
                self.judge(cid, name, expected, measured, [
                    ("exit status %s" % r.rc, r.rc == 0),
                    ("mem_get_info total != 8 GiB", as_int(o.get("total")) == cap),
                    ("torch.cuda.OutOfMemoryError not raised", o.get("oom_raised") is True),
                    ("held above the cap", held is not None and held <= cap),
                    ("held below cap - footprint - 512 MiB", held is not None and held >= lo),
                ], {"result": o, "footprint": fp, "cap_line_on_stderr": "memory cap" in r.stderr_text()})
            except Exception as exc:  # noqa: BLE001
                self.fail_row(cid, name, expected, "error: %s" % exc, {"traceback": traceback.format_exc()})

    # ------------------------------------------------------------------ check 4
    def check4_jax(self):
        name = "JAX default preallocation in an 8 GiB tenant"
        cap = 8 * GiB
        want = int(0.75 * cap)
        expected = "bytes_limit %s +-5%%, bytes_limit <= used <= 8192 MiB" % mib(want)
        self.ensure_broker()
        self.create_tenant("c4_create", "jax", "8GiB")
        ready = os.path.join(self.tmp, "jax.ready")
        release = os.path.join(self.tmp, "jax.release")
        env = self.tenant_env("jax", {"TF_CPP_MIN_LOG_LEVEL": "0"})
        p = self.start_bg("c4_jax", [self.python, os.path.join(CLIENTS, "jax_cap.py"), "--ready", ready,
                                     "--release", release, "--wait", "90"], env)
        try:
            got_ready = self.wait_for(lambda: os.path.exists(ready) or p.poll() is not None, 100, 0.1) \
                and os.path.exists(ready)
            st = self.status("c4_status") if got_ready else None
            stats = {}
            if got_ready:
                with open(ready, "r", encoding="utf-8") as f:
                    stats = json.load(f).get("memory_stats", {})
            with open(release, "w") as f:
                f.write("go\n")
            self.wait_for(lambda: p.poll() is not None, 60, 0.1)
        finally:
            self.stop_bg(p)
            self.delete_tenant("c4_delete", "jax")
        o, jerr = last_json_line(p.fracgpu_out)
        if not got_ready:
            return self.fail_row("4", name, expected, "JAX never got ready (rc %s): %s" % (
                p.returncode, " / ".join(tail(p.fracgpu_err, 3, 200))), {"result": o, "json_error": jerr})
        dev = self.tenant_device(st, "jax") or {}
        used = as_int(dev.get("memory_used"))
        limit = as_int(stats.get("bytes_limit"))
        measured = "bytes_limit %s, tenant used %s (peak %s)" % (mib(limit), mib(used),
                                                                  mib(as_int(dev.get("memory_peak"))))
        return self.judge("4", name, expected, measured, [
            ("JAX client not ok (%s)" % ((o or {}).get("error") or jerr or "see log"), bool(o and o.get("ok"))),
            ("bytes_limit not within 5% of 0.75 x 8 GiB", limit is not None and abs(limit - want) <= 0.05 * want),
            ("tenant used above 8 GiB", used is not None and used <= cap),
            ("tenant used below bytes_limit (preallocation not charged)",
             used is not None and limit is not None and used >= limit),
        ], {"result": o, "memory_stats": stats, "tenant_status": dev})

    # ------------------------------------------------------------------ check 5
    def check5_cupy(self):
        name = "CuPy 4 GiB cap"
        cap, chunk, fp = 4 * GiB, 128 * MiB, self.fp()
        lo = cap - fp - 256 * MiB
        expected = "OOM error, pool total %s..4096 MiB" % mib(lo)
        r = self.fracgpu_run("c5_cupy", "4GiB", [self.python, os.path.join(CLIENTS, "cupy_cap.py"), "--chunk",
                                                 str(chunk), "--max-bytes", str(2 * cap)], 60, name="c5-cupy")
        o = r.json()
        if self.client_failed("5", name, expected, r, o, "pool_total_bytes"):
            return None
        pool = as_int(o.get("pool_total_bytes"))
        measured = "%s, pool total %s (memGetInfo total %s)" % (
            "OOM error" if o.get("oom_raised") else "NO OOM", mib(pool), mib(as_int(o.get("total"))))
        return self.judge("5", name, expected, measured, [
            ("exit status %s" % r.rc, r.rc == 0),
            ("cupy OutOfMemoryError not raised", o.get("oom_raised") is True),
            ("pool above the cap", pool is not None and pool <= cap),
            ("pool below cap - footprint - 256 MiB", pool is not None and pool >= lo),
        ], {"result": o, "footprint": fp})

    # ------------------------------------------------------------------ check 6
    def check6_nvml_inside(self):
        smi = shutil.which("nvidia-smi", path=self.base_env.get("PATH")) or "nvidia-smi"
        name = "nvidia-smi inside a 6 GiB tenant"
        expected = "memory.total = 6144 MiB"
        try:
            r = self.fracgpu_run("c6_nvidia_smi", "6GiB", [smi, "--query-gpu=memory.total,memory.used",
                                                           "--format=csv,noheader,nounits"], 45, name="c6-smi")
            lines = []
            try:
                with open(r.out, "r", encoding="utf-8", errors="replace") as f:
                    lines = [ln.strip() for ln in f if ln.strip()]
            except OSError:
                pass
            total = used = None
            if lines:
                parts = [x.strip() for x in lines[0].split(",")]
                total = as_int(parts[0]) if parts else None
                used = as_int(parts[1]) if len(parts) > 1 else None
            self.judge("6a", name, expected, "total=%s MiB, used=%s MiB" % (total, used) if lines else
                       "no output: " + r.why(),
                       [("exit status %s" % r.rc, r.rc == 0), ("memory.total != 6144", total == 6144)],
                       {"stdout": lines[:4]})
        except Exception as exc:  # noqa: BLE001
            self.fail_row("6a", name, expected, "error: %s" % exc)

        name = "pynvml inside a 6 GiB tenant"
        expected = "nvmlDeviceGetMemoryInfo total = 6 GiB (v1 and v2)"
        r = self.fracgpu_run("c6_pynvml", "6GiB", [self.python, os.path.join(CLIENTS, "nvml_query.py"), "memory"],
                             45, name="c6-pynvml")
        o = r.json()
        if self.client_failed("6b", name, expected, r, o, "v1"):
            return None
        v1 = o.get("v1") or {}
        v2 = o.get("v2")
        measured = "v1 total=%s used=%s; v2 %s" % (
            mib(as_int(v1.get("total"))), mib(as_int(v1.get("used"))),
            ("total=%s used=%s" % (mib(as_int(v2.get("total"))), mib(as_int(v2.get("used"))))) if v2 else
            "n/a (%s)" % (o.get("v2_error") or "")[:60])
        conds = [("exit status %s" % r.rc, r.rc == 0), ("v1 total != 6 GiB", as_int(v1.get("total")) == 6 * GiB)]
        if v2 is not None:
            conds.append(("v2 total != 6 GiB", as_int(v2.get("total")) == 6 * GiB))
        return self.judge("6b", name, expected, measured, conds, {"result": o})

    # ------------------------------------------------------------------ check 7
    def check7_nvml_outside(self):
        hold = 3 * GiB
        cap, fp = 4 * GiB, self.fp()
        alloc = self.need_alloc()
        self.ensure_broker()
        self.create_tenant("c7_create", "held", "4GiB")
        p = self.start_bg("c7_holder", [alloc, "hold", "--bytes", str(hold)], self.tenant_env("held"))
        try:
            holding = self.wait_for(lambda: self.file_has(p.fracgpu_out, "holding") or p.poll() is not None, 45) \
                and self.file_has(p.fracgpu_out, "holding")
            q = self.run("c7_nvml_outside", [self.python, os.path.join(CLIENTS, "nvml_query.py"), "processes"],
                         self.base_env, 45) if holding else None
            st = self.status("c7_status") if holding else None
        finally:
            self.stop_bg(p)
            self.delete_tenant("c7_delete", "held")
        name_a = "NVML from outside: holder's usedGpuMemory"
        exp_a = "3072..4096 MiB"
        name_b = "broker status: tenant used"
        exp_b = "3 GiB + fp = %s +-128 MiB" % mib(hold + fp)
        if not holding:
            why = "holder never held 3 GiB (rc %s): %s" % (p.returncode, " / ".join(tail(p.fracgpu_err, 3, 200)))
            self.fail_row("7a", name_a, exp_a, why)
            return self.fail_row("7b", name_b, exp_b, why)
        o = q.json() if q else None
        procs = (o or {}).get("processes") or []
        match = [x for x in procs if x.get("pid") == p.pid]
        how = "pid %d" % p.pid
        if not match and procs:
            # Another PID namespace: take the biggest user of the GPU (the only one, normally).
            match = [max(procs, key=lambda x: (x.get("used") or 0) if (x.get("used") or 0) != NVML_NOT_AVAILABLE
                         else 0)]
            how = "pid %d not listed; biggest process (pid %s) taken" % (p.pid, match[0].get("pid"))
        used = as_int(match[0].get("used")) if match else None
        if used == NVML_NOT_AVAILABLE:
            used = None
        if q is None:
            self.fail_row("7a", name_a, exp_a, "NVML query not run")
        elif self.client_failed("7a", name_a, exp_a, q, o, "processes"):
            pass
        else:
            self.judge("7a", name_a, exp_a, "%s (%s)" % (mib(used), how), [
                ("holder not found in the process list", bool(match)),
                ("usedGpuMemory above 4 GiB", used is not None and used <= cap),
                ("usedGpuMemory below 3 GiB", used is not None and used >= hold),
            ], {"processes": procs, "holder_pid": p.pid, "matched_by": how, "device_memory": o.get("v1")})
        dev = self.tenant_device(st or {}, "held") or {}
        tused = as_int(dev.get("memory_used"))
        return self.judge("7b", name_b, exp_b, "used=%s" % mib(tused), [
            ("tenant used not within 128 MiB of 3 GiB + footprint",
             tused is not None and abs(tused - (hold + fp)) <= 128 * MiB),
        ], {"tenant_status": dev, "footprint": fp})

    # ------------------------------------------------------------------ check 8
    def nvsmi_used(self):
        """Physical memory in use on GPU 0 (bytes), from nvidia-smi outside any tenant."""
        r = self.run("nvsmi_used", ["nvidia-smi", "--id=0", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                     self.base_env, 20, quiet=True)
        try:
            with open(r.out, "r") as f:
                return int(f.read().split()[0]) * MiB
        except (OSError, ValueError, IndexError):
            return None

    def check8_overcommit(self):
        alloc = self.need_alloc()
        fp = self.fp()
        req_a, lim_a, req_b, lim_b = 90 * GiB, 100 * GiB, 40 * GiB, 60 * GiB
        self.ensure_broker()
        self.delete_all_tenants("c8_cleanup")
        st = self.status("c8_status0")
        gpu = (st.get("gpus") or [{}])[0]
        capacity = as_int(gpu.get("memory_capacity")) or as_int(gpu.get("memory_total"))
        if not capacity:
            raise RuntimeError("fracgpu status --json shows no GPU capacity")
        unguaranteed = capacity - req_a - req_b
        if unguaranteed < 0:
            raise RuntimeError("GPU capacity %s is below the 130 GiB of requests" % gib(capacity))
        exp_a = min(lim_a, req_a + unguaranteed) - fp
        exp_c = min(lim_b, req_b + unguaranteed) - fp
        base = {"capacity": capacity, "unguaranteed": unguaranteed, "footprint": fp,
                "a": {"limit": lim_a, "request": req_a}, "b": {"limit": lim_b, "request": req_b}}
        self.create_tenant("c8_create_a", "oc-a", "100GiB", "90GiB")
        self.create_tenant("c8_create_b", "oc-b", "60GiB", "40GiB")
        env_a, env_b = self.tenant_env("oc-a"), self.tenant_env("oc-b")
        holder = None  # A's holding process: stopped in `finally` whatever happens (it holds ~100 GiB)
        try:
            # (a) A alone: its request plus all of the unguaranteed memory (up to its limit).
            name = "overcommit (a): A fills alone"
            expected = "min(100, 90 + U) GiB - fp = %s +-2 GiB (U %s)" % (gib(exp_a), gib(unguaranteed))
            ra = self.run("c8a_fill_a", [alloc, "fill", "--chunk", str(GiB)], env_a, 120)
            oa = ra.json()
            a_fill = as_int((oa or {}).get("allocated"))
            if a_fill is None:
                self.fail_row("8a", name, expected, "no result: " + ((oa or {}).get("error") or ra.why()))
            else:
                self.judge("8a", name, expected, gib(a_fill), [
                    ("exit status %s" % ra.rc, ra.rc == 0),
                    ("refused_with %s" % oa.get("refused_with"), oa.get("refused_with") == "CUDA_ERROR_OUT_OF_MEMORY"),
                    ("not within 2 GiB", abs(a_fill - exp_a) <= 2 * GiB),
                ], dict(base, result=oa))

            # A keeps holding (what fit - 1 GiB); B then gets its guarantee plus what A left.
            name = "overcommit (b): B fills while A holds"
            a_used = None
            physical_used = None
            if a_fill is not None and a_fill > 2 * GiB:
                holder = self.start_bg("c8_hold_a", [alloc, "hold", "--bytes", str(a_fill - GiB)], env_a)
                holding = self.wait_for(lambda: self.file_has(holder.fracgpu_out, "holding") or
                                        holder.poll() is not None, 60) and self.file_has(holder.fracgpu_out, "holding")
                if holding:
                    a_used = as_int((self.tenant_device(self.status("c8_status_hold"), "oc-a") or {})
                                    .get("memory_used"))
                    physical_used = self.nvsmi_used()
            if a_used is None:
                why = "A is not holding (%s)" % ("(a) failed" if a_fill is None else
                                                 "rc %s: %s" % (holder.returncode if holder else "-",
                                                                " / ".join(tail(holder.fracgpu_err, 3, 200))
                                                                if holder else ""))
                self.fail_row("8b", name, "40 GiB - footprint + lendable memory A left", why, base)
            else:
                a_burst = max(0, a_used - req_a)
                left_over = max(0, unguaranteed - a_burst)
                exp_b = min(lim_b, req_b + left_over) - fp
                expected = "40 GiB - fp + (U - A burst %s) = %s -1.5/+0.25" % (gib(a_burst), gib(exp_b))
                rb = self.run("c8b_fill_b", [alloc, "fill", "--chunk", str(256 * MiB)], env_b, 120)
                ob = rb.json()
                b1 = as_int((ob or {}).get("allocated"))
                if b1 is None:
                    self.fail_row("8b", name, expected, "no result: " + ((ob or {}).get("error") or rb.why()))
                else:
                    self.judge("8b", name, expected, "%s (A holds %s)" % (gib(b1), gib(a_used)), [
                        ("exit status %s" % rb.rc, rb.rc == 0),
                        ("refused_with %s" % ob.get("refused_with"),
                         ob.get("refused_with") == "CUDA_ERROR_OUT_OF_MEMORY"),
                        ("below the model by more than 1.5 GiB", b1 >= exp_b - 1.5 * GiB),
                        ("above the model: B borrowed memory A holds", b1 <= exp_b + 256 * MiB),
                    ], dict(base, result=ob, a_used=a_used, a_burst=a_burst, lendable_left=left_over,
                            nominal_expected=req_b - fp, physical_used_while_a_holds=physical_used))
            if holder is not None:
                self.stop_bg(holder)
                holder = None

            # (c) A gone: B bursts into all of the unguaranteed memory.
            name = "overcommit (c): B fills after A is gone"
            expected = "min(60, 40 + U) GiB - fp = %s +-2 GiB" % gib(exp_c)
            released = self.wait_for(lambda: (as_int((self.tenant_device(self.status("c8_status_free"), "oc-a") or {})
                                                     .get("memory_used")) or 0) == 0, 15, 0.5)
            self.wait_for(lambda: (self.nvsmi_used() or 0) < 8 * GiB, 20, 0.5)
            time.sleep(2.0)
            rc_ = self.run("c8c_fill_b", [alloc, "fill", "--chunk", str(256 * MiB)], env_b, 120)
            oc = rc_.json()
            b2 = as_int((oc or {}).get("allocated"))
            if b2 is None:
                self.fail_row("8c", name, expected, "no result: " + ((oc or {}).get("error") or rc_.why()))
            else:
                self.judge("8c", name, expected, gib(b2), [
                    ("exit status %s" % rc_.rc, rc_.rc == 0),
                    ("refused_with %s" % oc.get("refused_with"), oc.get("refused_with") == "CUDA_ERROR_OUT_OF_MEMORY"),
                    ("A's memory not released in the broker within 15 s", released),
                    ("not within 2 GiB", abs(b2 - exp_c) <= 2 * GiB),
                ], dict(base, result=oc))
        finally:
            if holder is not None:
                self.stop_bg(holder)
            self.delete_tenant("c8_delete_a", "oc-a")
            self.delete_tenant("c8_delete_b", "oc-b")

    # ------------------------------------------------------------------ check 9
    def check9_routes(self):
        alloc = self.need_alloc()
        results = None
        used_bytes = None
        tries = []
        for size in (256 * MiB, 64 * MiB):
            r = self.fracgpu_run("c9_routes_%dMiB" % (size // MiB), "4GiB", [alloc, "routes", "--bytes", str(size)],
                                 60, name="c9-routes")
            o = r.json()
            tries.append({"bytes": size, "rc": r.rc, "result": o})
            if o is not None and r.rc == 0 and "error" not in o:
                results, used_bytes = o, size
                break
            if size != 64 * MiB:
                self.notes.append("routes at %s failed (%s); retried at 64 MiB (a 1024 x %d mipmapped array may "
                                  "exceed the device's 2D mipmap limit)" % (
                                      mib(size), (o or {}).get("error") or r.why(), size // 4096))
        print("  routes JSON: %s" % json.dumps(results if results is not None else tries[-1].get("result")),
              flush=True)
        if results is None:
            return self.fail_row("9", "routes", "every route charged and released",
                                 "no usable JSON: %s" % (tries[-1]["result"] or {}).get("error", "see logs"),
                                 {"tries": tries})
        for route, pair in results.items():
            need = 100 * MiB if route == "cuCtxCreate" else int(0.95 * used_bytes)
            charged = as_int(pair[0]) if isinstance(pair, list) and pair else None
            after = as_int(pair[1]) if isinstance(pair, list) and len(pair) > 1 else None
            self.judge("9", "route %s (%s)" % (route, mib(used_bytes)), "charged >= %s, after 0" % mib(need),
                       "charged %s, after %s" % (mib(charged), after), [
                           ("charged too little", charged is not None and charged >= need),
                           ("not released", after == 0),
                       ], {"pair": pair, "bytes": used_bytes})
        if len(results) < 9:
            self.fail_row("9", "routes count", "9 routes", "%d routes in the JSON" % len(results))

    # ------------------------------------------------------------------ driver
    def guarded(self, cid, name, fn):
        t0 = time.time()
        print("== check %s: %s (%.0fs left)" % (cid, name, self.left()), flush=True)
        if self.left() < 5:
            self.row(cid, name, "-", "skipped: time budget used up", False, {}, ["skipped"])
            return
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one check's failure is its row, not the batch's
            traceback.print_exc()
            # A row of its own: the check's remaining parts did not run, which is a failure.
            self.fail_row(cid, name + " (stopped)", "-", "error: %s" % str(exc)[:300],
                          {"traceback": traceback.format_exc()})
        print("   (%.1fs)" % (time.time() - t0), flush=True)

    def cleanup(self):
        for p in list(self.bg):
            try:
                self.stop_bg(p)
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    def environment(self):
        env = {"bin": self.bin, "python": self.python, "repo": REPO, "footprint": self.footprint,
               "footprint_source": self.footprint_source, "budget_s": self.args.budget,
               "LD_LIBRARY_PATH_of_caller": self.orig_ld}
        for name in ("fracgpu", "fracgpu-broker", "libfracgpu.so"):
            path = os.path.join(self.bin, name)
            env[name] = os.path.getsize(path) if os.path.exists(path) else "missing"
        try:
            env["repo_commit"] = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                                                text=True, timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001
            env["repo_commit"] = "unknown"
        return env

    def report(self):
        order = {c: i for i, c in enumerate(["0", "1", "2", "3a", "3b", "3c", "4", "5", "6a", "6b", "7a", "7b",
                                             "8a", "8b", "8c", "9"])}
        rows = sorted(self.rows, key=lambda r: order.get(r["id"], 99))
        judged = [r for r in rows if r["pass"] is not None]
        passed = bool(judged) and all(r["pass"] for r in judged)
        header = ("#", "check", "expected", "measured", "pass")
        cells = [header] + [(r["id"], r["name"], r["expected"], r["measured"],
                             {True: "PASS", False: "FAIL", None: "info"}[r["pass"]]) for r in rows]
        cells = [tuple(str(c)[:110] for c in row) for row in cells]
        widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
        lines = ["fracgpu memory-quota checks on %s (context footprint %s, from %s)" % (
            (self.broker_gpu or {}).get("name", "GPU 0"), mib(self.fp()), self.footprint_source)]
        lines.append(" | ".join(cells[0][i].ljust(widths[i]) for i in range(len(header))))
        lines.append("-+-".join("-" * w for w in widths))
        for row in cells[1:]:
            lines.append(" | ".join(row[i].ljust(widths[i]) for i in range(len(header))))
        failed = [r for r in rows if r["pass"] is False]
        if failed:
            lines.append("failures:")
            for r in failed:
                lines.append("  [%s] %s: %s" % (r["id"], r["name"], "; ".join(r["problems"])[:400]))
        for n in self.notes:
            lines.append("note: " + n[:400])
        lines.append("RESULT: %s (%d/%d pass/fail checks passed, %.0fs)" % (
            "PASS" if passed else "FAIL", sum(1 for r in judged if r["pass"]), len(judged), time.time() - self.start))
        text = "\n".join(lines)
        summary = {"passed": passed, "rows": rows, "notes": self.notes, "table": lines,
                   "environment": self.environment(), "elapsed_s": round(time.time() - self.start, 1)}
        return passed, text, summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--budget", type=float, default=250)
    ap.add_argument("--python", default=sys.executable or "python3")
    args = ap.parse_args(argv)

    def terminated(signum, frame):
        raise SystemExit("terminated by signal %d" % signum)

    signal.signal(signal.SIGTERM, terminated)
    c = Checks(args)
    passed, text, summary = False, "", {}
    try:
        for name in ("fracgpu", "libfracgpu.so"):
            if not os.path.exists(os.path.join(c.bin, name)):
                c.notes.append("%s is missing from %s" % (name, c.bin))
        print("== build alloc_client", flush=True)
        c.build()
        c.guarded("0", "nvml layout", c.check0_nvml_layout)
        c.guarded("1", "context footprint", c.check1_footprint)
        c.guarded("2", "C++ 4 GiB cap", c.check2_cpp_cap)
        c.guarded("9", "routes", c.check9_routes)
        c.guarded("6", "NVML inside a tenant", c.check6_nvml_inside)
        c.guarded("7", "NVML from outside", c.check7_nvml_outside)
        c.guarded("8", "overcommit", c.check8_overcommit)
        c.guarded("5", "CuPy", c.check5_cupy)
        c.guarded("3", "PyTorch", c.check3_torch)
        c.guarded("4", "JAX", c.check4_jax)
    except BaseException as exc:  # noqa: BLE001 - still write what we have
        traceback.print_exc()
        c.notes.append("runner stopped early: %s: %s" % (type(exc).__name__, exc))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the report be written
        for cid, name in (("0", "nvml layout"), ("1", "context footprint"), ("2", "C++ 4 GiB cap"),
                          ("3", "PyTorch"), ("4", "JAX"), ("5", "CuPy"), ("6", "NVML inside"),
                          ("7", "NVML outside"), ("8", "overcommit"), ("9", "routes")):
            if not any(r["id"].startswith(cid) for r in c.rows):
                c.row(cid, name, "-", "did not run", False, {}, ["no result"])
        try:
            c.stop_broker()
        except Exception as exc:  # noqa: BLE001
            c.notes.append("stopping the broker: %s" % exc)
        c.cleanup()
        passed, text, summary = c.report()
        print(text, flush=True)
        with open(args.summary, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1, sort_keys=True, default=str)
            f.write("\n")
        with open(args.table, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
