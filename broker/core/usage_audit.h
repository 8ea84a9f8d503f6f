// The audit backstop's decisions (issue 12, item 5): what the driver says each process
// really holds (samples from GpuUsagePort, nvml_port.h) against the tenants' books.
// Pure: inputs are the tenants (limits, registered processes with what their ledger
// slots book), the samples and a ProcessPort (process_port.h) for start time, parent and
// cgroup; the result is the violations that START this tick.
//
// Kinds (ViolationKind):
//   over_cap      the tenant's processes (registered or attributed) hold more on a GPU
//                 than its memory_limit + tolerance; tolerance = max(--audit-tolerance,
//                 default 64 MiB, 2 % of the limit), for driver-internal memory the shim
//                 cannot see (module images, the context's real size).
//   unregistered  a process holding device memory, registered in no tenant, attributed
//                 to one: an ancestor (ppid chain, <= 64 levels, matched by pid AND start
//                 time) is a registered process of that tenant (a bypassing child of a
//                 shim process, or of `fracgpu run`, which registers itself and is the
//                 child subreaper of its command, so an orphaned, setsid, double-forked
//                 grandchild is still its descendant), or its cgroup identity
//                 (cgroup_identity.h: the v2 path, else a v1 memory/pids/name=systemd
//                 path) equals that of registered processes of exactly one tenant, is not
//                 the root of every hierarchy, and differs from the broker's own.
//   books         a registered process holding more than its slot books + one context
//                 footprint + tolerance (it reached the driver around the shim).
// Processes attributed to no tenant are not fracgpu's business: never reported, never
// killed. The broker itself (self_pid) and pid 1 are never attributed.
//
// Episodes: a condition (tenant, GPU, kind, and the process for unregistered/books) is
// reported once when it starts; it must end (the process gone or back under) before it
// counts again. A GPU whose sample failed keeps its episodes as they were.
// Action kill: SIGKILL through the port for a new episode's process — over_cap's chosen
// offender (its largest unregistered process, else the registered one furthest above
// its books, else its largest) — by pid AND start time: the port pins the process with a
// pidfd and signals through it (common/pidfd_signal.h), so a recycled pid is never
// killed. Never the broker, never pid 1, never a process attributed to no tenant.
//
// Cost per tick: a map lookup per sampled process (attribution facts are cached per pid
// and start time; /proc is read only for processes not seen before, and to re-check the
// start time of a process about to be reported), plus a scan of the registered list.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/nvml_port.h"
#include "core/process_port.h"

namespace fracgpu::broker {

// kSwap: the swap books (swap_books.h): a tenant's words about its memory on host or its
// swap reserve said more than the broker's record allows.
enum class ViolationKind : uint32_t { kOverCap = 0, kUnregistered, kBooks, kLedger, kQuota, kSwap };
inline constexpr std::size_t kViolationKinds = 6;
const char* violation_kind_name(ViolationKind kind);

enum class AuditAction { kLog, kKill };

struct AuditGpu {
  uint32_t index = 0;  // host GPU index
  std::string uuid;
};

struct AuditRegistered {
  int32_t pid = 0;
  uint64_t start_time = 0;       // the broker's record (ProcessTracker), not the ledger's
  std::vector<uint64_t> booked;  // by host GPU index: what its ledger slot says it holds
};

struct AuditTenant {
  std::string name;
  std::vector<uint64_t> limit;      // by host GPU index; 0 = no share on that GPU
  std::vector<uint64_t> footprint;  // by host GPU index: bytes charged per context
  std::vector<AuditRegistered> processes;
};

struct AuditSample {
  uint32_t gpu = 0;  // host GPU index
  bool ok = false;
  std::vector<GpuProcessUsage> processes;
};

// One violation as reported (also used for the books check's "ledger"/"quota" kinds).
struct Violation {
  std::string tenant;
  uint32_t gpu = 0;
  std::string gpu_uuid;
  int32_t pid = 0;  // 0 when no single process is known
  ViolationKind kind = ViolationKind::kOverCap;
  uint64_t bytes = 0;  // over_cap: the tenant's real total; unregistered: what it holds;
                       // books: real minus booked; ledger: the counter's error
  std::string action;  // "logged", "killed", "kill failed", "restored", "repaired"
  std::string detail;  // one sentence for the log
};

struct AuditConfig {
  AuditAction action = AuditAction::kLog;
  int32_t self_pid = 0;
  uint64_t tolerance_floor = 64ull << 20;
  uint32_t tolerance_percent = 2;
};

// The broker options behind it (broker_options.h: --nvml, --audit-interval,
// --audit-action, --audit-tolerance), as AuditService (audit_service.h) takes them.
struct AuditOptions {
  std::string nvml_path = "libnvidia-ml.so.1";
  int interval_ms = 500;  // 0: no NVML audit
  AuditAction action = AuditAction::kLog;
  uint64_t tolerance = 64ull << 20;
  bool cgroups = true;        // --audit-cgroups off: every process reads as "0::/" (ancestry only)
  bool fracgpu_only = false;  // --fracgpu-only: memory outside every tenant is a violation
};

class UsageAudit {
 public:
  UsageAudit(AuditConfig config, ProcessPort& processes);

  // One audit pass; returns the violations that start now (already acted on).
  std::vector<Violation> tick(const std::vector<AuditGpu>& gpus,
                              const std::vector<AuditTenant>& tenants,
                              const std::vector<AuditSample>& samples);

  uint64_t tolerance(uint64_t limit) const;
  std::size_t cached_processes() const { return facts_.size(); }
  std::size_t open_episodes() const { return episodes_.size(); }
  // By host GPU read this tick: its processes attributed to no tenant, neither the broker
  // nor one of its children (memory outside every tenant, outside_usage.h).
  const std::map<uint32_t, std::vector<GpuProcessUsage>>& outside() const { return outside_; }

 private:
  struct Facts {
    uint64_t start_time = 0;
    std::string cgroup;
    std::vector<std::pair<int32_t, uint64_t>> ancestors;  // (pid, start time), nearest first
    bool broker_child = false;  // the broker is an ancestor (the MPS daemon, ...)
  };
  struct Owner {
    std::size_t tenant = 0;
    const AuditRegistered* process = nullptr;
  };
  // (tenant name, gpu, kind, pid, start time); pid/start 0 for over_cap.
  using EpisodeKey = std::tuple<std::string, uint32_t, uint32_t, int32_t, uint64_t>;
  struct Condition {
    Violation violation;
    uint64_t start_time = 0;  // of violation.pid, re-checked before it is reported
  };

  const Facts* facts_of(int32_t pid);
  std::optional<std::size_t> attribute(
      const Facts& facts, const std::map<int32_t, Owner>& registered,
      const std::map<std::string, std::set<std::size_t>>& by_cgroup);
  std::map<std::string, std::set<std::size_t>> cgroups_of(const std::vector<AuditTenant>& tenants);
  void evaluate_gpu(const AuditSample& sample, const std::string& uuid,
                    const std::vector<AuditTenant>& tenants,
                    const std::map<int32_t, Owner>& registered,
                    const std::map<std::string, std::set<std::size_t>>& by_cgroup,
                    std::map<EpisodeKey, Condition>& out);
  bool still_same_process(const Condition& c);
  void act(Violation& v, uint64_t start_time, std::set<int32_t>& killed);

  AuditConfig config_;
  ProcessPort& port_;
  std::optional<std::string> self_cgroup_;
  std::unordered_map<int32_t, Facts> facts_;
  std::map<std::pair<int32_t, uint64_t>, std::string> registered_cgroups_;
  std::set<EpisodeKey> episodes_;
  std::map<uint32_t, std::vector<GpuProcessUsage>> outside_;
};

}  // namespace fracgpu::broker
