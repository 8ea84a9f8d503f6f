// The few NVML declarations fracgpu needs, written from NVIDIA's NVML API reference (no
// Debian package ships nvml.h): the shim's memory hooks (interpose/nvml_memory.cpp), the
// broker's usage audit (broker/core/nvml_port.cpp) and the simulated NVML
// (fakecuda/nvml/). The GPU test suite compiles a check of these layouts and signatures
// against the real nvml.h (tests/gpu/nvml_layout_check.cpp).
#pragma once

#include <cstddef>

namespace fracgpu::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorArgumentVersionMismatch = 25;
inline constexpr Return kErrorUnknown = 999;

using Device = struct DeviceOpaque*;  // nvmlDevice_t

struct Memory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct MemoryV2 {  // nvmlMemory_v2_t
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};

// nvmlProcessInfo_t (= nvmlProcessInfo_v2_t): what nvmlDeviceGetComputeRunningProcesses_v3
// and _v2 (and the Graphics variants) fill, one per process with a context on the GPU.
struct ProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes, or kValueNotAvailable
  unsigned int gpuInstanceId;        // MIG: 0xFFFFFFFF when not in MIG mode
  unsigned int computeInstanceId;
};

// nvmlProcessInfo_v1_t: the unversioned nvmlDeviceGetComputeRunningProcesses (v1 ABI).
struct ProcessInfoV1 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};

// NVML_VALUE_NOT_AVAILABLE as an unsigned long long (e.g. usedGpuMemory under WDDM or
// without the privilege to see another user's process).
inline constexpr unsigned long long kValueNotAvailable = ~0ull;

// NVML_STRUCT_VERSION(Memory, 2): the struct size with the version in the top byte.
inline constexpr unsigned int kMemoryV2Version =
    static_cast<unsigned int>(sizeof(MemoryV2)) | (2u << 24);
inline constexpr unsigned int kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

using GetMemoryInfoFn = Return (*)(Device, Memory*);
using GetMemoryInfoV2Fn = Return (*)(Device, MemoryV2*);
using GetUuidFn = Return (*)(Device, char*, unsigned int);
using InitFn = Return (*)();                                   // nvmlInit_v2, nvmlShutdown
using GetCountFn = Return (*)(unsigned int*);                  // nvmlDeviceGetCount_v2
using GetHandleByIndexFn = Return (*)(unsigned int, Device*);  // ..._GetHandleByIndex_v2
using GetRunningProcessesFn = Return (*)(Device, unsigned int*, ProcessInfo*);  // _v3 and _v2
using ErrorStringFn = const char* (*)(Return);                                  // nvmlErrorString

static_assert(sizeof(Memory) == 24 && sizeof(MemoryV2) == 40 && offsetof(MemoryV2, total) == 8);
static_assert(sizeof(ProcessInfo) == 24 && offsetof(ProcessInfo, usedGpuMemory) == 8 &&
              offsetof(ProcessInfo, gpuInstanceId) == 16 &&
              offsetof(ProcessInfo, computeInstanceId) == 20);
static_assert(sizeof(ProcessInfoV1) == 16);

}  // namespace fracgpu::nvml
