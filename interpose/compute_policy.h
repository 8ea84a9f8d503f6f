// ComputePolicy: the shim's side of compute scheduling, shared by every gated hook
// (launch_hooks.h). It exists when this process belongs to a tenant. Per tenant GPU
// it keeps the launch gate (grant word of the broker), the in-flight limiter and a
// drainer thread: when the broker revokes the grant, the drainer synchronises the
// contexts this process launched into and reports "drained", which is when the broker
// charges the slice and hands the GPU on. The drainer never breaks a stream capture: it
// runs in relaxed capture mode and, while a capture is open, waits for the limiter's
// fences instead of synchronising the context (capture_tracker.h). Everything is set up lazily at the first
// launch on a GPU; a process that never launches costs nothing.
// Per launch while granted: resolve the device (one relaxed load for a one-GPU
// process), gate (one acquire load + compare), limiter (one fetch_add + two loads).
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "core/capture_tracker.h"
#include "core/grant_gate.h"
#include "core/inflight_limiter.h"
#include "driver_calls.h"
#include "memory_policy.h"

namespace fracgpu::shim {

class ComputePolicy {
 public:
  // After MemoryPolicy::start succeeded with a tenant; `driver` is the real libcuda.
  static void start(MemoryPolicy& memory, void* driver);
  static ComputePolicy* active() { return instance_; }

  // Before a gated call on `stream`: waits while the tenant is not granted this GPU.
  // Returns the tenant device index the call is charged to, or kNoTenantDevice.
  int before_launch(CUstream stream, bool per_thread_stream) noexcept {
    TenantDevice device;
    if (!memory_.current_device(&device) || device.index == kNoTenantDevice) return kNoTenantDevice;
    GpuCompute& gpu = gpus_[static_cast<std::size_t>(device.index)];
    if (__builtin_expect(!gpu.ready.load(std::memory_order_acquire) || !gpu.gate.unchanged(), 0))
      pass_slow(gpu, device.index, explicit_stream(stream, per_thread_stream));
    if (__builtin_expect(gpu.gate.burst_work(), 0)) bursts_and_guard(gpu);
    return device.index;
  }
  // After it: counts the launch for the in-flight bound (may wait on a fence). A launch
  // into a capture did not run: it is neither counted nor fenced (capture_tracker.h).
  void after_launch(int index, CUstream stream, bool per_thread_stream, CUresult rc) noexcept {
    if (index == kNoTenantDevice || rc != CUDA_SUCCESS) return;
    GpuCompute& gpu = gpus_[static_cast<std::size_t>(index)];
    const CUstream named = explicit_stream(stream, per_thread_stream);
    if (__builtin_expect(captures_.any_open(), 0) && captures_.capturing(named)) return;
    gpu.limiter.after_launch(named, gpu.gate.inflight_limit_us());
  }
  // A context is going away: stop draining it and drop its fence events.
  void forget_context(CUcontext ctx) noexcept;

 private:
  struct GpuCompute {
    std::atomic<bool> ready{false};
    GrantGate gate;
    InflightLimiter limiter;
    std::mutex contexts_mutex;
    std::vector<CUcontext> contexts;  // launched into since the last drain
    std::atomic<int64_t> last_launch_ns{0};  // high tenants: to recognise the start of a burst
    std::atomic<int64_t> burst_begin_ns{0};  // high tenants: start of the current burst
  };

  explicit ComputePolicy(MemoryPolicy& memory) : memory_(memory), captures_(CaptureTracker::process()) {}
  // The per-thread default stream is a different stream from the legacy one: name it.
  static CUstream explicit_stream(CUstream stream, bool per_thread) noexcept {
    return (stream == nullptr && per_thread) ? CU_STREAM_PER_THREAD : stream;
  }
  void pass_slow(GpuCompute& gpu, int index, CUstream stream) noexcept;
  // High tenant: report the first launch after a pause. Others: hold a launch that would
  // still be running when a regular high-priority burst is due (see tenant_segment.h).
  void bursts_and_guard(GpuCompute& gpu) noexcept;
  void prepare(GpuCompute& gpu, int index) noexcept;
  void note_context(GpuCompute& gpu) noexcept;
  static void* drainer_main(void* gpu) noexcept;
  void drain(GpuCompute& gpu) noexcept;
  void after_fork_in_child() noexcept;

  static inline ComputePolicy* instance_ = nullptr;
  MemoryPolicy& memory_;
  CaptureTracker& captures_;
  FenceOps fence_ops_;
  Doorbell doorbell_;
  std::mutex prepare_mutex_;
  std::array<GpuCompute, kMaxDevices> gpus_;
};

}  // namespace fracgpu::shim
