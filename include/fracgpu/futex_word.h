// Futex wait/wake on a 32-bit word of a shared file mapping, used for the compute
// grant (DeviceQuota::grant_word): the broker wakes, tenant processes wait. The
// futexes are process-shared (no FUTEX_PRIVATE_FLAG): the kernel keys them by the
// mapped file and offset, so a read-only mapping in a tenant and the broker's
// read-write mapping of the same file meet on the same futex.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>

namespace fracgpu {

// Blocks while `word` still holds `expected`, at most `timeout_ns`. Returns false on
// timeout; true when woken, interrupted, or the word had already changed.
inline bool futex_wait_for(const std::atomic<uint32_t>& word, uint32_t expected,
                           int64_t timeout_ns) noexcept {
  timespec timeout{static_cast<time_t>(timeout_ns / 1'000'000'000),
                   static_cast<long>(timeout_ns % 1'000'000'000)};
  const long rc = ::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAIT,
                            expected, &timeout, nullptr, 0);
  return !(rc == -1 && errno == ETIMEDOUT);
}

inline void futex_wake_all(std::atomic<uint32_t>& word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
            0);
}

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

}  // namespace fracgpu
