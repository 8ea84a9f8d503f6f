// The audit backstop inside the broker (issue 12, items 1 and 5): glue between the
// broker's state (registry, process watches, GPU inventory) and the pure checks.
//  - audit_tick(), every --audit-interval ms (default 500, 0 = off): one NVML sample per
//    GPU (nvml_port.h) judged by UsageAudit (usage_audit.h) against each tenant's limit
//    and its registered processes' books;
//  - books_tick(), every maintenance tick (100 ms): BooksCheck (books_check.h) on every
//    tenant's quota and ledger (its every-tick part is a few loads per tenant; the
//    registered processes' list is rebuilt only when ProcessTracker's generation for the
//    tenant moved);
//  - everything found goes to the ViolationLog (violation_log.h): log line, counters,
//    status JSON, metrics (tenant_metrics.h reads them, with the NVML figures of each
//    GPU's latest sample); --audit-action kill stops an offending process.
// NVML that cannot be opened disables only the NVML part (one log line; each GPU's status
// says "audit": {"available": false, "reason": ...}); the books check always runs.
// Nothing here touches the shim or its fast paths: the cost is the broker's alone.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/books_check.h"
#include "core/gpu_inventory.h"
#include "core/ledger_reconciler.h"
#include "core/nvml_port.h"
#include "core/outside_usage.h"
#include "core/process_port.h"
#include "core/process_tracker.h"
#include "core/tenant_registry.h"
#include "core/usage_audit.h"
#include "core/violation_log.h"

namespace fracgpu::broker {

// What NVML said about one GPU in the audit's latest sample (for the metrics).
struct NvmlGpuFigures {
  uint64_t memory_used = 0;           // the device's used memory (else what its processes hold)
  std::optional<double> utilization;  // 0..1, where NVML reports it
};

class AuditService {
 public:
  AuditService(AuditOptions options, TenantRegistry& registry, ProcessTracker& tracker,
               LedgerReconciler& reconciler, const GpuInventory& gpus);

  // Opens NVML unless the interval is 0; logs one line either way.
  void open();
  bool nvml_available() const { return nvml_ != nullptr; }
  // The NVML samples the audit reads, for the bounds of a lost ledger's re-charges
  // (recharge_policy.h); nullptr without NVML.
  GpuUsagePort* usage_port() const { return nvml_.get(); }
  int interval_ms() const { return options_.interval_ms; }

  void audit_tick();
  void books_tick();

  // The grant half of the quota check, for all tenants: before a broker decision that
  // reads grants (a burst), and recording them after one.
  void verify_grants();
  void note_grants();
  bool burst_refused(const std::string& tenant, std::string* why) const;

  void forget(const std::string& tenant);

  nlohmann::json gpu_json(const GpuInfo& gpu) const;            // "audit" of a GPU
  nlohmann::json tenant_json(const std::string& tenant) const;  // "violations" of a tenant
  // The GPU's figures from the latest NVML sample; nullopt without NVML, before the first
  // sample, or when that sample could not read the GPU.
  std::optional<NvmlGpuFigures> nvml_figures(const std::string& uuid) const;

  // What the device shows `tenant`'s registered processes hold on host GPU `gpu`, as of the
  // latest NVML sample that read it (the guarantee enforcer covers a ledger's `used` only
  // that far, guarantee_enforcer.h). 0 before the first sample (nothing is confirmed yet);
  // nullopt where no device figure exists: no NVML, a GPU no sample could read, or a
  // process NVML lists without its bytes.
  std::optional<uint64_t> device_bytes(const std::string& tenant, uint32_t gpu) const;

  const ViolationLog& log() const { return log_; }
  // Memory outside every tenant, per GPU, as of the latest NVML sample (outside_usage.h).
  const OutsideBooks& outside() const { return outside_; }
  // Time spent in audit_tick / books_tick so far, and how many ran
  // (fracgpu_audit_duration_seconds_total, fracgpu_audit_passes_total).
  std::chrono::nanoseconds nvml_time() const { return nvml_time_; }
  std::chrono::nanoseconds books_time() const { return books_time_; }
  uint64_t nvml_passes() const { return nvml_ticks_; }
  uint64_t books_passes() const { return books_ticks_; }

 private:
  const std::vector<WatchedSlot>& watched_of(const std::string& tenant);
  BooksSubject subject(Tenant& tenant);
  void record(const std::vector<Violation>& found);
  void note_figures(const GpuUsageSample& sample);
  void account_outside(const std::vector<AuditGpu>& gpus, const std::vector<AuditSample>& samples,
                       const std::map<uint32_t, std::optional<uint64_t>>& used);

  AuditOptions options_;
  TenantRegistry& registry_;
  // Books ticks (100 ms) between checks of a tenant with no process: once a second, the
  // audit's own period.
  static constexpr uint64_t kQuietTenantEvery = 10;
  ProcessTracker& tracker_;
  LedgerReconciler& reconciler_;
  const GpuInventory& gpus_;
  std::unique_ptr<NvmlPort> nvml_;
  std::string unavailable_;  // why the NVML audit is off
  ProcfsCgroupReader cgroup_files_;
  RootOnlyCgroupReader no_cgroups_;
  ProcfsProcessPort processes_;
  UsageAudit audit_;
  BooksCheck books_;
  ViolationLog log_;
  OutsideBooks outside_;
  std::chrono::nanoseconds nvml_time_{0}, books_time_{0};
  uint64_t nvml_ticks_ = 0, books_ticks_ = 0;
  std::map<std::string, NvmlGpuFigures, std::less<>> figures_;  // by GPU UUID
  void note_device_bytes(const std::vector<AuditTenant>& tenants,
                         const std::vector<AuditSample>& samples);
  // device_bytes(): by (tenant, host GPU), from the latest sample that read the GPU; a GPU
  // in read_gpus_ without an entry for a tenant: 0.
  std::map<std::pair<std::string, uint32_t>, std::optional<uint64_t>> device_bytes_;
  std::set<uint32_t> read_gpus_;
  struct WatchedCache {
    uint64_t generation = 0;
    bool valid = false;
    std::vector<WatchedSlot> slots;
  };
  std::unordered_map<std::string, WatchedCache> watched_;  // by tenant
};

}  // namespace fracgpu::broker
