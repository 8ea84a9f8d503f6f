// ComputePolicy: the shim's side of compute scheduling, shared by every gated hook
// (launch_hooks.h). It exists when this process belongs to a tenant. Per tenant GPU
// it keeps the launch gate (grant word of the broker), the in-flight limiter and a
// drainer thread: when the broker revokes the grant, the drainer synchronises the
// contexts this process launched into and reports "drained", which is when the broker
// charges the slice and hands the GPU on. The drainer never breaks a stream capture: it
// runs in relaxed capture mode and, while a capture is open, waits for the limiter's
// fences instead of synchronising the context (capture_tracker.h). Everything is set up lazily at
// the first launch on a GPU; a process that never launches costs nothing. Per launch while granted:
// resolve the device (one relaxed load for a one-GPU process), gate (one acquire load + compare),
// limiter (one fetch_add + two loads). Injected: the TenantLink (quota and ledger segments, slot,
// registration after fork), the DeviceResolver, DriverCalls (context push/pop/synchronise for the
// drainer), FenceOps (the limiter's events) and the CaptureTracker; fork handling is the preload
// layer's (it calls after_fork_in_child).
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "core/capture_tracker.h"
#include "core/device_resolver.h"
#include "core/doorbell.h"
#include "core/driver_calls.h"
#include "core/grant_gate.h"
#include "core/inflight_limiter.h"
#include "core/launch_profile.h"
#include "core/tenant_link.h"

namespace fracgpu {

class ComputePolicy {
 public:
  // `doorbell_path`: the tenant's doorbell socket (beside its tenant socket).
  ComputePolicy(TenantLink& tenant, DeviceResolver& devices, const DriverCalls& calls,
                const FenceOps& fence_ops, CaptureTracker& captures,
                const std::string& doorbell_path);
  ComputePolicy(const ComputePolicy&) = delete;
  ComputePolicy& operator=(const ComputePolicy&) = delete;

  // A gated call (`call` is the real one): waits for the grant, submits, and counts the
  // submission for the in-flight bound unless `kFenced` is false (no stream to fence).
  template <bool kFenced, typename Call>
  CUresult launch(CUstream stream, bool per_thread_stream, Call&& call) noexcept {
    const int index = before_launch(stream, per_thread_stream);
    FRACGPU_LAUNCH_MARK(kGated);
    const CUresult rc = call();
    FRACGPU_LAUNCH_MARK(kSectionLeft);
    if constexpr (kFenced) after_launch(index, stream, per_thread_stream, rc);
    FRACGPU_LAUNCH_MARK(kCounted);
    return rc;
  }

  // Before a gated call on `stream`: waits while the tenant is not granted this GPU.
  // Returns the tenant device index the call is charged to, or kNoTenantDevice.
  int before_launch(CUstream stream, bool per_thread_stream) noexcept {
    TenantDevice device;
    if (!devices_.current(&device) || device.index == kNoTenantDevice) return kNoTenantDevice;
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
  // The child of fork() has no drainer threads and a slot of its own (registered at its
  // first launch or allocation): every GPU starts again from scratch.
  void after_fork_in_child() noexcept;

  // Launches counted for the in-flight bound on a tenant device (tests and status).
  uint64_t counted_launches(int index) const noexcept {
    return index < 0 ? 0 : gpus_[static_cast<std::size_t>(index)].limiter.launches();
  }

 private:
  struct GpuCompute {
    ComputePolicy* owner = nullptr;
    std::atomic<bool> ready{false};
    GrantGate gate;
    InflightLimiter limiter;
    std::mutex contexts_mutex;
    std::vector<CUcontext> contexts;           // launched into since the last drain
    std::atomic<int64_t> last_launch_ns{0};    // high tenants: to recognise the start of a burst
    std::atomic<int64_t> burst_begin_ns{0};    // high tenants: start of the current burst
    std::atomic<uint32_t> slot_generation{0};  // TenantLink::slot_generation the gate is bound to
  };

  void pass_slow(GpuCompute& gpu, int index, CUstream stream) noexcept;
  // High tenant: report the first launch after a pause. Others: hold a launch that would
  // still be running when a regular high-priority burst is due (see tenant_segment.h).
  void bursts_and_guard(GpuCompute& gpu) noexcept;
  void prepare(GpuCompute& gpu, int index) noexcept;
  void rebind_if_moved(GpuCompute& gpu, int index) noexcept;
  void note_context(GpuCompute& gpu) noexcept;
  static void* drainer_main(void* gpu) noexcept;
  void drain(GpuCompute& gpu) noexcept;

  TenantLink& tenant_;
  DeviceResolver& devices_;
  const DriverCalls& calls_;
  CaptureTracker& captures_;
  const FenceOps fence_ops_;
  Doorbell doorbell_;
  std::mutex prepare_mutex_;
  std::array<GpuCompute, kMaxDevices> gpus_;
};

}  // namespace fracgpu
