// GrantGate: the compute gate of one tenant GPU inside one process. Every gated
// launch asks it first. While the broker's grant word equals the word this process
// last acknowledged, pass() is one acquire load and a compare — no syscall, no store,
// no shared-cache-line write (cost: ~1 ns). On a new word it takes the slow path:
//  * granted, new epoch: record "launched in this epoch" in the process's slot, then
//    re-read the word (the Dekker handshake in tenant_segment.h), ring the doorbell
//    when the broker asked to be told (kGrantNotify);
//  * not granted: count itself in DeviceUsage::waiting, ring the doorbell and sleep on
//    the futex until granted. Launches into a capturing stream pass (they do not run).
// If the broker is gone (the doorbell has nobody behind it) for kBrokerGoneNs, waiting
// launches pass rather than hang the application: memory caps stay enforced by the
// ledger; compute is then unscheduled until a broker answers again.
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
    slot_ = slot;
    doorbell_ = doorbell;
    seen_.store(0, std::memory_order_relaxed);
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

  static constexpr int64_t kBrokerGoneNs = 2'000'000'000;

 private:
  bool acknowledge(uint32_t word) noexcept;
  bool wait_for_grant(uint32_t word) noexcept;  // false: broker gone

  const DeviceQuota* quota_ = nullptr;
  DeviceUsage* usage_ = nullptr;
  SlotSchedule* slot_ = nullptr;
  Doorbell* doorbell_ = nullptr;
  std::atomic<uint32_t> seen_{0};  // the granted word this process last acknowledged
};

}  // namespace fracgpu
