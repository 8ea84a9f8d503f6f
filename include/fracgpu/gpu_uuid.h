// A GPU's UUID as text, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (how nvidia-smi -L and
// CUDA_VISIBLE_DEVICES write it), from the 16 bytes of a CUuuid. The one formatting used
// by the broker (inventory), the shim (matching devices against the quota), the simulated
// driver and the test programs, so that all of them compare the same strings.
#pragma once

#include <cstdio>
#include <string>

namespace fracgpu {

inline std::string format_gpu_uuid(const void* uuid_bytes) {
  const auto* b = static_cast<const unsigned char*>(uuid_bytes);
  char text[48];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

}  // namespace fracgpu
