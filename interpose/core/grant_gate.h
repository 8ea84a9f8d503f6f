// GrantGate: the compute gate of one tenant GPU inside one process. Every gated
// launch asks it first. While the broker's grant word equals the word this process
// last acknowledged, pass() is one acquire load and a compare — no syscall, no store,
// no shared-cache-line write (cost: ~1 ns). On a new word it takes the slow path:
//  * granted, new epoch: record "launched in this epoch" in the process's slot, then
//    re-read the word (the Dekker handshake in tenant_segment.h), ring the doorbell
//    when the broker asked to be told (kGrantNotify);
//  * not granted: count itself in DeviceUsage::waiting, ring the doorbell and sleep on
//    the futex until granted. Launches into a capturing stream pass (they do not run).
// Failing open (tenant_segment.h, "Liveness"): a waiting launch passes rather than hang
// the application when the broker died (its doorbell refuses; probed once per wait
// slice, so seen within kWaitSliceNs) or stopped renewing its lease for kBrokerHungNs
// (stopped, hung, or no broker serves this segment any more). Memory caps stay enforced
// by the ledger; compute is then unscheduled until a broker publishes a new word, whose
// first change brings the gate back. A waiting thread bumps its process's gate_progress
// on every wake-up: that is how the broker tells a stopped process from a live one.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/doorbell.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {

class GrantGate {
 public:
  // Tells the gate whether the launch's stream is capturing (such launches never wait).
  using CaptureProbe = bool (*)(void* context) noexcept;

  void bind(const DeviceQuota* quota, DeviceUsage* usage, SlotSchedule* slot,
            Doorbell* doorbell) noexcept {
    quota_ = quota;
    usage_ = usage;
    slot_.store(slot, std::memory_order_relaxed);
    doorbell_ = doorbell;
    seen_.store(0, std::memory_order_relaxed);
  }
  // Optional (the process's gate then takes part in liveness, tenant_segment.h): the
  // broker's lease in the quota header and this process's slot.
  void bind_liveness(const TenantQuota* tenant, ProcessSlot* process) noexcept {
    tenant_ = tenant;
    process_.store(process, std::memory_order_relaxed);
  }
  // After the process re-registered into another slot (a rebuilt ledger, tenant_segment.h
  // "A ledger lost"): launches, waiters and the drainer use the new slot from their next
  // operation on (each loads the pointer once per operation).
  void rebind_slot(SlotSchedule* slot, ProcessSlot* process) noexcept {
    slot_.store(slot, std::memory_order_relaxed);
    process_.store(process, std::memory_order_relaxed);
  }
  bool bound() const noexcept { return quota_ != nullptr; }

  // True on the fast path: nothing changed since this process last passed.
  bool unchanged() const noexcept {
    return quota_->grant_word.load(std::memory_order_acquire) ==
           seen_.load(std::memory_order_relaxed);
  }
  // Slow path: returns once the launch may go (granted, capturing, or broker gone).
  // Sets *new_epoch when this call acknowledged a new epoch (the caller re-reads its
  // in-flight limit then).
  void pass_slow(CaptureProbe probe, void* probe_context, bool* new_epoch) noexcept;

  // For the drainer thread: blocks until the word differs from `seen` (or timeout).
  uint32_t wait_for_change(uint32_t seen, int64_t timeout_ns) const noexcept;
  uint32_t word() const noexcept { return quota_->grant_word.load(std::memory_order_acquire); }
  // Marks the revoke of `epoch` as drained by this process and tells the broker.
  void report_drained(uint32_t epoch) noexcept;
  uint32_t inflight_limit_us() const noexcept {
    return quota_->inflight_limit_us.load(std::memory_order_relaxed);
  }
  const DeviceQuota& quota() const noexcept { return *quota_; }
  DeviceUsage& usage() const noexcept { return *usage_; }
  // A high tenant (bursts are reported) or a guard published by the broker: one load
  // of the same cache line as grant_word.
  bool burst_work() const noexcept {
    return quota_->guard_period_ns.load(std::memory_order_relaxed) != 0 ||
           quota_->priority.load(std::memory_order_relaxed) ==
               static_cast<uint32_t>(PriorityClass::kHigh);
  }

  static constexpr int64_t kWaitSliceNs = 20'000'000;  // a waiter looks at the broker this often
  static constexpr int64_t kBrokerHungNs = 1'000'000'000;  // lease not renewed this long: fail open

 private:
  bool acknowledge(uint32_t word) noexcept;
  bool wait_for_grant(uint32_t word) noexcept;  // false: broker gone
  void note_progress() noexcept {
    ProcessSlot* process = process_.load(std::memory_order_relaxed);
    if (process != nullptr) process->gate_progress.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t lease() const noexcept;  // 0: no lease to watch

  const DeviceQuota* quota_ = nullptr;
  DeviceUsage* usage_ = nullptr;
  std::atomic<SlotSchedule*> slot_{nullptr};  // atomic: rebind_slot may move it
  Doorbell* doorbell_ = nullptr;
  const TenantQuota* tenant_ = nullptr;
  std::atomic<ProcessSlot*> process_{nullptr};
  std::atomic<uint32_t> seen_{0};  // the granted word this process last acknowledged
};

}  // namespace fracgpu
