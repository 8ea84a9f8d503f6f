// Compile-only check of include/fracgpu/nvml_types.h against NVIDIA's real nvml.h (which
// CI machines do not have). run_memory_checks.sh compiles it first, as check 0:
//
//   g++ -std=c++17 -fsyntax-only -Iinclude -I/usr/local/cuda/targets/x86_64-linux/include
//       tests/gpu/nvml_layout_check.cpp   (one command line)
//
// Every static_assert names what differs. Nothing here runs.
#include <nvml.h>

#include <cstddef>
#include <type_traits>

#include "fracgpu/nvml_types.h"

namespace ours = fracgpu::nvml;

#define FRACGPU_SAME_FIELD(real, mine, field)                                 \
  static_assert(offsetof(real, field) == offsetof(mine, field),               \
                "offset of " #real "::" #field " differs from " #mine);       \
  static_assert(sizeof(real::field) == sizeof(mine::field),                   \
                "size of " #real "::" #field " differs");                     \
  static_assert(std::is_same_v<decltype(real::field), decltype(mine::field)>, \
                "type of " #real "::" #field " differs")

// nvmlMemory_t (nvmlDeviceGetMemoryInfo)
static_assert(sizeof(nvmlMemory_t) == sizeof(ours::Memory), "sizeof(nvmlMemory_t) differs");
static_assert(alignof(nvmlMemory_t) == alignof(ours::Memory), "alignof(nvmlMemory_t) differs");
FRACGPU_SAME_FIELD(nvmlMemory_t, ours::Memory, total);
FRACGPU_SAME_FIELD(nvmlMemory_t, ours::Memory, free);
FRACGPU_SAME_FIELD(nvmlMemory_t, ours::Memory, used);

// nvmlMemory_v2_t (nvmlDeviceGetMemoryInfo_v2)
static_assert(sizeof(nvmlMemory_v2_t) == sizeof(ours::MemoryV2), "sizeof(nvmlMemory_v2_t) differs");
static_assert(alignof(nvmlMemory_v2_t) == alignof(ours::MemoryV2),
              "alignof(nvmlMemory_v2_t) differs");
FRACGPU_SAME_FIELD(nvmlMemory_v2_t, ours::MemoryV2, version);
FRACGPU_SAME_FIELD(nvmlMemory_v2_t, ours::MemoryV2, total);
FRACGPU_SAME_FIELD(nvmlMemory_v2_t, ours::MemoryV2, reserved);
FRACGPU_SAME_FIELD(nvmlMemory_v2_t, ours::MemoryV2, free);
FRACGPU_SAME_FIELD(nvmlMemory_v2_t, ours::MemoryV2, used);
static_assert(nvmlMemory_v2 == ours::kMemoryV2Version, "nvmlMemory_v2 (struct version) differs");

// nvmlProcessInfo_t (nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3 / _v2): the
// broker's usage audit reads these.
static_assert(sizeof(nvmlProcessInfo_t) == sizeof(ours::ProcessInfo),
              "sizeof(nvmlProcessInfo_t) differs");
static_assert(alignof(nvmlProcessInfo_t) == alignof(ours::ProcessInfo),
              "alignof(nvmlProcessInfo_t) differs");
FRACGPU_SAME_FIELD(nvmlProcessInfo_t, ours::ProcessInfo, pid);
FRACGPU_SAME_FIELD(nvmlProcessInfo_t, ours::ProcessInfo, usedGpuMemory);
FRACGPU_SAME_FIELD(nvmlProcessInfo_t, ours::ProcessInfo, gpuInstanceId);
FRACGPU_SAME_FIELD(nvmlProcessInfo_t, ours::ProcessInfo, computeInstanceId);
static_assert(std::is_same_v<nvmlProcessInfo_v2_t, nvmlProcessInfo_t> ||
                  sizeof(nvmlProcessInfo_v2_t) == sizeof(ours::ProcessInfo),
              "sizeof(nvmlProcessInfo_v2_t) differs");
static_assert(sizeof(nvmlProcessInfo_v1_t) == sizeof(ours::ProcessInfoV1),
              "sizeof(nvmlProcessInfo_v1_t) differs");
FRACGPU_SAME_FIELD(nvmlProcessInfo_v1_t, ours::ProcessInfoV1, pid);
FRACGPU_SAME_FIELD(nvmlProcessInfo_v1_t, ours::ProcessInfoV1, usedGpuMemory);
static_assert(static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE) == ours::kValueNotAvailable,
              "NVML_VALUE_NOT_AVAILABLE differs");

// Return codes and sizes
static_assert(NVML_SUCCESS == ours::kSuccess, "NVML_SUCCESS differs");
static_assert(NVML_ERROR_UNINITIALIZED == ours::kErrorUninitialized,
              "NVML_ERROR_UNINITIALIZED differs");
static_assert(NVML_ERROR_INVALID_ARGUMENT == ours::kErrorInvalidArgument,
              "NVML_ERROR_INVALID_ARGUMENT differs");
static_assert(NVML_ERROR_NOT_SUPPORTED == ours::kErrorNotSupported,
              "NVML_ERROR_NOT_SUPPORTED differs");
static_assert(NVML_ERROR_NO_PERMISSION == ours::kErrorNoPermission,
              "NVML_ERROR_NO_PERMISSION differs");
static_assert(NVML_ERROR_NOT_FOUND == ours::kErrorNotFound, "NVML_ERROR_NOT_FOUND differs");
static_assert(NVML_ERROR_INSUFFICIENT_SIZE == ours::kErrorInsufficientSize,
              "NVML_ERROR_INSUFFICIENT_SIZE differs");
static_assert(NVML_ERROR_GPU_IS_LOST == ours::kErrorGpuIsLost, "NVML_ERROR_GPU_IS_LOST differs");
static_assert(NVML_ERROR_UNKNOWN == ours::kErrorUnknown, "NVML_ERROR_UNKNOWN differs");
static_assert(NVML_ERROR_FUNCTION_NOT_FOUND == ours::kErrorFunctionNotFound,
              "NVML_ERROR_FUNCTION_NOT_FOUND differs");
static_assert(NVML_ERROR_ARGUMENT_VERSION_MISMATCH == ours::kErrorArgumentVersionMismatch,
              "NVML_ERROR_ARGUMENT_VERSION_MISMATCH differs");
static_assert(NVML_DEVICE_UUID_V2_BUFFER_SIZE == ours::kUuidBufferSize,
              "NVML_DEVICE_UUID_V2_BUFFER_SIZE differs");
static_assert(sizeof(nvmlReturn_t) == sizeof(ours::Return), "nvmlReturn_t is not int-sized");
static_assert(sizeof(nvmlDevice_t) == sizeof(ours::Device), "nvmlDevice_t is not pointer-sized");

// The real functions take exactly the structs compared above (the shim's function-pointer
// types in nvml_types.h mirror these with Return = int and Device = an opaque pointer).
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMemoryInfo),
                             nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>,
              "nvmlDeviceGetMemoryInfo has another signature");
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMemoryInfo_v2),
                             nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*)>,
              "nvmlDeviceGetMemoryInfo_v2 has another signature");
static_assert(std::is_same_v<decltype(&nvmlDeviceGetUUID),
                             nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int)>,
              "nvmlDeviceGetUUID has another signature");
static_assert(std::is_same_v<decltype(&nvmlInit_v2), nvmlReturn_t (*)()>,
              "nvmlInit_v2 has another signature");
static_assert(std::is_same_v<decltype(&nvmlDeviceGetCount_v2), nvmlReturn_t (*)(unsigned int*)>,
              "nvmlDeviceGetCount_v2 has another signature");
static_assert(std::is_same_v<decltype(&nvmlDeviceGetHandleByIndex_v2),
                             nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>,
              "nvmlDeviceGetHandleByIndex_v2 has another signature");
static_assert(std::is_same_v<decltype(&nvmlDeviceGetComputeRunningProcesses_v3),
                             nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*)>,
              "nvmlDeviceGetComputeRunningProcesses_v3 has another signature");
static_assert(std::is_same_v<decltype(&nvmlDeviceGetGraphicsRunningProcesses_v3),
                             nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*)>,
              "nvmlDeviceGetGraphicsRunningProcesses_v3 has another signature");
// nvmlDeviceGetComputeRunningProcesses_v2 (declared by nvml.h only under
// NVML_NO_UNVERSIONED_FUNC_DEFS) takes nvmlProcessInfo_v2_t, checked equal above.
static_assert(std::is_same_v<decltype(&nvmlErrorString), const char* (*)(nvmlReturn_t)>,
              "nvmlErrorString has another signature");
static_assert(
    std::is_same_v<ours::GetMemoryInfoFn, ours::Return (*)(ours::Device, ours::Memory*)> &&
        std::is_same_v<ours::GetMemoryInfoV2Fn, ours::Return (*)(ours::Device, ours::MemoryV2*)> &&
        std::is_same_v<ours::GetUuidFn, ours::Return (*)(ours::Device, char*, unsigned int)>,
    "nvml_types.h function-pointer types changed: update this check");

int main() {
  return 0;
}
