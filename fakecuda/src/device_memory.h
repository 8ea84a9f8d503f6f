// Allocation and release of device and host memory. Device memory is charged to the
// shared device first (so an allocation that does not fit fails with
// CUDA_ERROR_OUT_OF_MEMORY before anything is mapped) and then backed by an anonymous
// MAP_NORESERVE mapping: CUdeviceptr is a real address, copies and kernels move real
// data, and pages nobody touches cost no RAM. Host allocations are never charged.
#pragma once

#include <cuda.h>

#include "allocation_registry.h"

namespace fakecuda {

class Driver;
class Context;

struct DeviceAllocationRequest {
  size_t bytes = 0;
  MemoryKind kind = MemoryKind::Device;
  CUmemoryPool pool = nullptr;
  bool low_address = false;  // legacy 32-bit ABIs need addresses below 4 GiB
  int device = -1;           // -1: the context's device (pools may name another)
};

CUresult allocate_device_memory(Driver& driver, Context& context,
                                const DeviceAllocationRequest& request, CUdeviceptr& out);
CUresult allocate_host_memory(Driver& driver, Context& context, size_t bytes, unsigned flags,
                              bool low_address, void*& out);

// Unmaps and uncharges an allocation already removed from the registry.
void release_allocation(Driver& driver, const Allocation& allocation);

// cuMemFree: waits for in-flight work of this process (it may still use the memory),
// then frees. CUDA_ERROR_INVALID_VALUE for anything that is not a device allocation.
// A graph allocation still allocated after its graph's launch goes back to the graph
// memory pool (mem_pool.h).
CUresult free_device_memory(Driver& driver, CUdeviceptr pointer);
CUresult free_host_memory(Driver& driver, void* pointer);

// Frees everything a context owns (context destruction).
void free_context_memory(Driver& driver, CUcontext context);

// Waits until every context of this process has finished the work submitted so far.
void drain_all_contexts(Driver& driver);

}  // namespace fakecuda
