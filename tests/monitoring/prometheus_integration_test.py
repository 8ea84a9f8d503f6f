#!/usr/bin/env python3
"""ctest monitoring_prometheus_integration: fracgpu's metrics through a real Prometheus.

Starts the real fracgpu-broker over the simulated GPU (fakecuda's libcuda.so.1 with 4 GiB,
and its NVML for the audit) with --metrics-listen on a free port; a real Prometheus
(/usr/bin/prometheus: a temporary config scraping the broker every second, temporary
storage, fracgpu-rules.yaml loaded, rules evaluated every second); then three tenants
through the real CLI (`fracgpu run`): "t70" and "t30", compute weights 70 and 30, each
running a saturating fracgpu-spin-client, and "fill", which allocates device memory past
its guaranteed request (burst requests) until its cap refuses it, and holds what fit.
t70 is given a Kubernetes identity (namespace ml, pod llm-0, container server) through the
broker's admin socket, as the device plugin does. After ~10 s of scrapes it asks
Prometheus's HTTP API:
  - every series of k8s/monitoring/metric-names.txt exists, per tenant with tenant, gpu and
    gpu_uuid labels (the GPU's UUID) and t70's pod labels (none on the others), per GPU
    with gpu and gpu_uuid;
  - fracgpu_memory_limit_bytes and _request_bytes are each tenant's cap and request, and
    fill's refusal and burst-request counters rose while Prometheus watched;
  - avg_over_time(fracgpu_compute_share_ratio[6s]) is 0.55..0.85 for t70, 0.15..0.45 for t30;
  - rate(fracgpu_compute_held_seconds_total[5s]) per tenant, and summed, is the GPU time the
    simulated device measured for the tenant's processes (fakecuda-ctl status), +-0.1;
  - every rule of fracgpu-rules.yaml evaluated without error, every record has values
    (the per-pod ones for t70's pod alone), "fill" is at its cap (FracgpuTenantMemoryAtCap
    pending) and refused (FracgpuTenantAllocationsRefused firing), and the compute tenants
    raise neither;
  - each prometheus-adapter rule's query, filled in as the adapter would for t70's pod,
    gives that pod one value (fracgpu_compute_share: t70's measured share).
Every process it starts runs in its own process group and dies with this script
(PR_SET_PDEATHSIG; the tenants' clients with their `fracgpu run`, through setpriv); all
are stopped, and the temporary directory removed, on any exit but SIGKILL.
Every wait has a deadline, and the whole run one (--budget, 55 s). With --sanitized (the
sanitizer builds: every process several times slower, and unevenly) the compute shares and
held-seconds rates are printed, not judged; everything else is.

--keep-for SECONDS leaves everything running that long after the checks (the load goes
on) and prints Prometheus's URL and the time range, for tools/render_dashboard.py.
Prints one line per problem and exits 1 if there is any.
"""
import argparse
import contextlib
import json
import os
import pathlib
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from check_monitoring import read_metric_names  # noqa: E402
from prometheus_harness import Failure, Processes, Prometheus, free_port, http_get, wait_for  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
GiB, MiB = 1 << 30, 1 << 20
# name -> (compute weight, memory cap, guaranteed memory, program). Caps above the simulated
# GPU's 300 MiB context footprint. "fill" fills its cap in 8 MiB chunks, asking the broker
# for burst memory above its 384 MiB request, once Prometheus has scraped its counters at 0
# (Harness.release_fill), so that Prometheus sees them rise.
TENANTS = {"t70": (70, GiB, GiB, "spin"), "t30": (30, 768 * MiB, 768 * MiB, "spin"),
           "fill": (1, 512 * MiB, 384 * MiB, "fill")}
SHARE_BOUNDS = {"t70": (0.55, 0.85), "t30": (0.15, 0.45)}
POD_LABELS = ("namespace", "pod", "container")
# t70 is given the Kubernetes identity the device plugin would set (admin "update" with a
# "pod" object); the others stay tenants outside Kubernetes, without pod labels.
PODS = {"t70": {"namespace": "ml", "pod": "llm-0", "container": "server"}}


def has_current_pod_labels(metric):
    want = PODS.get(metric.get("tenant"), {}) if "tenant" in metric else {}
    return all(metric.get(k, "") == want.get(k, "") for k in POD_LABELS)


class Harness:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.run_dir = work / "run"
        self.processes = Processes(work)
        self.shm_name = f"/fracgpu-prom-{os.getpid()}"
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("FRACGPU_", "FAKECUDA_")) and k != "LD_PRELOAD"}
        self.env = dict(base, FAKECUDA_SHM_NAME=self.shm_name, FAKECUDA_MEMORY="4GiB",
                        FRACGPU_RUN_DIR=str(self.run_dir), FRACGPU_SHIM=args.shim,
                        FRACGPU_REAL_DRIVER=args.fake_driver)
        self.metrics_port = free_port()
        self.prometheus = None
        self.problems = []

    def values(self, expr, at=None):
        """{tenant: value}, leaving out a tenant's series from before it got its pod labels
        (range functions still see them for a while)."""
        return self.prometheus.values(expr, at, keep=has_current_pod_labels)

    def check(self, ok, message):
        if not ok:
            self.problems.append(message)
        return ok

    def figure(self, ok, message):
        """A check of a measured share or rate: with --sanitized (a sanitizer build, several
        times slower and uneven) it is printed, not judged."""
        if self.args.sanitized:
            if not ok:
                print(f"not judged (--sanitized): {message}")
            return ok
        return self.check(ok, message)

    # --- starting things -----------------------------------------------------------------

    def start_broker(self):
        ready_read, ready_write = os.pipe()
        argv = [self.args.broker, "--run-dir", str(self.run_dir), "--state-dir", str(self.work / "state"),
                "--driver", self.args.fake_driver, "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
                "--ready-fd", str(ready_write), "--log-level", "info"]
        if self.args.fake_nvml:
            argv += ["--nvml", self.args.fake_nvml, "--audit-interval", "500"]
        broker = self.processes.start("broker", argv, self.env, pass_fds=(ready_write,))
        os.close(ready_write)
        ready, _, _ = select.select([ready_read], [], [], 15)
        byte = os.read(ready_read, 1) if ready else b""
        os.close(ready_read)
        if not byte:
            raise Failure(f"the broker did not become ready (exit {broker.poll()}):\n{self.processes.log('broker')}")
        wait_for("the broker's /healthz", lambda: http_get(
            f"http://127.0.0.1:{self.metrics_port}/healthz")[0] == 200, 10)

    def start_tenants(self, seconds):
        for name, (weight, memory, request, program) in TENANTS.items():
            if program == "spin":
                command = [self.args.spin_client, "--kernel-us", "1000", "--seconds", str(seconds)]
            else:
                # Waits (30 s at most) for the go file, then becomes the client.
                wait = 'i=0; while [ ! -e "$0" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; exec "$@"'
                command = ["/bin/sh", "-c", wait, str(self.work / "fill.go"),
                           self.args.alloc_client, "fill", "--chunk", str(8 * MiB), "--hold", "1"]
            # setpriv: the client dies with its `fracgpu run` too (which dies with us).
            argv = [self.args.cli, "run", "--run-dir", str(self.run_dir), "--name", name, "--gpu", "0",
                    "--memory", f"{memory // MiB}MiB", "--memory-request", f"{request // MiB}MiB",
                    "--compute", str(weight), "--",
                    self.args.setpriv, "--pdeathsig", "KILL", "--"] + command
            self.processes.start(name, argv, self.env)

        def running():
            self.processes.expect_running(TENANTS)
            tenants = self.tenants()
            return len(tenants) == len(TENANTS) and all(t["processes"] for t in tenants.values())
        wait_for("all tenants to run a registered process", running, 20)

    def admin(self, request):
        """One request on the broker's admin socket (a JSON line each way)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.run_dir / "admin.sock"))
            s.sendall(json.dumps(request).encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                reply += chunk
        reply = json.loads(reply or b"{}")
        if not reply.get("ok"):
            raise Failure(f"the broker refused {request}: {reply}")
        return reply

    def label_pods(self):
        for tenant, pod in PODS.items():
            self.admin({"op": "update", "tenant": {"name": tenant, "pod": pod}})

    def release_fill(self):
        """Lets "fill" allocate once Prometheus holds its counters (Prometheus's first scrape
        comes a few seconds after it starts), then waits until it holds its cap."""
        wait_for("Prometheus to scrape the fill tenant", lambda: self.prometheus.query(
            'fracgpu_memory_allocation_refusals_total{tenant="fill"} == 0'), 20)
        (self.work / "fill.go").touch()
        wait_for("fill to reach its cap", lambda: self.prometheus.query(
            'fracgpu_memory_allocation_refusals_total{tenant="fill"} > 0'), 15)

    def tenants(self):
        """The broker's view ({name: status}) through `fracgpu status --json`."""
        result = subprocess.run([self.args.cli, "status", "--json", "--run-dir", str(self.run_dir)], env=self.env,
                                capture_output=True, text=True, timeout=10)
        if result.returncode != 0:
            return {}
        return {t["name"]: t for t in json.loads(result.stdout).get("tenants", [])}

    def start_prometheus(self):
        port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(pathlib.Path(self.args.rules).resolve())],
            "scrape_configs": [{"job_name": "fracgpu-broker",
                                "static_configs": [{"targets": [f"127.0.0.1:{self.metrics_port}"]}]}],
        }
        (self.work / "prometheus.yml").write_text(yaml.safe_dump(config))
        argv = [self.args.prometheus, f"--config.file={self.work / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn"]
        self.processes.start("prometheus", argv, self.env)
        self.prometheus = Prometheus(f"http://127.0.0.1:{port}")
        wait_for("Prometheus to be ready", lambda: http_get(f"{self.prometheus.url}/-/ready")[0] == 200, 15)

    # --- measuring ---------------------------------------------------------------------

    def device_busy(self):
        """(Unix time, {tenant: busy seconds of its processes}, the device's busy seconds)."""
        result = subprocess.run([self.args.fakecuda_ctl, "status"], env=self.env, capture_output=True, text=True,
                                timeout=10)
        at = time.time()
        device = json.loads(result.stdout)["devices"][0]
        by_pid = {p["pid"]: p["busy_us"] / 1e6 for p in device["processes"]}
        busy = {name: sum(by_pid.get(p["pid"], 0.0) for p in t["processes"]) for name, t in self.tenants().items()}
        return at, busy, device["busy_us"] / 1e6

    def wait_for_scrapes(self, seconds, busy_window=5):
        """Until Prometheus holds `seconds` (> busy_window) of both compute tenants' shares;
        returns the simulated device's busy figures over the last busy_window s of that time."""
        def scraped(count):
            counts = self.values(f"count_over_time(fracgpu_compute_share_ratio[{seconds}s])")
            self.processes.expect_running(TENANTS)
            return all(counts.get(name, 0) >= count for name in SHARE_BOUNDS)
        wait_for(f"{seconds - busy_window} s of scrapes", lambda: scraped(seconds - busy_window), seconds + 15, 0.5)
        before = self.device_busy()
        wait_for(f"{seconds} s of scrapes", lambda: scraped(seconds), busy_window + 10, 0.5)
        time.sleep(max(0.0, before[0] + busy_window - time.time()))
        after = self.device_busy()
        window = after[0] - before[0]
        per_tenant = {name: (after[1].get(name, 0) - before[1].get(name, 0)) / window for name in after[1]}
        return after[0], per_tenant, (after[2] - before[2]) / window

    # --- checks ------------------------------------------------------------------------

    def check_series(self):
        metrics = read_metric_names(pathlib.Path(self.args.metric_names))
        gpus = self.prometheus.query("fracgpu_gpu_memory_total_bytes")
        if not self.check(len(gpus) == 1, f"expected one GPU's fracgpu_gpu_memory_total_bytes, got {gpus}"):
            return
        gpu = gpus[0]["metric"]
        uuid = gpu.get("gpu_uuid", "")
        self.check(uuid.startswith("GPU-") and gpu.get("gpu") == "0", f"the GPU's labels: {gpu}")
        for name, (kind, scope, optional) in metrics.items():
            series_name = f"{name}_bucket" if kind == "histogram" else name
            series = self.prometheus.query(series_name)
            if not series:
                self.check(optional, f"no series {series_name} in Prometheus")
                continue
            if kind == "histogram":
                for suffix in ("_sum", "_count"):
                    self.check(bool(self.prometheus.query(name + suffix)), f"no series {name}{suffix}")
            labels = [s["metric"] for s in series]
            if scope == "tenant":
                found = {m.get("tenant") for m in labels}
                self.check(set(TENANTS) <= found, f"{name}: series for tenants {sorted(found)}, "
                                                  f"want {sorted(TENANTS)}")
                for m in labels:
                    self.check(m.get("gpu") == "0" and m.get("gpu_uuid") == uuid,
                               f"{name}: labels {m}, want gpu 0 and gpu_uuid {uuid}")
                    want = PODS.get(m.get("tenant"), {})
                    self.check(has_current_pod_labels(m),
                               f"{name}: pod labels {m}, want {want or 'none (outside Kubernetes)'}")
                    if name == "fracgpu_audit_violations_total":
                        self.check(bool(m.get("kind")), f"{name}: no kind label: {m}")
            elif scope == "gpu":
                for m in labels:
                    self.check(m.get("gpu") == "0" and m.get("gpu_uuid") == uuid and "tenant" not in m,
                               f"{name}: labels {m}, want gpu 0, gpu_uuid {uuid}, no tenant")
        self.check(self.values("fracgpu_broker_up") == {"": 1.0}, "fracgpu_broker_up is not 1")
        info = self.prometheus.query("fracgpu_build_info")
        self.check(len(info) == 1 and info[0]["metric"].get("version"), f"fracgpu_build_info: {info}")

    def check_values(self, at, busy_by_tenant, device_busy):
        limits = self.values("fracgpu_memory_limit_bytes")
        for name, (_, memory, _, _) in TENANTS.items():
            self.check(limits.get(name) == memory, f"{name}: fracgpu_memory_limit_bytes {limits.get(name)}, "
                                                   f"want its cap {memory}")
        shares = self.values("avg_over_time(fracgpu_compute_share_ratio[6s])", at)
        for name, (low, high) in SHARE_BOUNDS.items():
            share = shares.get(name, -1)
            self.figure(low <= share <= high, f"{name}: average fracgpu_compute_share_ratio {share:.3f}, "
                                             f"want {low}..{high}")
        held = self.values("rate(fracgpu_compute_held_seconds_total[5s])", at)
        total = sum(held.values())
        print(f"shares {shares}; held per second {held}; the device measured {busy_by_tenant}, busy {device_busy:.3f}")
        for name in SHARE_BOUNDS:
            self.figure(abs(held.get(name, -1) - busy_by_tenant.get(name, 0)) <= 0.1,
                       f"{name}: rate(fracgpu_compute_held_seconds_total[5s]) {held.get(name)}, the simulated "
                       f"device measured {busy_by_tenant.get(name, 0):.3f} s/s")
        self.figure(abs(total - device_busy) <= 0.1, f"the tenants' held seconds sum to {total:.3f} s/s, the "
                                                    f"simulated GPU was busy {device_busy:.3f} s/s")
        requests = self.values("fracgpu_memory_request_bytes")
        for name, (_, _, request, _) in TENANTS.items():
            self.check(requests.get(name) == request, f"{name}: fracgpu_memory_request_bytes {requests.get(name)}, "
                                                      f"want {request}")
        # "fill" went past its request (burst requests) up to its cap (refused), while scraped.
        for counter in ("fracgpu_memory_allocation_refusals_total", "fracgpu_memory_burst_requests_total"):
            rise = self.values(f"increase({counter}[1m])").get("fill", 0)
            self.check(rise >= 0.5, f"fill: {counter} rose by {rise} while scraped, want >= 1")

    def check_adapter(self):
        """The adapter's queries, its templates filled in as it would for t70's pod, give
        that pod a value (and fracgpu_compute_share the tenant's measured share)."""
        config = yaml.safe_load(pathlib.Path(self.args.adapter_config).read_text())
        share = self.values("fracgpu_compute_share_ratio").get("t70")
        for tenant, pod in PODS.items():
            for rule in config["rules"]:
                metric = next(iter(re.findall(r"^\s*([A-Za-z_:][A-Za-z0-9_:]*)", rule["seriesQuery"])), "")
                query = (rule["metricsQuery"].replace("<<.Series>>", metric)
                         .replace("<<.LabelMatchers>>", f'namespace="{pod["namespace"]}",pod=~"{pod["pod"]}"')
                         .replace("<<.GroupBy>>", "pod"))
                result = self.prometheus.query(query)
                name = rule["name"]["as"]
                if not self.check(len(result) == 1 and result[0]["metric"] == {"pod": pod["pod"]},
                                  f"adapter {name} for pod {pod['pod']}: {result} (query {query})"):
                    continue
                value = float(result[0]["value"][1])
                self.check(value > 0, f"adapter {name} for pod {pod['pod']}: {value}, want > 0")
                if name == "fracgpu_compute_share" and tenant == "t70":
                    self.check(abs(value - share) < 0.05, f"adapter {name}: {value}, the tenant's share {share}")

    def check_rules(self):
        rules_file = yaml.safe_load(pathlib.Path(self.args.rules).read_text())
        wanted = {r.get("record") or r.get("alert") for g in rules_file["groups"] for r in g["rules"]}

        def evaluated():
            groups = self.prometheus.api("rules")["groups"]
            rules = [r for g in groups for r in g["rules"]]
            return {r["name"] for r in rules if r.get("health") != "unknown"} >= wanted
        wait_for("every rule to be evaluated", evaluated, 10)
        groups = self.prometheus.api("rules")["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        for name in sorted(wanted):
            rule = loaded.get(name)
            if self.check(rule is not None, f"rule {name} not loaded"):
                self.check(rule["health"] == "ok", f"rule {name}: health {rule['health']}: {rule.get('lastError')}")
            if rule is not None and rule["type"] == "recording":
                self.check(bool(self.prometheus.query(name)), f"the record {name} has no value")
        # The per-pod records hold t70's pod alone (the other tenants have no pod).
        for name in (n for n in wanted if n.startswith("namespace_pod:")):
            pods = {(s["metric"].get("namespace"), s["metric"].get("pod")) for s in self.prometheus.query(name)}
            self.check(pods == {(p["namespace"], p["pod"]) for p in PODS.values()}, f"{name}: pods {pods}")
        ratio = self.values("tenant:fracgpu_memory_used_over_limit:ratio")
        self.check(ratio.get("fill", 0) >= 0.95, f"fill: used/limit {ratio.get('fill')}, want >= 0.95")
        # The GPU-level record against its definition at the record's own evaluation time
        # (the 1 m rate is still ramping up after a few seconds of data).
        # A scrape committed just after an evaluation may move the figure a little: 0.02.
        record = self.prometheus.query("gpu:fracgpu_compute_held_seconds:rate1m")
        stamp = self.values("timestamp(gpu:fracgpu_compute_held_seconds:rate1m)")
        if self.check(len(record) == 1 and "" in stamp, f"gpu:fracgpu_compute_held_seconds:rate1m: {record}"):
            value = float(record[0]["value"][1])
            direct = self.values("sum(rate(fracgpu_compute_held_seconds_total[1m]))", stamp[""])
            self.check(value > 0 and abs(value - direct.get("", -1)) < 0.02,
                       f"gpu:fracgpu_compute_held_seconds:rate1m {value}, its expression gives {direct}")
        alerts = {(a["labels"]["alertname"], a["labels"].get("tenant", ""), a["state"])
                  for a in self.prometheus.api("alerts")["alerts"]}
        for expected in (("FracgpuTenantMemoryAtCap", "fill", "pending"),
                         ("FracgpuTenantAllocationsRefused", "fill", "firing")):
            self.check(expected in alerts, f"alert {expected} not raised; alerts: {sorted(alerts)}")
        for name in SHARE_BOUNDS:
            raised = [a for a in alerts if a[1] == name]
            self.check(not raised, f"{name} raised {raised}")
        self.check(not any(a[0] == "FracgpuBrokerDown" for a in alerts), "FracgpuBrokerDown raised")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("broker", "cli", "fake-driver", "shim", "spin-client", "alloc-client", "fakecuda-ctl"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--fake-nvml", help="the simulated NVML (libnvidia-ml.so.1), for the audit and utilisation")
    parser.add_argument("--prometheus", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    parser.add_argument("--setpriv", default=shutil.which("setpriv") or "/usr/bin/setpriv",
                        help="util-linux's setpriv, to tie each tenant's client to its `fracgpu run`")
    parser.add_argument("--rules", default=str(REPO / "k8s" / "monitoring" / "fracgpu-rules.yaml"))
    parser.add_argument("--metric-names", default=str(REPO / "k8s" / "monitoring" / "metric-names.txt"))
    parser.add_argument("--adapter-config",
                        default=str(REPO / "k8s" / "monitoring" / "prometheus-adapter-config.yaml"))
    parser.add_argument("--scrape-seconds", type=int, default=10, help="scrapes to collect before checking")
    parser.add_argument("--keep-for", type=int, default=0, help="keep everything running this long after the checks")
    parser.add_argument("--budget", type=int, default=55, help="seconds for the whole run (without --keep-for)")
    parser.add_argument("--sanitized", action="store_true",
                        help="a sanitizer build: measured shares and rates are printed, not judged")
    return parser.parse_args()


def on_signal(signum, _frame):
    raise Failure(f"stopped by signal {signum} (the run's budget is spent, or ctest gave up)")


def run(args, work):
    harness = Harness(args, work)
    started = time.time()

    def step(what, action, *action_args):
        result = action(*action_args)
        print(f"{time.time() - started:5.1f} s  {what}", flush=True)
        return result
    try:
        step("broker ready", harness.start_broker)
        # Prometheus first, so that it sees the tenants arrive and "fill" refused.
        step("Prometheus ready", harness.start_prometheus)
        step("tenants running", harness.start_tenants, args.scrape_seconds + 40 + args.keep_for)
        step("t70 labelled as a pod", harness.label_pods)
        step("fill at its cap, seen by Prometheus", harness.release_fill)
        at, busy_by_tenant, device_busy = step("scrapes collected", harness.wait_for_scrapes, args.scrape_seconds)
        step("series checked", harness.check_series)
        step("values checked", harness.check_values, at, busy_by_tenant, device_busy)
        step("rules checked", harness.check_rules)
        step("adapter queries checked", harness.check_adapter)
        if args.keep_for:
            print(f"keeping Prometheus at {harness.prometheus.url} for {args.keep_for} s; data from "
                  f"{started:.0f} (start) on; e.g.\n  tools/render_dashboard.py --prometheus {harness.prometheus.url} "
                  f"--start {started:.0f} --end {time.time() + args.keep_for - 5:.0f}", flush=True)
            signal.alarm(0)
            time.sleep(args.keep_for)
    except Exception as failure:  # noqa: BLE001 - any failure: say why, show the logs, clean up
        harness.problems.append(str(failure) if isinstance(failure, Failure) else traceback.format_exc())
        for name in ("broker", "prometheus") + tuple(TENANTS):
            print(f"--- {name}.log (end) ---\n{harness.processes.log(name)}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up runs to its end
        harness.processes.stop_all()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"/dev/shm{harness.shm_name}")
    return harness.problems


def main():
    args = parse_args()
    signal.signal(signal.SIGALRM, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.alarm(args.budget)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fracgpu-prometheus-") as work:
        problems = run(args, pathlib.Path(work))
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problems ({time.monotonic() - started:.1f} s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
