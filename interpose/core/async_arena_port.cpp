// Implementation of SwapArenaPort (see async_arena_port.h).
#include "core/async_arena_port.h"

namespace fracgpu {

// The granule SwapEngine backs allocations with (the same request it makes), and only
// when the ledger's host pages divide it.
uint64_t SwapArenaPort::granularity(const TenantDevice& device) {
  if (calls_.cuMemGetAllocationGranularity == nullptr) return 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device.ordinal;
  size_t granule = 0;
  if (calls_.cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
      CUDA_SUCCESS)
    return 0;
  return granule != 0 && granule % kSwapPage == 0 ? granule : 0;
}

std::optional<CUresult> SwapArenaPort::allocate_chunk(const TenantDevice& device, uint64_t bytes,
                                                      CUdeviceptr* base) {
  return swap_.allocate(device, base, bytes);
}

void SwapArenaPort::free_chunk(CUdeviceptr base) {
  swap_.free(base);
}

CUcontext SwapArenaPort::current_context() {
  CUcontext ctx = nullptr;
  if (calls_.cuCtxGetCurrent != nullptr) calls_.cuCtxGetCurrent(&ctx);
  return ctx;
}

CUevent SwapArenaPort::create_event() {
  CUevent event = nullptr;
  if (calls_.cuEventCreate == nullptr ||
      calls_.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
    return nullptr;
  return event;
}

CUresult SwapArenaPort::record_event(CUevent event, CUstream stream) {
  return calls_.cuEventRecord != nullptr ? calls_.cuEventRecord(event, stream)
                                         : CUDA_ERROR_NOT_SUPPORTED;
}

void SwapArenaPort::events_done(const CUevent* events, bool* done, std::size_t n) {
  if (calls_.cuEventQuery == nullptr) return;
  CaptureTracker::RelaxedScope relaxed(&captures_);  // a query is "unsafe" in global capture
  for (std::size_t i = 0; i < n; ++i) done[i] = calls_.cuEventQuery(events[i]) == CUDA_SUCCESS;
}

void SwapArenaPort::destroy_event(CUevent event) {
  if (calls_.cuEventDestroy != nullptr) calls_.cuEventDestroy(event);
}

void SwapArenaPort::synchronize_context() {
  captures_.run_unless_capturing([&] {
    if (calls_.cuCtxSynchronize != nullptr) calls_.cuCtxSynchronize();
  });
}

}  // namespace fracgpu
