// The simulated GPU's properties: an H200-like device (compute capability 9.0, 132 SMs)
// with the memory size the shared segment was created with. Callers such as
// frameworks pick code paths from these values, so they must be plausible and
// consistent (e.g. cooperative launch, memory pools and VMM all reported supported,
// because the fake implements them).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fakecuda {

inline constexpr const char* kDeviceName = "fracgpu simulated GPU";
inline constexpr int kComputeMajor = 9;
inline constexpr int kComputeMinor = 0;
inline constexpr int kMultiprocessorCount = 132;

// Value of `attribute` for device `device`; false for an attribute outside the enum.
bool device_attribute(CUdevice_attribute attribute, int device, int& value);

CUuuid device_uuid(int device);

// "0000:BB:00.0", bus = device + 1.
void device_pci_bus_id(int device, char* out, int length);
// Device index of a PCI bus id string, or -1.
int device_from_pci_bus_id(const char* bus_id, int device_count);

}  // namespace fakecuda
