// cuGetProcAddress and cuGetProcAddress_v2: how CUDA 12/13 runtimes (and PyTorch, JAX,
// Triton, cuda-python) obtain every driver entry point. The driver answers first, so
// its choice of ABI for the requested cudaVersion and stream mode is kept; the answer
// is then swapped for our wrapper of that ABI (see ProcAddressResolver).
#include "core/shim_log.h"
#include "hook_bodies.h"
#include "shim_runtime.h"

static_assert(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM ==
              fracgpu::kProcAddressPerThreadStreamFlag);

namespace fracgpu::shim {
namespace {

void swap_for_wrapper(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) noexcept {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr) return;
  void* chosen = state()->proc_address.translate(symbol, *pfn, cuda_version, flags);
  if (chosen != *pfn)
    FRACGPU_LOG(LogLevel::kTrace, "cuGetProcAddress(%s, %d): wrapped", symbol, cuda_version);
  *pfn = chosen;
}

}  // namespace

CUresult HookBody<HookId::cuGetProcAddress>::call(PFN_cuGetProcAddress_v11030 real,
                                                  const char* symbol, void** pfn, int cuda_version,
                                                  cuuint64_t flags) noexcept {
  CUresult result = real(symbol, pfn, cuda_version, flags);
  if (result == CUDA_SUCCESS) swap_for_wrapper(symbol, pfn, cuda_version, flags);
  return result;
}

CUresult HookBody<HookId::cuGetProcAddress_v2>::call(
    PFN_cuGetProcAddress_v12000 real, const char* symbol, void** pfn, int cuda_version,
    cuuint64_t flags, CUdriverProcAddressQueryResult* status) noexcept {
  CUresult result = real(symbol, pfn, cuda_version, flags, status);
  if (result == CUDA_SUCCESS) swap_for_wrapper(symbol, pfn, cuda_version, flags);
  return result;
}

}  // namespace fracgpu::shim
