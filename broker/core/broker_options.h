// The broker's command-line options, shared by the fracgpu-broker executable and
// `fracgpu broker` so that both accept exactly the same flags (the logger: common/logging.h).
// Values are kept as typed by the user and converted (with one clear error) by
// resolve_broker_options.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/result.h"
#include "core/gpu_scheduler.h"
#include "core/usage_audit.h"

namespace CLI {
class App;
}

namespace fracgpu::broker {

struct BrokerOptions {
  std::string run_dir;
  std::string state_dir;
  std::string driver;                      // empty: $FRACGPU_REAL_DRIVER, else libcuda.so.1
  std::string reserve = "0";               // SIZE
  std::string context_footprint = "auto";  // auto | SIZE
  std::string metrics_listen;              // ADDR:PORT, empty = off
  // The metrics endpoint's bounds (http_connection_book.h, docs/configuration.md).
  int metrics_request_timeout_ms = 2000;  // accept -> complete request head, in all
  int metrics_max_connections = 1024;     // open at once
  int metrics_max_per_peer = 16;          // open at once from one address
  std::string log_level = "info";
  int ready_fd = -1;  // written to (one byte) and closed once the broker serves
  // A tenant of tenants.json that cannot be restored (a bad field, no longer admitted,
  // its files unusable) stops the start; --keep-going quarantines it instead
  // (docs/configuration.md, "State and recovery").
  bool keep_going = false;
  // Compute scheduling (docs/configuration.md, "Compute shares").
  int slice_ms = 20;
  int high_inflight_us = 500;
  int contended_inflight_us = 4000;
  int low_starvation_ms = 2000;
  int drain_timeout_ms = 1000;
  bool no_burst_guard = false;
  // MPS mode (docs/configuration.md, "MPS mode"): the broker runs an MPS control daemon
  // and its tenants' processes become MPS clients; scheduling stays fracgpu's.
  bool mps = false;
  std::string mps_control = "nvidia-cuda-mps-control";  // --mps-control PATH (or name on PATH)
  int mps_high_inflight_us = 500;                       // --high-inflight-us under MPS
  bool mps_burst_guard = false;                         // the burst guard under MPS too
  int mps_guard_lead_us = 0;                            // the burst guard's extra lead
  // Audit backstop (issue 12): NVML usage against the books, and the books check.
  std::string nvml = "libnvidia-ml.so.1";  // --nvml PATH
  int audit_interval_ms = 500;             // 0 = no NVML audit (the books check stays on)
  bool fracgpu_only = false;         // --fracgpu-only: memory outside every tenant is a violation
  std::string audit_action = "log";  // log | kill
  std::string audit_tolerance = "64MiB";  // SIZE, the floor of the tolerance
  std::string audit_cgroups = "on";       // on | off: attribution by cgroup too
  // Overcommit (docs/configuration.md, "Swap"): host memory for tenants' swapped memory,
  // and what happens to a borrower whose memory cannot move.
  std::string swap_host_budget = "auto";  // SIZE, or auto = half of the node's memory
  // kill (default: a guarantee holds, docs/configuration.md "Swap") | report (old: swap)
  std::string reclaim = "kill";
  double swap_idle_after_s = 0;             // move idle swappable tenants to host; 0 = never
  std::string swap_reserve_floor = "auto";  // SIZE, or auto = an eighth of the node's memory

  // Filled by resolve_broker_options.
  uint64_t reserve_bytes = 0;
  std::optional<uint64_t> footprint_bytes;
  ComputeConfig compute;
  AuditOptions audit;
  uint64_t swap_host_budget_bytes = 0;
  uint64_t swap_reserve_floor_bytes = 0;
};

// Adds the broker flags to `app`. `with_run_dir` is false for `fracgpu broker`, whose
// --run-dir is the CLI's common flag.
void add_broker_options(CLI::App& app, BrokerOptions& options, bool with_run_dir);

// Defaults (env FRACGPU_RUN_DIR, /run/fracgpu, /var/lib/fracgpu), sizes, log level.
Status resolve_broker_options(BrokerOptions& options);

}  // namespace fracgpu::broker
