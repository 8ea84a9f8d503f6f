// The kernels the simulated GPU knows. Real cubins cannot run here, so any module
// image loads and these names resolve in every module:
//   fracgpu_fake_spin  (uint32_t microseconds)                 occupies the device
//   fracgpu_fake_fill  (CUdeviceptr dst, uint32_t value, uint64_t count)
//   fracgpu_fake_add   (CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, uint64_t n)  float32
//   fracgpu_fake_empty ()                                      ~0 time, for launch rates
//   fracgpu_fake_set_condition (uint64_t handle, uint32_t value)
//                      cudaGraphSetConditional: sets a conditional node's handle (graph.h)
//   fracgpu_fake_countdown_condition (uint64_t handle, CUdeviceptr counter)
//                      decrements the uint32 *counter (if not 0), sets the handle to *counter != 0
// Arguments are copied at launch (the caller may reuse its parameter storage at once),
// from kernelParams or from an `extra` CU_LAUNCH_PARAM_BUFFER_POINTER buffer.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace fakecuda {

struct WorkScope;

inline constexpr size_t kMaxKernelParams = 4;

struct KernelArgs {
  alignas(8) unsigned char bytes[32] = {};

  template <typename T>
  T get(size_t offset) const {
    T value;
    std::memcpy(&value, bytes + offset, sizeof(T));
    return value;
  }
};

struct KernelDef {
  const char* name;
  size_t param_count;
  size_t param_sizes[kMaxKernelParams];
  void (*execute)(const KernelArgs& args, WorkScope& scope);

  // Offset of parameter i in the packed (naturally aligned) argument buffer.
  size_t param_offset(size_t index) const;
  size_t packed_size() const;
};

const KernelDef* find_kernel(std::string_view name);

// Copies the launch arguments; CUDA_ERROR_INVALID_VALUE if they are missing or malformed.
CUresult gather_kernel_args(const KernelDef& kernel, void** kernel_params, void** extra,
                            KernelArgs& out);

// Runs one launch on the executor: validates addresses, occupies the device.
void execute_kernel(const KernelDef& kernel, const KernelArgs& args, WorkScope& scope);

}  // namespace fakecuda
