// Per-piece timing of the cuLaunchKernel hook path, for finding where a tenant's launch
// overhead goes on a real GPU (docs/benchmarks.md, "Issue 31: the launch path timed").
// Compiled in only with the CMake option FRACGPU_LAUNCH_PROFILE (off by default): then
// the wrapper of cuLaunchKernel reads the TSC at each mark below and interpose/
// launch_profile.cpp keeps one histogram per piece, written at exit to
// FRACGPU_LAUNCH_PROFILE_DIR/launch-<pid>.json when that directory exists (a fixed path:
// the benchmark scrubs FRACGPU_* variables from its tenants). Off, every mark is
// ((void)0): no code, no data, no cost. On, each mark is one rdtsc and one TLS store.
#pragma once

#ifdef FRACGPU_LAUNCH_PROFILE
#include <x86intrin.h>

#include <cstdint>

namespace fracgpu::launch_profile {

// In path order. A mark the call does not pass (no tenant: kPolicy..kGated, kSectionLeft,
// kCounted) is skipped; its piece then goes to the next mark passed.
enum Mark : int {
  kEntry,        // the wrapper begins
  kBody,         // init check, hook counter, real pointer, re-entry guard done
  kPolicy,       // tenant() and the stream locator done (tenants only)
  kGated,        // ComputePolicy::before_launch done: device, gate, burst check
  kSubmit,       // swap section entered: the driver is called next
  kReal,         // the driver's cuLaunchKernel returned
  kSectionLeft,  // swap section left
  kCounted,      // ComputePolicy::after_launch done: capture check, limiter count
  kExit,         // the wrapper returns
  kMarks
};

struct Marks {
  uint64_t tsc[kMarks];
  bool active;
};
extern thread_local Marks t_marks __attribute__((tls_model("initial-exec")));

inline void begin() noexcept {
  t_marks.active = true;
  t_marks.tsc[kEntry] = __rdtsc();
}
inline void mark(Mark m) noexcept {
  if (t_marks.active) t_marks.tsc[m] = __rdtsc();
}
// Marks kExit, adds the call's pieces to the histograms and clears the marks.
void end() noexcept;

}  // namespace fracgpu::launch_profile

#define FRACGPU_LAUNCH_MARK(m) ::fracgpu::launch_profile::mark(::fracgpu::launch_profile::m)
#else
#define FRACGPU_LAUNCH_MARK(m) ((void)0)
#endif
