// Lazy set-up, slow paths and the drainer threads of the compute policy (see
// compute_policy.h).
#include "core/compute_policy.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>

#include "core/shim_log.h"
#include "fracgpu/burst_guard.h"
#include "fracgpu/monotonic_clock.h"

namespace fracgpu {
namespace {

constexpr int64_t kDrainerIdleWaitNs = 1'000'000'000;
constexpr int64_t kBurstGapNs =
    200'000;  // a high tenant's launch after this long idle starts a burst
constexpr int64_t kGuardPollNs = 20'000;

// One step of waiting: a short sleep (never a spin: the thread it would take the CPU
// from may be the very tenant being waited for, on a small machine).
void pause_briefly() noexcept {
  const timespec pause{0, kGuardPollNs};
  clock_nanosleep(CLOCK_MONOTONIC, 0, &pause, nullptr);
}

// The broker stores guard_next_ns last: read first, it comes with the rest of its prediction.
BurstGuardView read_guard(const DeviceQuota& quota) noexcept {
  BurstGuardView guard;
  guard.next_ns = quota.guard_next_ns.load(std::memory_order_acquire);
  guard.period_ns = quota.guard_period_ns.load(std::memory_order_relaxed);
  guard.lead_ns = quota.guard_lead_ns.load(std::memory_order_relaxed);
  guard.late_ns = quota.guard_late_ns.load(std::memory_order_relaxed);
  guard.hold_ns = quota.guard_hold_ns.load(std::memory_order_relaxed);
  return guard;
}

struct CaptureQuery {
  const FenceOps* ops;
  CUstream stream;
};

bool stream_capturing(void* context) noexcept {
  auto* query = static_cast<CaptureQuery*>(context);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (query->ops->stream_is_capturing == nullptr) return false;
  return query->ops->stream_is_capturing(query->stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace

ComputePolicy::ComputePolicy(TenantLink& tenant, DeviceResolver& devices, const DriverCalls& calls,
                             const FenceOps& fence_ops, CaptureTracker& captures,
                             const std::string& doorbell_path)
    : tenant_(tenant),
      devices_(devices),
      calls_(calls),
      captures_(captures),
      fence_ops_(fence_ops) {
  doorbell_.set_path(doorbell_path);
  for (auto& gpu : gpus_) {
    gpu.owner = this;
    gpu.limiter.init(&fence_ops_, &captures_);
  }
  if (!fence_ops_.complete())
    FRACGPU_LOG(LogLevel::kWarn,
                "the CUDA driver lacks event functions; GPU work in flight is not bounded");
}

// First launch on a GPU: bind the gate to this process's slot and start the drainer.
void ComputePolicy::prepare(GpuCompute& gpu, int index) noexcept {
  std::lock_guard<std::mutex> lock(prepare_mutex_);
  if (gpu.ready.load(std::memory_order_relaxed)) return;
  gpu.gate.bind(&tenant_.quota()->devices[index], &tenant_.ledger_map()->devices[index],
                &tenant_.ledger_map()->schedule[tenant_.slot()][index], &doorbell_);
  gpu.gate.bind_liveness(tenant_.quota(), &tenant_.ledger_map()->processes[tenant_.slot()]);
  gpu.slot_generation.store(tenant_.slot_generation(), std::memory_order_relaxed);
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  if (pthread_create(&thread, &attr, &ComputePolicy::drainer_main, &gpu) != 0)
    FRACGPU_LOG(
        LogLevel::kWarn,
        "cannot start the drainer thread; slice handoffs will wait for the broker's timeout");
  pthread_attr_destroy(&attr);
  gpu.ready.store(true, std::memory_order_release);
}

// The process re-registered into another slot (TenantLink::slot_generation): the gate
// follows it. Checked on the slow path only: a grant word changes at every slice, so a
// moved process takes it within one.
void ComputePolicy::rebind_if_moved(GpuCompute& gpu, int index) noexcept {
  const uint32_t generation = tenant_.slot_generation();
  if (gpu.slot_generation.load(std::memory_order_relaxed) == generation) return;
  std::lock_guard<std::mutex> lock(prepare_mutex_);
  const uint32_t slot = tenant_.slot();
  gpu.gate.rebind_slot(&tenant_.ledger_map()->schedule[slot][index],
                       &tenant_.ledger_map()->processes[slot]);
  gpu.slot_generation.store(generation, std::memory_order_relaxed);
}

void ComputePolicy::note_context(GpuCompute& gpu) noexcept {
  CUcontext ctx = nullptr;
  const auto get_current = fence_ops_.ctx_get_current;
  if (get_current == nullptr || get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return;
  std::lock_guard<std::mutex> lock(gpu.contexts_mutex);
  if (std::find(gpu.contexts.begin(), gpu.contexts.end(), ctx) == gpu.contexts.end())
    gpu.contexts.push_back(ctx);
}

void ComputePolicy::pass_slow(GpuCompute& gpu, int index, CUstream stream) noexcept {
  if (tenant_.needs_registration()) {  // a forked child gets its own slot first
    std::string error;
    if (!tenant_.register_forked_child(&error)) {
      FRACGPU_LOG_CAPPED(LogLevel::kWarn, 4,
                         "cannot register this forked process (%s); launching unscheduled",
                         error.c_str());
      return;
    }
  }
  if (!gpu.ready.load(std::memory_order_acquire)) prepare(gpu, index);
  rebind_if_moved(gpu, index);
  note_context(gpu);
  CaptureQuery query{&fence_ops_, stream};
  bool new_epoch = false;
  gpu.gate.pass_slow(&stream_capturing, &query, &new_epoch);
  if (new_epoch) gpu.limiter.limit_changed();
}

void ComputePolicy::bursts_and_guard(GpuCompute& gpu) noexcept {
  const DeviceQuota& quota = gpu.gate.quota();
  const int64_t now = monotonic_ns();
  if (quota.priority.load(std::memory_order_relaxed) ==
      static_cast<uint32_t>(PriorityClass::kHigh)) {
    const int64_t previous = gpu.last_launch_ns.exchange(now, std::memory_order_relaxed);
    if (now - previous > kBurstGapNs) {
      const int64_t begin = gpu.burst_begin_ns.exchange(now, std::memory_order_relaxed);
      DeviceUsage& usage = gpu.gate.usage();
      usage.burst_span_ns.store(
          begin > 0 && previous >= begin ? static_cast<uint64_t>(previous - begin) : 0,
          std::memory_order_relaxed);
      usage.burst_start_ns.store(static_cast<uint64_t>(now), std::memory_order_release);
      doorbell_.ring();  // once per burst: the broker learns the high tenant's rhythm
    }
    return;
  }
  // Hold back a launch that would still run when the predicted burst comes (burst_guard.h).
  const BurstGuardView guard = read_guard(quota);
  const double kernel_ns = gpu.limiter.us_per_launch() * 1000.0;
  const double allowed_ns = static_cast<double>(gpu.gate.inflight_limit_us()) * 1000.0;
  if (!guard_holds(guard, now, kernel_ns, allowed_ns)) return;
  while (!guard_released(guard, read_guard(quota), monotonic_ns())) pause_briefly();
}

// Waits for what this process queued on the GPU since the last drain: synchronises
// every context it launched into, unless a stream capture is open (synchronising a
// context that holds a capturing stream would invalidate the capture, in every mode);
// then the fences of the in-flight limiter are waited for instead, which leaves at most
// the bounded work after the newest fence running into the next tenant's slice.
void ComputePolicy::drain(GpuCompute& gpu) noexcept {
  std::vector<CUcontext> contexts;
  {
    std::lock_guard<std::mutex> lock(gpu.contexts_mutex);
    contexts.swap(gpu.contexts);
  }
  const DriverCalls& calls = calls_;
  if (calls.cuCtxPushCurrent == nullptr || calls.cuCtxPopCurrent == nullptr ||
      calls.cuCtxSynchronize == nullptr)
    return;
  bool synchronised = true;
  for (CUcontext ctx : contexts) {
    synchronised = synchronised && captures_.run_unless_capturing([&] {
      if (calls.cuCtxPushCurrent(ctx) != CUDA_SUCCESS) return;  // destroyed meanwhile
      calls.cuCtxSynchronize();  // errors are the application's to see on its own calls
      CUcontext popped = nullptr;
      calls.cuCtxPopCurrent(&popped);
    });
  }
  if (!synchronised) gpu.limiter.wait_for_recorded();
}

void* ComputePolicy::drainer_main(void* arg) noexcept {
  auto& gpu = *static_cast<GpuCompute*>(arg);
  ComputePolicy& policy = *gpu.owner;
  // Unsafe calls of this thread (context synchronisation, event waits) must never be
  // charged to an application's global-mode capture.
  policy.captures_.relax_this_thread();
  uint32_t seen = 0;  // forces a look at the current word first
  for (;;) {
    const uint32_t word = gpu.gate.wait_for_change(seen, kDrainerIdleWaitNs);
    if (word == seen) continue;
    seen = word;
    if ((word & kGrantGranted) != 0) continue;
    policy.drain(gpu);
    gpu.gate.report_drained(grant_epoch(word));
  }
  return nullptr;
}

void ComputePolicy::forget_context(CUcontext ctx) noexcept {
  for (auto& gpu : gpus_) {
    if (!gpu.ready.load(std::memory_order_acquire)) continue;
    gpu.limiter.forget_context(ctx);
    std::lock_guard<std::mutex> lock(gpu.contexts_mutex);
    gpu.contexts.erase(std::remove(gpu.contexts.begin(), gpu.contexts.end(), ctx),
                       gpu.contexts.end());
  }
}

void ComputePolicy::after_fork_in_child() noexcept {
  new (&prepare_mutex_) std::mutex();
  for (auto& gpu : gpus_) {
    new (&gpu.contexts_mutex) std::mutex();
    gpu.contexts.clear();
    gpu.limiter.reset_after_fork();
    gpu.ready.store(false, std::memory_order_relaxed);
  }
}

}  // namespace fracgpu
