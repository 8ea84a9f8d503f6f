// The table of exported entry points (generated from entry_points.def by exports.cpp)
// and the cuGetProcAddress lookup built on it.
#pragma once

#include <cuda.h>

#include <span>

namespace fakecuda {

struct EntryPoint {
  const char* exported_name;  // e.g. "cuMemcpyHtoD_v2_ptds"
  const char* base_name;      // e.g. "cuMemcpyHtoD"
  int version;                // CUDA version of the PFN typedef, e.g. 7000
  bool per_thread;            // _ptsz / _ptds variant
  void* address;              // the exported symbol itself
};

std::span<const EntryPoint> entry_points();

// cuGetProcAddress semantics; `status` may be null (the v1 ABI has none).
CUresult get_proc_address(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status);

}  // namespace fakecuda
