// TenantPolicies: everything this process enforces for its tenant, wired once — the
// device lookup, the memory charges (device memory, arrays, pools, contexts, VMM, graph
// memory) and compute scheduling — over one TenantLink and the injected driver calls.
// The preload layer creates it at the first CUDA call when the process belongs to a
// tenant (none otherwise: every hook then forwards) and each hook body makes one call
// into it. Unit tests build one over fakes. Lives until exit (never destroyed, so
// exit-time calls from other threads stay safe).
#pragma once

#include <cuda.h>

#include <string>

#include "core/app_vmm.h"
#include "core/capture_tracker.h"
#include "core/compute_policy.h"
#include "core/context_memory.h"
#include "core/device_resolver.h"
#include "core/driver_calls.h"
#include "core/graph_memory.h"
#include "core/memory_policy.h"
#include "core/swap_engine.h"
#include "core/tenant_link.h"
#include "core/vmm_memory.h"

namespace fracgpu {

struct TenantPolicies {
  // `calls` and `fence_ops` must outlive the policies (the preload layer keeps them with
  // the session); `doorbell_path` is the tenant's doorbell socket.
  TenantPolicies(TenantLink& tenant, const DriverCalls& calls, const FenceOps& fence_ops,
                 CaptureTracker& tracker, const std::string& doorbell_path)
      : captures(tracker),
        devices(calls, tenant.quota()),
        memory(tenant, calls, devices, tracker),
        contexts(memory),
        vmm(memory),
        graphs(memory),
        compute(tenant, devices, calls, fence_ops, tracker, doorbell_path),
        swap(memory, tracker, fence_ops) {
    memory.attach_swap(&swap);
  }

  // cuCtxDestroy*: the context leaves compute scheduling, then its footprint is released.
  CUresult destroy_context(CUcontext context, DriverCall call) noexcept {
    compute.forget_context(context);
    return contexts.destroy(context, call);
  }

  // cuGraphLaunch*: gated like a kernel launch; a graph's memory nodes are charged when
  // its launch makes the driver back them.
  template <bool kFenced, typename Call>
  CUresult launch_graph(CUgraphExec exec, CUstream stream, bool per_thread_stream,
                        Call&& call) noexcept {
    return graphs.launch(exec,
                         [&] { return compute.launch<kFenced>(stream, per_thread_stream, call); });
  }

  CaptureTracker& captures;
  DeviceResolver devices;
  MemoryPolicy memory;
  ContextMemory contexts;
  VmmMemory vmm;
  GraphMemory graphs;
  ComputePolicy compute;
  SwapEngine swap;
  // The application's own VMM (cuMemCreate/Map/SetAccess...): charged by `vmm`, swapped by
  // `swap` where core/app_vmm.h finds it swappable.
  AppVmm app_vmm{memory, vmm, swap};
};

}  // namespace fracgpu
