// cuGetProcAddress / cuGetProcAddress_v2 with the real driver's semantics: the caller
// names a base symbol ("cuMemAlloc") and the CUDA version it was built for; it gets the
// newest ABI version not newer than that, or its per-thread-default-stream variant
// when it asks for one and one exists. An unknown symbol and a symbol that only exists
// in newer versions are told apart through CUdriverProcAddressQueryResult.
#include <cstring>

#include "api_support.h"
#include "exports.h"

namespace fakecuda {
namespace {

// Newest plain (non-per-thread) version of `symbol` that is <= `limit`; 0 if none.
int newest_plain_version(const char* symbol, int limit) {
  int best = 0;
  for (const EntryPoint& entry : entry_points()) {
    if (!entry.per_thread && entry.version <= limit && entry.version > best &&
        std::strcmp(entry.base_name, symbol) == 0) {
      best = entry.version;
    }
  }
  return best;
}

const EntryPoint* plain_entry(const char* symbol, int version) {
  for (const EntryPoint& entry : entry_points()) {
    if (!entry.per_thread && entry.version == version && std::strcmp(entry.base_name, symbol) == 0)
      return &entry;
  }
  return nullptr;
}

// The per-thread variant that stands for plain version `plain_version`: the one whose
// own version maps back to it (its newest plain version not newer than itself).
const EntryPoint* per_thread_entry(const char* symbol, int plain_version, int cuda_version) {
  for (const EntryPoint& entry : entry_points()) {
    if (!entry.per_thread || entry.version > cuda_version ||
        std::strcmp(entry.base_name, symbol) != 0)
      continue;
    if (newest_plain_version(symbol, entry.version) == plain_version) return &entry;
  }
  return nullptr;
}

bool symbol_known(const char* symbol) {
  for (const EntryPoint& entry : entry_points()) {
    if (std::strcmp(entry.base_name, symbol) == 0) return true;
  }
  return false;
}

CUresult not_found(void** pfn, CUdriverProcAddressQueryResult* status,
                   CUdriverProcAddressQueryResult why) {
  *pfn = nullptr;
  if (status != nullptr) *status = why;
  return CUDA_ERROR_NOT_FOUND;
}

}  // namespace

CUresult get_proc_address(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (symbol == nullptr || pfn == nullptr || cuda_version <= 0 || (flags & ~kKnownFlags) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!symbol_known(symbol)) return not_found(pfn, status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  int version = newest_plain_version(symbol, cuda_version);
  if (version == 0) return not_found(pfn, status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  const EntryPoint* entry = plain_entry(symbol, version);
  if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0) {
    const EntryPoint* per_thread = per_thread_entry(symbol, version, cuda_version);
    if (per_thread != nullptr) entry = per_thread;
  }
  *pfn = entry->address;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace fakecuda

using fakecuda::get_proc_address;

extern "C" CUresult fakecuda_impl_cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                                   cuuint64_t flags) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, nullptr);
}

extern "C" CUresult fakecuda_impl_cuGetProcAddress_v2(
    const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult* symbolStatus) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}
