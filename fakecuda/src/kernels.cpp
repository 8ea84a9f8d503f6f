// The simulated GPU's kernels (see kernels.h). Kernels that touch memory check their
// ranges against the allocation registry first: an out-of-bounds kernel on a real GPU
// raises a sticky CUDA_ERROR_ILLEGAL_ADDRESS, here too, instead of corrupting the host.
#include "kernels.h"

#include <array>
#include <limits>

#include "allocation_registry.h"
#include "graph.h"
#include "operations.h"
#include "stream_queue.h"

namespace fakecuda {
namespace {

constexpr CUdeviceptr kNoPointer = 0;

bool checked_bytes(uint64_t count, size_t element_size, size_t& bytes) {
  if (count > std::numeric_limits<size_t>::max() / element_size) return false;
  bytes = static_cast<size_t>(count) * element_size;
  return true;
}

bool device_range_ok(WorkScope& scope, CUdeviceptr pointer, uint64_t count, size_t element_size) {
  size_t bytes = 0;
  if (!checked_bytes(count, element_size, bytes)) return false;
  if (bytes == 0) return true;
  return pointer != kNoPointer && scope.memory.covers(pointer, bytes);
}

void spin_kernel(const KernelArgs& args, WorkScope& scope) {
  uint32_t microseconds = args.get<uint32_t>(0);
  scope.engine.occupy(static_cast<int64_t>(microseconds) * 1000);
}

void fill_kernel(const KernelArgs& args, WorkScope& scope) {
  auto dst = args.get<CUdeviceptr>(0);
  auto value = args.get<uint32_t>(8);
  auto count = args.get<uint64_t>(16);
  if (!device_range_ok(scope, dst, count, sizeof(uint32_t))) {
    scope.queue.fail(CUDA_ERROR_ILLEGAL_ADDRESS);
    return;
  }
  scope.engine.run_at_least(transfer_time_ns(count * sizeof(uint32_t)), [&] {
    auto* out = reinterpret_cast<uint32_t*>(dst);
    for (uint64_t i = 0; i < count; ++i) out[i] = value;
  });
}

void add_kernel(const KernelArgs& args, WorkScope& scope) {
  auto a = args.get<CUdeviceptr>(0);
  auto b = args.get<CUdeviceptr>(8);
  auto out = args.get<CUdeviceptr>(16);
  auto n = args.get<uint64_t>(24);
  if (!device_range_ok(scope, a, n, sizeof(float)) ||
      !device_range_ok(scope, b, n, sizeof(float)) ||
      !device_range_ok(scope, out, n, sizeof(float))) {
    scope.queue.fail(CUDA_ERROR_ILLEGAL_ADDRESS);
    return;
  }
  scope.engine.run_at_least(transfer_time_ns(n * 3 * sizeof(float)), [&] {
    const auto* x = reinterpret_cast<const float*>(a);
    const auto* y = reinterpret_cast<const float*>(b);
    auto* z = reinterpret_cast<float*>(out);
    for (uint64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
  });
}

void empty_kernel(const KernelArgs&, WorkScope&) {}

// cudaGraphSetConditional(handle, value) from a kernel of the graph using the handle.
// Outside a launch of such a graph the handle means nothing: an illegal access.
void set_condition_kernel(const KernelArgs& args, WorkScope& scope) {
  auto handle = args.get<uint64_t>(0);
  auto value = args.get<uint32_t>(8);
  if (!set_graph_condition(handle, value)) scope.queue.fail(CUDA_ERROR_ILLEGAL_ADDRESS);
}

// Decrements the uint32 at `counter` (unless 0) and sets the condition to counter != 0:
// the body of a WHILE node that runs as many times as the counter says.
void countdown_condition_kernel(const KernelArgs& args, WorkScope& scope) {
  auto handle = args.get<uint64_t>(0);
  auto counter = args.get<CUdeviceptr>(8);
  if (!device_range_ok(scope, counter, 1, sizeof(uint32_t))) {
    scope.queue.fail(CUDA_ERROR_ILLEGAL_ADDRESS);
    return;
  }
  uint32_t remaining = 0;
  scope.engine.run_at_least(transfer_time_ns(sizeof(uint32_t)), [&] {
    auto* value = reinterpret_cast<uint32_t*>(counter);
    if (*value != 0) --*value;
    remaining = *value;
  });
  if (!set_graph_condition(handle, remaining != 0 ? 1 : 0))
    scope.queue.fail(CUDA_ERROR_ILLEGAL_ADDRESS);
}

const std::array<KernelDef, 6> kKernels{{
    {"fracgpu_fake_spin", 1, {4}, spin_kernel},
    {"fracgpu_fake_fill", 3, {8, 4, 8}, fill_kernel},
    {"fracgpu_fake_add", 4, {8, 8, 8, 8}, add_kernel},
    {"fracgpu_fake_empty", 0, {}, empty_kernel},
    {"fracgpu_fake_set_condition", 2, {8, 4}, set_condition_kernel},
    {"fracgpu_fake_countdown_condition", 2, {8, 8}, countdown_condition_kernel},
}};

CUresult gather_from_buffer(const KernelDef& kernel, void** extra, KernelArgs& out) {
  void* buffer = nullptr;
  size_t* size = nullptr;
  constexpr int kMaxExtraPairs = 16;
  for (int i = 0; i < 2 * kMaxExtraPairs && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = extra[i + 1];
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      size = static_cast<size_t*>(extra[i + 1]);
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (buffer == nullptr || size == nullptr || *size < kernel.packed_size())
    return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(out.bytes, buffer, kernel.packed_size());
  return CUDA_SUCCESS;
}

}  // namespace

size_t KernelDef::param_offset(size_t index) const {
  size_t offset = 0;
  for (size_t i = 0; i <= index; ++i) {
    size_t size = param_sizes[i];
    offset = (offset + size - 1) / size * size;  // natural alignment
    if (i < index) offset += size;
  }
  return offset;
}

size_t KernelDef::packed_size() const {
  if (param_count == 0) return 0;
  return param_offset(param_count - 1) + param_sizes[param_count - 1];
}

const KernelDef* find_kernel(std::string_view name) {
  for (const KernelDef& kernel : kKernels) {
    if (name == kernel.name) return &kernel;
  }
  return nullptr;
}

CUresult gather_kernel_args(const KernelDef& kernel, void** kernel_params, void** extra,
                            KernelArgs& out) {
  if (kernel_params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (kernel.param_count == 0) return CUDA_SUCCESS;
  if (extra != nullptr) return gather_from_buffer(kernel, extra, out);
  if (kernel_params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < kernel.param_count; ++i) {
    if (kernel_params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(out.bytes + kernel.param_offset(i), kernel_params[i], kernel.param_sizes[i]);
  }
  return CUDA_SUCCESS;
}

void execute_kernel(const KernelDef& kernel, const KernelArgs& args, WorkScope& scope) {
  kernel.execute(args, scope);
  scope.engine.count_kernel();
}

}  // namespace fakecuda
