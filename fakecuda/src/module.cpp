// Function attributes and per-module function tables (see module.h).
#include "module.h"

#include <algorithm>

namespace fakecuda {
namespace {

constexpr int kDefaultDynamicShared = 48 * 1024;
constexpr int kMaxDynamicShared = 227 * 1024;
constexpr int kComputeVersion = 90;
constexpr int kThreadsPerMultiprocessor = 2048;
constexpr int kBlocksPerMultiprocessor = 32;
constexpr size_t kSharedPerMultiprocessor = 228 * 1024;
constexpr size_t kSharedReservedPerBlock = 1024;

int default_attribute(CUfunction_attribute attribute) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      return 1024;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      return 32;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      return kComputeVersion;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      return kDefaultDynamicShared;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      return -1;
    default:
      return 0;
  }
}

bool settable(CUfunction_attribute attribute) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return true;
    default:
      return false;
  }
}

}  // namespace

CUresult Function::get_attribute(CUfunction_attribute attribute, int& value) {
  if (attribute < 0 || attribute >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mutex_);
  auto it = overrides_.find(attribute);
  value = it != overrides_.end() ? it->second : default_attribute(attribute);
  return CUDA_SUCCESS;
}

CUresult Function::set_attribute(CUfunction_attribute attribute, int value) {
  if (!settable(attribute)) return CUDA_ERROR_INVALID_VALUE;
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
      (value < 0 || value > kMaxDynamicShared)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(mutex_);
  overrides_[attribute] = value;
  return CUDA_SUCCESS;
}

int Function::max_dynamic_shared_bytes() {
  int value = 0;
  get_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, value);
  return value;
}

int max_active_blocks(int block_size, size_t dynamic_shared_bytes) {
  if (block_size <= 0 || block_size > 1024) return 0;
  int by_threads = kThreadsPerMultiprocessor / block_size;
  int by_shared =
      static_cast<int>(kSharedPerMultiprocessor / (dynamic_shared_bytes + kSharedReservedPerBlock));
  return std::max(0, std::min({kBlocksPerMultiprocessor, by_threads, by_shared}));
}

CUresult Module::function(HandleRegistry& handles, const char* name, CUfunction& out) {
  const KernelDef* kernel = find_kernel(name);
  if (kernel == nullptr) return CUDA_ERROR_NOT_FOUND;
  std::lock_guard lock(mutex_);
  std::shared_ptr<Function>& slot = functions_[kernel->name];
  if (!slot) {
    slot = std::make_shared<Function>(kernel, handle());
    handles.add(slot);
  }
  out = slot->handle();
  return CUDA_SUCCESS;
}

void Module::forget_functions(HandleRegistry& handles) {
  std::lock_guard lock(mutex_);
  for (auto& [name, function] : functions_) handles.take<Function>(function.get());
  functions_.clear();
}

}  // namespace fakecuda
