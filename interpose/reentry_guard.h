// Thread-local re-entry guard. While a wrapper runs its policy (quota checks, launch
// gating), any CUDA call that comes back into the shim on the same thread — from the
// driver, from our own core, from a callback — must go straight to the driver, or it
// would be charged or gated twice. Initial-exec TLS: the shim is loaded at start-up
// (LD_PRELOAD or /etc/ld.so.preload), so the flag lives in static TLS and reading it
// costs one %fs-relative load, with no __tls_get_addr call.
#pragma once

namespace fracgpu::shim {

class ReentryGuard {
 public:
  ReentryGuard() noexcept { depth_ = depth_ + 1; }
  ~ReentryGuard() { depth_ = depth_ - 1; }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;

  static bool inside() noexcept { return depth_ != 0; }

 private:
  static inline thread_local int depth_ __attribute__((tls_model("initial-exec"))) = 0;
};

}  // namespace fracgpu::shim
