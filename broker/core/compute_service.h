// ComputeService: runs the per-GPU compute schedulers inside the broker. It owns, per
// tenant, the doorbell (a Unix datagram socket <tenant dir>/doorbell that the tenant's
// processes ring on slow paths) and the LedgerPorts through which a scheduler reads
// the tenant's ledger and writes its grant word; plus one timerfd armed at the
// earliest time any scheduler needs to run again. Everything runs on the broker's
// event loop thread: a doorbell or timer wakes the loop, the schedulers step, and the
// next deadline is armed.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/event_loop.h"
#include "core/gpu_scheduler.h"
#include "core/process_tracker.h"
#include "core/tenant_registry.h"

namespace fracgpu::broker {

class ComputeService {
 public:
  ComputeService(EventLoop& loop, ComputeConfig config);
  ~ComputeService();
  ComputeService(const ComputeService&) = delete;
  ComputeService& operator=(const ComputeService&) = delete;

  Status start();
  // Brings schedulers, ports and doorbells in line with the registry (after start,
  // create, update, delete); settings changes apply at once.
  void sync(TenantRegistry& registry);
  // Ports read only the slots the broker registered (ProcessTracker), not all 512 of each
  // ledger: at 1,000 tenants a scheduling pass over every slot costs ~10 ms. Without a
  // tracker (tests), every Live slot is read.
  void set_tracker(const ProcessTracker* tracker) { tracker_ = tracker; }
  // Something changed outside the ledgers' view (a process died): re-run now.
  void poke() { run(); }
  // MPS mode follows the broker's MPS control daemon (core/mps_daemon.h): on while it
  // runs, off while it is down or restarting. Schedulers created later inherit it.
  void set_mps(bool on);
  bool mps() const { return config_.mps; }
  std::optional<ComputeStatus> status(const std::string& tenant, uint32_t gpu) const;
  // Handoffs and grant waits of a GPU since the broker started (nullopt: never scheduled).
  std::optional<GpuComputeCounters> gpu_counters(uint32_t gpu) const;

 private:
  struct TenantLink;
  void run();
  void arm(int64_t deadline);
  Status open_doorbell(TenantLink& link, const std::filesystem::path& dir, const TenantSpec& spec);
  void close_link(TenantLink& link);
  void unschedule(uint32_t gpu, const std::string& name);
  void forget(const std::string& name, TenantLink& link);
  void sync_tenant(Tenant& tenant, std::unique_ptr<TenantLink>& link, int64_t now);

  EventLoop& loop_;
  ComputeConfig config_;
  const ProcessTracker* tracker_ = nullptr;
  int timer_fd_ = -1;
  EventLoop::Id timer_id_ = 0;
  std::map<uint32_t, GpuScheduler> gpus_;  // by host GPU index
  std::map<std::string, std::unique_ptr<TenantLink>, std::less<>> tenants_;
};

}  // namespace fracgpu::broker
