// Device query entry points: enumeration, name, UUID, attributes, total memory, PCI
// ids and peer capabilities of the simulated devices. Device count and memory come
// from the shared segment, so every process sees the same machine.
#include <algorithm>
#include <cstring>

#include "api_support.h"
#include "device_attributes.h"

using namespace fakecuda;

namespace {

// Runs body(Driver&, physical device) after validating the device ordinal (an ordinal
// among the devices CUDA_VISIBLE_DEVICES leaves visible).
template <typename Body>
CUresult with_device(CUdevice device, Body&& body) {
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
    return body(driver, static_cast<int>(driver.physical(device)));
  });
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_device(ordinal, [&](Driver&, int) {
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    *count = static_cast<int>(driver.device_count());
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  return with_device(dev, [&](Driver&, int) {
    size_t copy = std::min(std::strlen(kDeviceName), static_cast<size_t>(len) - 1);
    std::memcpy(name, kDeviceName, copy);
    name[copy] = '\0';
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_device(dev, [&](Driver&, int physical) {
    *uuid = device_uuid(physical);
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  return fakecuda_impl_cuDeviceGetUuid_v2(uuid, dev);
}

extern "C" CUresult fakecuda_impl_cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib,
                                                       CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_device(dev, [&](Driver&, int physical) {
    return device_attribute(attrib, physical, *pi) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_device(dev, [&](Driver& driver, int physical) {
    *bytes = driver.memory().capacity(static_cast<uint32_t>(physical));
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t total = 0;
  CUresult status = fakecuda_impl_cuDeviceTotalMem_v2(&total, dev);
  if (status != CUDA_SUCCESS) return status;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = static_cast<unsigned>(std::min<size_t>(total, 0xffffffffu));  // the v1 ABI saturates
  return CUDA_SUCCESS;
}

extern "C" CUresult fakecuda_impl_cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  return with_device(dev, [&](Driver&, int physical) {
    device_pci_bus_id(physical, pciBusId, len);
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    int physical =
        device_from_pci_bus_id(pciBusId, static_cast<int>(driver.physical_device_count()));
    int ordinal = physical < 0 ? -1 : driver.ordinal_of(static_cast<uint32_t>(physical));
    if (ordinal < 0) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev,
                                                        CUdevice peerDev) {
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(dev) || !driver.valid_device(peerDev))
      return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev ? 1 : 0;  // all simulated GPUs share one NVLink island
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib,
                                                          CUdevice srcDevice, CUdevice dstDevice) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(srcDevice) || !driver.valid_device(dstDevice) ||
        srcDevice == dstDevice) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    switch (attrib) {
      case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
        *value = 0;
        return CUDA_SUCCESS;
      case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
      case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
      case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
        *value = 1;
        return CUDA_SUCCESS;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_device(dev, [&](Driver&, int) {
    *major = kComputeMajor;
    *minor = kComputeMinor;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_device(dev, [&](Driver&, int) {
    *prop = CUdevprop{};
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->sharedMemPerBlock = 49152;
    prop->totalConstantMemory = 65536;
    prop->SIMDWidth = 32;
    prop->memPitch = 2147483647;
    prop->regsPerBlock = 65536;
    prop->clockRate = 1980000;
    prop->textureAlign = 512;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetExecAffinitySupport(int* pi, CUexecAffinityType type,
                                                                 CUdevice dev) {
  if (pi == nullptr || type >= CU_EXEC_AFFINITY_TYPE_MAX) return CUDA_ERROR_INVALID_VALUE;
  return with_device(dev, [&](Driver&, int) {
    *pi = 0;  // SM partitioning (green contexts / MPS affinity) is not simulated
    return CUDA_SUCCESS;
  });
}
