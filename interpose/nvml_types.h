// The few NVML declarations the shim needs, written from NVIDIA's NVML API reference
// (no Debian package ships nvml.h). The GPU test suite compiles a check of these
// layouts against the real nvml.h (tests/gpu/nvml_layout_check.cpp).
#pragma once

#include <cstddef>

namespace fracgpu::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorArgumentVersionMismatch = 25;

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

// NVML_STRUCT_VERSION(Memory, 2): the struct size with the version in the top byte.
inline constexpr unsigned int kMemoryV2Version =
    static_cast<unsigned int>(sizeof(MemoryV2)) | (2u << 24);
inline constexpr unsigned int kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

using GetMemoryInfoFn = Return (*)(Device, Memory*);
using GetMemoryInfoV2Fn = Return (*)(Device, MemoryV2*);
using GetUuidFn = Return (*)(Device, char*, unsigned int);

static_assert(sizeof(Memory) == 24 && sizeof(MemoryV2) == 40 && offsetof(MemoryV2, total) == 8);

}  // namespace fracgpu::nvml
