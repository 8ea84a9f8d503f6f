// A minimal simulated NVML (libnvidia-ml.so.1) for the tests of fracgpu's NVML memory
// hooks: one device whose UUID is the simulated GPU's device 0, reporting 16 GiB total
// with 1 GiB used. Only the entry points the tests call are provided; the declarations
// are fracgpu's own (interpose/nvml_types.h), checked against the real nvml.h on a GPU.
#include <cstring>

#include "nvml_types.h"

using fracgpu::nvml::Device;
using fracgpu::nvml::Memory;
using fracgpu::nvml::MemoryV2;

namespace {

constexpr unsigned long long kTotal = 16ull << 30;
constexpr unsigned long long kUsed = 1ull << 30;
// The simulated CUDA driver's device 0 UUID (bytes "fracgpufakegpu\0\0").
constexpr const char* kUuid = "GPU-66726163-6770-7566-616b-656770750000";
bool g_initialized = false;
Device device0() {
  return reinterpret_cast<Device>(0x1000);
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  g_initialized = true;
  return fracgpu::nvml::kSuccess;
}
int nvmlInit() {
  return nvmlInit_v2();
}
int nvmlShutdown() {
  g_initialized = false;
  return fracgpu::nvml::kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, Device* device) {
  if (!g_initialized) return fracgpu::nvml::kErrorUninitialized;
  if (index != 0 || device == nullptr) return fracgpu::nvml::kErrorInvalidArgument;
  *device = device0();
  return fracgpu::nvml::kSuccess;
}

int nvmlDeviceGetUUID(Device device, char* uuid, unsigned int length) {
  if (device != device0() || uuid == nullptr || length < std::strlen(kUuid) + 1) {
    return fracgpu::nvml::kErrorInvalidArgument;
  }
  std::strcpy(uuid, kUuid);
  return fracgpu::nvml::kSuccess;
}

int nvmlDeviceGetMemoryInfo(Device device, Memory* memory) {
  if (device != device0() || memory == nullptr) return fracgpu::nvml::kErrorInvalidArgument;
  *memory = Memory{kTotal, kTotal - kUsed, kUsed};
  return fracgpu::nvml::kSuccess;
}

int nvmlDeviceGetMemoryInfo_v2(Device device, MemoryV2* memory) {
  if (device != device0() || memory == nullptr) return fracgpu::nvml::kErrorInvalidArgument;
  if (memory->version != fracgpu::nvml::kMemoryV2Version)
    return fracgpu::nvml::kErrorArgumentVersionMismatch;
  memory->total = kTotal;
  memory->reserved = 256ull << 20;
  memory->used = kUsed;
  memory->free = kTotal - kUsed - memory->reserved;
  return fracgpu::nvml::kSuccess;
}

}  // extern "C"
