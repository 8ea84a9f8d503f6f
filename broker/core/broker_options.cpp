// CLI11 wiring and validation of the broker flags (documented in docs/configuration.md).
#include "core/broker_options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>

#include "core/host_memory.h"
#include "core/metrics_server.h"
#include "core/quantity_parser.h"
#include "fracgpu/paths.h"

namespace fracgpu::broker {

void add_broker_options(CLI::App& app, BrokerOptions& o, bool with_run_dir) {
  if (with_run_dir) {
    app.add_option("--run-dir", o.run_dir,
                   std::string("Sockets and shared-memory files (default ") + paths::kRunDir + ")")
        ->envname("FRACGPU_RUN_DIR");
  }
  app.add_option("--state-dir", o.state_dir,
                 std::string("Where tenants.json is kept (default ") + paths::kStateDir + ")");
  app.add_flag("--keep-going", o.keep_going,
               "Start even when tenants.json has tenants that cannot be restored (a bad field, "
               "no longer admitted): they are quarantined, listed with the reason and kept in the "
               "file as they are, and the file is backed up first (default: refuse to start)");
  app.add_option("--driver", o.driver,
                 "CUDA driver library to enumerate GPUs with (default $FRACGPU_REAL_DRIVER, else "
                 "libcuda.so.1)");
  app.add_option("--reserve", o.reserve, "GPU memory kept out of every quota, per GPU (e.g. 2GiB)");
  app.add_option("--context-footprint", o.context_footprint,
                 "Bytes charged per CUDA context: auto (measured at start) or a SIZE");
  app.add_option("--metrics-listen", o.metrics_listen,
                 "Serve Prometheus metrics on ADDR:PORT (e.g. 127.0.0.1:9400)");
  app.add_option("--metrics-request-timeout", o.metrics_request_timeout_ms,
                 "Milliseconds a metrics client has, from connecting, to send its whole request "
                 "head; bytes sent do not extend it (default 2000)")
      ->check(CLI::Range(100, 60000));
  app.add_option("--metrics-max-connections", o.metrics_max_connections,
                 "Metrics connections open at once; over it a newcomer replaces the oldest that "
                 "has not sent a complete request (default 1024)")
      ->check(CLI::Range(4, 65536));
  app.add_option("--metrics-max-per-peer", o.metrics_max_per_peer,
                 "Metrics connections open at once from one address (default 16)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error, critical or off");
  app.add_option("--slice-ms", o.slice_ms, "Compute time slice under contention, ms (default 20)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--high-inflight-us", o.high_inflight_us,
                 "GPU work (us) other tenants may keep queued while a high-priority tenant is "
                 "active (default 500)")
      ->check(CLI::Range(50, 100000));
  app.add_option(
         "--contended-inflight-us", o.contended_inflight_us,
         "GPU work (us) a tenant may keep queued while others wait for the GPU (default 4000)")
      ->check(CLI::Range(100, 1000000));
  app.add_option("--low-starvation-ms", o.low_starvation_ms,
                 "A low-priority tenant waiting this long gets the next slice (default 2000)")
      ->check(CLI::Range(10, 600000));
  app.add_option(
         "--drain-timeout-ms", o.drain_timeout_ms,
         "Hand the GPU on after this long even if a revoked tenant has not drained (default 1000)")
      ->check(CLI::Range(10, 600000));
  app.add_flag("--no-burst-guard", o.no_burst_guard,
               "Do not hold lower classes back before a high-priority tenant's regular bursts");
  app.add_flag("--mps", o.mps,
               "Run an NVIDIA MPS control daemon and make every tenant process its client, so "
               "that a high-priority tenant's kernels run beside the GPU holder's instead of "
               "waiting for a context switch (shares, ceilings, priorities and memory caps stay "
               "fracgpu's; see docs/configuration.md, MPS mode)");
  app.add_option("--mps-control", o.mps_control,
                 "The MPS control daemon program for --mps (default nvidia-cuda-mps-control, "
                 "found on PATH)");
  app.add_option("--mps-high-inflight-us", o.mps_high_inflight_us,
                 "With --mps: GPU work (us) other tenants may keep queued while a high-priority "
                 "tenant is active (default 500)")
      ->check(CLI::Range(50, 100000));
  app.add_flag("--mps-burst-guard", o.mps_burst_guard,
               "With --mps: keep the burst guard (off by default under MPS: it holds lower "
               "classes back before a high-priority tenant's regular bursts, which MPS mode "
               "does not need and which cost batch tenants most of their time on the H200)");
  app.add_option("--mps-guard-lead-us", o.mps_guard_lead_us,
                 "With --mps --mps-burst-guard: how much earlier (us) lower classes stop "
                 "launching before a predicted burst than in time-slice mode (default 0)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--nvml", o.nvml,
                 "NVML library the audit reads per-process GPU memory from (default "
                 "libnvidia-ml.so.1; the audit is off, with one log line, where it cannot load)");
  app.add_option("--audit-interval", o.audit_interval_ms,
                 "Compare NVML's per-process GPU memory with the books every MS milliseconds "
                 "(default 500; 0 = off)")
      ->check(CLI::Range(0, 60000));
  app.add_option("--audit-action", o.audit_action,
                 "What to do with a process the audit catches: log (default) or kill (SIGKILL; "
                 "only processes attributed to a tenant)")
      ->check(CLI::IsMember({"log", "kill"}));
  app.add_option("--audit-tolerance", o.audit_tolerance,
                 "Real usage above the books the audit tolerates, at least (default 64MiB; "
                 "2% of the limit where that is more)");
  app.add_option("--audit-cgroups", o.audit_cgroups,
                 "Attribute a process to a tenant by its cgroup too (on, the default: a "
                 "container's, or a `fracgpu run`'s own) or by ancestry only (off: for hosts "
                 "where unrelated jobs share a cgroup)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--swap-host-budget", o.swap_host_budget,
                 "Host memory all tenants' swapped memory may take together (default auto: half "
                 "of the node's memory; 0 = never swap)");
  app.add_option("--swap-reserve-floor", o.swap_reserve_floor,
                 "Swap reserves (host memory pinned ahead for borrowers' swap-outs, within the "
                 "host budget) leave at least this much of the node's memory available (default "
                 "auto: an eighth of it)");
  app.add_option("--reclaim", o.reclaim,
                 "A borrower whose memory a guarantee needs and that cannot move it to host: "
                 "kill (default: SIGKILL its processes, lowest class first, as the kubelet "
                 "evicts a pod over its request) or report (log it; the guaranteed tenant waits; "
                 "swap is the old name of report)")
      ->check(CLI::IsMember({"kill", "report", "swap"}));
  app.add_option("--swap-idle-after", o.swap_idle_after_s,
                 "Move a tenant that allows swapping entirely to host memory once its processes "
                 "have not touched device memory for SECONDS (default 0: never); it resumes at its "
                 "next launch or copy")
      ->check(CLI::Validator(
          [](std::string& value) {
            // CLI::Range lets NaN through (every comparison with it is false).
            char* end = nullptr;
            const double seconds = std::strtod(value.c_str(), &end);
            if (value.empty() || *end != '\0' || !std::isfinite(seconds) || seconds < 0 ||
                seconds > 30.0 * 86400)
              return "must be a number of seconds from 0 to 2592000 (30 days), not \"" +
                     value.substr(0, 40) + "\"";
            return std::string();
          },
          "SECONDS"));
  app.add_flag("--fracgpu-only", o.fracgpu_only,
               "The node's GPUs are meant for fracgpu tenants only (the Kubernetes DaemonSet sets "
               "it): a process holding GPU memory in no tenant is reported as an 'outside' "
               "violation. Without it, that memory is still counted (status, metrics) and kept "
               "out of what is lent or newly guaranteed, but not reported");
  app.add_option("--ready-fd", o.ready_fd,
                 "Write one byte to this fd once serving (used by fracgpu run)")
      ->group("");  // internal
}

Status resolve_broker_options(BrokerOptions& o) {
  if (o.run_dir.empty()) {
    const char* env = std::getenv("FRACGPU_RUN_DIR");
    o.run_dir = env != nullptr && *env != '\0' ? env : paths::kRunDir;
  }
  if (o.state_dir.empty()) o.state_dir = paths::kStateDir;
  auto reserve = parse_size_allow_zero(o.reserve, "--reserve");
  if (!reserve) return Status::failure(reserve.error());
  o.reserve_bytes = *reserve;
  if (o.context_footprint != "auto") {
    auto footprint = parse_size_allow_zero(o.context_footprint, "--context-footprint");
    if (!footprint) return Status::failure(footprint.error() + " (or use auto)");
    o.footprint_bytes = *footprint;
  }
  o.compute.slice_ns = int64_t{o.slice_ms} * 1'000'000;
  o.compute.high_inflight_us = static_cast<uint32_t>(o.high_inflight_us);
  o.compute.contended_inflight_us = static_cast<uint32_t>(o.contended_inflight_us);
  o.compute.low_starvation_ns = int64_t{o.low_starvation_ms} * 1'000'000;
  o.compute.drain_timeout_ns = int64_t{o.drain_timeout_ms} * 1'000'000;
  o.compute.burst_guard = !o.no_burst_guard;
  o.compute.mps_high_inflight_us = static_cast<uint32_t>(o.mps_high_inflight_us);
  o.compute.mps_burst_guard = o.mps_burst_guard;
  o.compute.mps_guard_lead_us = static_cast<uint32_t>(o.mps_guard_lead_us);
  if (o.mps && o.mps_control.empty()) return Status::failure("--mps-control must name a program");
  auto tolerance = parse_size_allow_zero(o.audit_tolerance, "--audit-tolerance");
  if (!tolerance) return Status::failure(tolerance.error());
  if (o.audit_action != "log" && o.audit_action != "kill")
    return Status::failure("--audit-action must be log or kill");
  o.audit = AuditOptions{o.nvml, o.audit_interval_ms,
                         o.audit_action == "kill" ? AuditAction::kKill : AuditAction::kLog,
                         *tolerance, o.audit_cgroups != "off"};
  o.audit.fracgpu_only = o.fracgpu_only;
  if (o.swap_host_budget == "auto") {
    o.swap_host_budget_bytes = node_memory_bytes() / 2;
  } else {
    auto budget = parse_size_allow_zero(o.swap_host_budget, "--swap-host-budget");
    if (!budget) return Status::failure(budget.error() + " (or auto)");
    o.swap_host_budget_bytes = *budget;
  }
  if (o.swap_reserve_floor == "auto") {
    o.swap_reserve_floor_bytes = node_memory_bytes() / 8;
  } else {
    auto floor = parse_size_allow_zero(o.swap_reserve_floor, "--swap-reserve-floor");
    if (!floor) return Status::failure(floor.error() + " (or auto)");
    o.swap_reserve_floor_bytes = *floor;
  }
  if (o.reclaim != "kill" && o.reclaim != "report" && o.reclaim != "swap")
    return Status::failure("--reclaim must be kill or report");
  if (!o.metrics_listen.empty()) {
    auto address = parse_listen_address(o.metrics_listen);
    if (!address) return Status::failure(address.error());
  }
  if (o.metrics_max_per_peer > o.metrics_max_connections)
    return Status::failure("--metrics-max-per-peer (" + std::to_string(o.metrics_max_per_peer) +
                           ") must not exceed --metrics-max-connections (" +
                           std::to_string(o.metrics_max_connections) + ")");
  return {};
}

}  // namespace fracgpu::broker
