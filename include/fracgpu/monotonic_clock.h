// CLOCK_MONOTONIC in nanoseconds: the one time base of compute scheduling, shared by the
// broker (slices, bursts) and tenant processes (burst starts, guard windows), which
// compare each other's readings. Cost: one vDSO call (~20 ns).
#pragma once

#include <time.h>

#include <cstdint>

namespace fracgpu {

inline int64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace fracgpu
