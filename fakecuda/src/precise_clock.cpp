// Precise sleeping on CLOCK_MONOTONIC (see precise_clock.h).
#include "precise_clock.h"

#include <sys/prctl.h>
#include <time.h>

#include <cerrno>

namespace fakecuda {
namespace {

constexpr int64_t kSpinTailNs = 50'000;  // last 50 us are spun, not slept

timespec to_timespec(int64_t ns) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return ts;
}

void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void sleep_until_precise(int64_t deadline_ns) {
  int64_t wake_ns = deadline_ns - kSpinTailNs;
  if (wake_ns > monotonic_ns()) {
    timespec wake = to_timespec(wake_ns);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wake, nullptr) == EINTR) {
    }
  }
  while (monotonic_ns() < deadline_ns) cpu_relax();
}

void use_tight_timer_slack() {
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

}  // namespace fakecuda
