// The burst guard's decision for one launch of a lower-class tenant (see "Burst guard"
// in tenant_segment.h): pure functions of the prediction the broker published, the
// time and the process's own kernel time, so that the shim (ComputePolicy) and the
// broker's simulation tests run the same logic: a contract between shim and broker, as
// the grant word is. Header-only, no driver types; a few float operations per launch of
// a lower-class tenant while a guard is published.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fracgpu {

// What the broker published (DeviceQuota.guard_*); next 0 = no guard.
struct BurstGuardView {
  uint64_t next_ns = 0;
  uint64_t period_ns = 0;
  uint32_t lead_ns = 0;
  uint64_t late_ns = 0;
  uint64_t hold_ns = 0;
};

// Never hold past a burst's start longer than this.
inline constexpr uint64_t kMaxGuardHoldNs = 2'000'000;

// Whether a launch at `now_ns` of work taking `kernel_ns` on the GPU must wait for the
// predicted burst. A launch that ends before the burst, or overlaps it by no more than
// `allowed_ns` (the in-flight bound lower classes keep in a high tenant's way), goes
// ahead; so does every launch once the burst is overdue (next + late).
inline bool guard_holds(const BurstGuardView& guard, int64_t now_ns, double kernel_ns,
                        double allowed_ns) {
  if (guard.next_ns == 0 || kernel_ns <= 0) return false;
  const int64_t next = static_cast<int64_t>(guard.next_ns);
  if (now_ns >= next + static_cast<int64_t>(guard.late_ns)) return false;
  return static_cast<double>(now_ns) + kernel_ns >
         static_cast<double>(next - static_cast<int64_t>(guard.lead_ns)) + allowed_ns;
}

// Whether a launch held for the prediction `held` may go at `now_ns`, `current` being
// what the broker publishes now. It waits until the burst has been seen (the broker
// predicts the next one) or is overdue; once seen, until its launches are in (its
// start, current next - period, plus hold).
inline bool guard_released(const BurstGuardView& held, const BurstGuardView& current,
                           int64_t now_ns) {
  if (current.next_ns == held.next_ns)
    return now_ns >= static_cast<int64_t>(held.next_ns + held.late_ns);
  if (current.next_ns == 0 || current.period_ns == 0 || current.next_ns < current.period_ns)
    return true;
  const uint64_t until =
      current.next_ns - current.period_ns + std::min(current.hold_ns, kMaxGuardHoldNs);
  return now_ns >= static_cast<int64_t>(until);
}

}  // namespace fracgpu
