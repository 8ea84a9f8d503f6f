"""The machine a GPU script runs on: a real NVIDIA GPU or fracgpu's simulated one (fakecuda),
the build's binaries (a build tree: bin/, lib/libfracgpu.so, fakecuda/, fakenvml/; or a
tools/pack_devrun.sh tree: bin/ with libfracgpu.so and deps/), the environment of a tenant
process for each way of sharing (native, MPS, fracgpu, HAMi-core), what the machine is
(GPU, driver, CUDA, clocks), and the independent witness of GPU time: NVML's per-process
utilisation and SM clock on a real GPU, the simulated device's per-process busy time on
fakecuda. Reads the GPU's state only; never changes a setting."""
import ctypes
import json
import os
import shutil
import threading
import time

from .procs import child_env, run


def _first(*paths):
    for p in paths:
        if p and os.path.exists(p):
            return os.path.abspath(p)
    return None


class Platform:
    def __init__(self, build, work, kind="auto", sim_memory="16GiB"):
        self.build = os.path.abspath(build)
        b = self.build
        self.fracgpu = _first(os.path.join(b, "bin", "fracgpu"))
        self.shim = _first(os.path.join(b, "bin", "libfracgpu.so"), os.path.join(b, "lib", "libfracgpu.so"))
        self.deps = _first(os.path.join(b, "bin", "deps"))
        self.fake_dir = _first(os.path.join(b, "fakecuda"))
        self.fake_nvml = _first(os.path.join(b, "fakenvml", "libnvidia-ml.so.1"))
        self.fake_ctl = _first(os.path.join(b, "bin", "fakecuda-ctl"))
        if kind == "auto":
            rc = run(["nvidia-smi", "-L"], child_env(), 20)[0] if shutil.which("nvidia-smi") else 1
            kind = "real" if rc == 0 else "sim"
        self.kind = kind
        self.sim = kind == "sim"
        self.work = work
        self.shm = "/fgbench-%d" % os.getpid()
        self.sim_memory = sim_memory
        if self.sim and not (self.fake_dir and self.fake_ctl):
            raise RuntimeError("simulated GPU asked for but %s has no fakecuda/ and bin/fakecuda-ctl" % b)

    # ------------------------------------------------------------ environments
    def base_env(self):
        """A tenant's environment before any sharing mechanism is added."""
        extra = {}
        if self.sim:
            extra = {"LD_LIBRARY_PATH": self.fake_dir, "FAKECUDA_SHM_NAME": self.shm,
                     "FAKECUDA_MEMORY": self.sim_memory, "FAKECUDA_CONTEXT_FOOTPRINT": "64MiB",
                     "FRACGPU_REAL_DRIVER": os.path.join(self.fake_dir, "libcuda.so.1")}
        return child_env(extra)

    def env(self, mode, socket=None, mps=None, percent=None, hami=None, memory=None, extra=None, hami_cache=None):
        """mode: native | mps (mps: an Mps, percent) | frac (socket) | shim (no tenant) | hami (hami: the
        libvgpu.so path, percent: SM limit, memory: e.g. '8g', hami_cache: the file of the
        HAMi-core "container" this process belongs to: HAMi-core keeps one shared region per
        such file, and the first process of a region sets its limits for all the others, so
        each HAMi-core tenant needs its own)."""
        e = self.base_env()
        if mode == "mps":
            e.update(mps.client_env(percent))
        elif mode == "frac":
            e["LD_PRELOAD"] = self.shim
            e["FRACGPU_SOCKET"] = socket
        elif mode == "shim":  # preloaded with no tenant to join: every hook only forwards
            e["LD_PRELOAD"] = self.shim
        elif mode == "hami":
            e["LD_PRELOAD"] = hami
            if percent is not None:
                e["CUDA_DEVICE_SM_LIMIT"] = str(percent)
            if memory:
                e["CUDA_DEVICE_MEMORY_LIMIT"] = memory
            if hami_cache:
                e["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = hami_cache
        e.update(extra or {})
        return e

    def broker_env(self):
        e = self.base_env()
        e["FRACGPU_SHIM"] = self.shim or ""
        return e

    def broker_flags(self):
        if self.sim:
            flags = ["--driver", os.path.join(self.fake_dir, "libcuda.so.1"), "--context-footprint", "auto"]
            if self.fake_nvml:
                flags += ["--nvml", self.fake_nvml]
            return flags
        return []

    def cleanup(self):
        if self.sim and self.fake_ctl:
            run([self.fake_ctl, "destroy"], self.base_env(), 10)

    # ------------------------------------------------------------ the machine
    def machine(self):
        if self.sim:
            rc, out, _ = run([self.fake_ctl, "status"], self.base_env(), 10)
            try:
                dev = json.loads(out)["devices"][0]
            except (ValueError, KeyError, IndexError):
                dev = {}
            return {"kind": "simulated", "gpu": "fracgpu simulated GPU (fakecuda)", "driver": "fakecuda",
                    "cuda": None, "memory_total_mib": dev.get("capacity_bytes", 0) // (1 << 20),
                    "clocks": None, "timeslice_us": None}
        q = "name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,compute_mode"
        rc, out, _ = run(["nvidia-smi", "--query-gpu=" + q, "--format=csv,noheader,nounits", "-i", "0"], child_env(), 30)
        vals = [v.strip() for v in out.strip().split(",")] if rc == 0 else []
        info = dict(zip(q.split(","), vals))
        rc, head, _ = run(["nvidia-smi"], child_env(), 30)
        cuda = None
        for tok in head.split("CUDA Version:")[1:2]:
            cuda = tok.split()[0]
        return {"kind": "real", "gpu": info.get("name"), "driver": info.get("driver_version"), "cuda": cuda,
                "memory_total_mib": _num(info.get("memory.total")), "compute_mode": info.get("compute_mode"),
                "clocks": {"sm_mhz": _num(info.get("clocks.sm")), "sm_max_mhz": _num(info.get("clocks.max.sm")),
                           "mem_mhz": _num(info.get("clocks.mem"))},
                "power_w": _num(info.get("power.draw")), "power_limit_w": _num(info.get("power.limit")),
                "temperature_c": _num(info.get("temperature.gpu"))}

    def witness(self, period=0.1):
        """A started Witness (per-process GPU time and the SM clock, sampled every period),
        returned once it has taken its first sample (at most 2 s), so that a short window
        that starts right after is covered from its start."""
        w = Witness(self, period)
        w.start()
        w.first.wait(2.0)
        return w


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class _NvmlSample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class Witness(threading.Thread):
    """Samples, independently of fracgpu: on fakecuda each process's busy_us (fakecuda-ctl);
    on a real GPU NVML's per-process SM utilisation samples, the GPU's utilisation and its
    SM clock. gpu_share(pid, a, b) is that process's fraction of GPU time in [a, b]."""

    def __init__(self, platform, period):
        super().__init__(daemon=True)
        self.pf, self.period = platform, period
        self.samples = []  # (t, {pid: busy_us}) on sim; (t, gpu_util, sm_mhz) on real
        self.proc_util = []  # real: (t_sample_s, pid, sm_util_pct)
        self.error = None
        self._halt = threading.Event()
        self.first = threading.Event()
        self._nvml = None

    _NVML = None  # (library, device handle): nvmlInit once per run, it takes long on a big GPU

    def _open_nvml(self):
        if Witness._NVML is None:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                raise RuntimeError("nvmlInit_v2 failed")
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) != 0:
                raise RuntimeError("nvmlDeviceGetHandleByIndex_v2 failed")
            Witness._NVML = (lib, h)
        self._nvml, self._h = Witness._NVML
        # Only samples from now on: older ones belong to earlier windows.
        self._last = ctypes.c_ulonglong(int(time.time() * 1e6))

    def _sample_real(self):
        lib, h = self._nvml, self._h

        class Util(ctypes.Structure):
            _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]
        u, mhz = Util(), ctypes.c_uint(0)
        lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(u))
        lib.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(mhz))  # NVML_CLOCK_SM
        self.samples.append((time.time(), u.gpu, mhz.value))
        n = ctypes.c_uint(0)
        lib.nvmlDeviceGetProcessUtilization(h, None, ctypes.byref(n), self._last)
        if n.value:
            arr = (_NvmlSample * (n.value + 8))()
            n = ctypes.c_uint(n.value + 8)
            if lib.nvmlDeviceGetProcessUtilization(h, arr, ctypes.byref(n), self._last) == 0:
                for s in arr[:n.value]:
                    if s.timeStamp > self._last.value:
                        self.proc_util.append((s.timeStamp / 1e6, s.pid, s.smUtil))
                newest = max([s.timeStamp for s in arr[:n.value]] + [self._last.value])
                self._last = ctypes.c_ulonglong(newest)

    def _sample_sim(self):
        rc, out, _ = run([self.pf.fake_ctl, "status"], self.pf.base_env(), 5)
        try:
            dev = json.loads(out)["devices"][0]
        except (ValueError, KeyError, IndexError):
            return
        self.samples.append((time.time(), {p["pid"]: p["busy_us"] for p in dev.get("processes", [])}))

    def run(self):
        try:
            if not self.pf.sim:
                self._open_nvml()
        except (OSError, RuntimeError, AttributeError) as e:
            self.error = "NVML: %s" % e
            self.first.set()
            return
        while not self._halt.is_set():
            try:
                self._sample_sim() if self.pf.sim else self._sample_real()
            except Exception as e:  # noqa: BLE001 - a witness failure is reported, not fatal
                self.error = "%s: %s" % (type(e).__name__, e)
            self.first.set()
            self._halt.wait(self.period)

    def stop(self):
        self._halt.set()
        self.join(5)

    def gpu_share(self, pid, a, b):
        """Fraction of [a, b] during which process pid held the GPU (None if unknown)."""
        if self.pf.sim:
            inside = [(t, m) for t, m in self.samples if a <= t <= b]
            if len(inside) < 2:
                return None
            (t0, m0), (t1, m1) = inside[0], inside[-1]
            return (m1.get(pid, 0) - m0.get(pid, 0)) / 1e6 / (t1 - t0) if t1 > t0 else None
        xs = [u for t, p, u in self.proc_util if p == pid and a <= t <= b]
        return sum(xs) / len(xs) / 100.0 if xs else None

    def gpu_util(self, a, b):
        if self.pf.sim:
            return None
        xs = [u for t, u, _ in self.samples if a <= t <= b]
        return sum(xs) / len(xs) / 100.0 if xs else None

    def sm_clock(self, a, b):
        if self.pf.sim:
            return None
        xs = [m for t, _, m in self.samples if a <= t <= b]
        return sum(xs) / len(xs) if xs else None
