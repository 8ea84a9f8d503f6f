// Loading the real CUDA driver, with the guard against resolving to ourselves.
#pragma once

#include <string>

#include "core/shim_config.h"

namespace fracgpu::shim {

struct LoadedDriver {
  void* handle = nullptr;
  std::string path;
};

// Tries each candidate from driver_locator in order; skips any file that is the shim
// itself and any library whose cuInit resolves into the shim. Logs what it tried when
// nothing loads.
LoadedDriver load_real_driver(const ShimConfig& config) noexcept;

// The shim's own file and load base (from dladdr on one of its functions).
const char* own_library_path() noexcept;
bool address_is_in_shim(const void* address) noexcept;

// glibc's dlopen, bypassing the shim's exported dlopen (which redirects libcuda names).
using DlopenFn = void* (*)(const char*, int);
DlopenFn real_dlopen() noexcept;

}  // namespace fracgpu::shim
