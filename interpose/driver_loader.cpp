// Finds and loads the real CUDA driver for the shim (see driver_loader.h). Runs once,
// inside initialisation; nothing here is on a hot path.
#include "driver_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <atomic>

#include "core/driver_locator.h"
#include "core/shim_log.h"

extern "C" void* fracgpu_real_dlopen_fn;  // defined in dlopen_redirect.cpp

namespace fracgpu::shim {
namespace {

Dl_info own_info() noexcept {
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&own_library_path), &info);
  return info;
}

bool same_file(const char* a, const char* b) noexcept {
  struct stat sa {
  }, sb{};
  if (a == nullptr || b == nullptr || ::stat(a, &sa) != 0 || ::stat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// A copy of the shim installed under the driver's name (another file, so neither the
// inode nor the address checks catch it) exports the NVML hooks from its own object;
// the real driver never defines NVML functions.
bool is_a_fracgpu_shim(void* handle) noexcept {
  void* marker = dlsym(handle, "nvmlDeviceGetMemoryInfo_v2");
  Dl_info marker_info{}, init_info{};
  void* init = dlsym(handle, "cuInit");
  return marker != nullptr && init != nullptr && dladdr(marker, &marker_info) != 0 &&
         dladdr(init, &init_info) != 0 && marker_info.dli_fbase == init_info.dli_fbase;
}

void* try_load(const std::string& path) noexcept {
  if (same_file(path.c_str(), own_library_path())) {
    FRACGPU_LOG(LogLevel::kDebug, "skipping %s: it is the fracgpu shim itself", path.c_str());
    return nullptr;
  }
  void* handle = real_dlopen()(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    FRACGPU_LOG(LogLevel::kDebug, "cannot load %s: %s", path.c_str(), dlerror());
    return nullptr;
  }
  void* init = dlsym(handle, "cuInit");
  if (init == nullptr || address_is_in_shim(init) || is_a_fracgpu_shim(handle)) {
    FRACGPU_LOG(LogLevel::kDebug, "skipping %s: not a CUDA driver, or resolves to the shim",
                path.c_str());
    dlclose(handle);
    return nullptr;
  }
  return handle;
}

}  // namespace

const char* own_library_path() noexcept {
  static const char* path = own_info().dli_fname;
  return path;
}

bool address_is_in_shim(const void* address) noexcept {
  static void* base = own_info().dli_fbase;
  Dl_info info{};
  return dladdr(address, &info) != 0 && info.dli_fbase == base;
}

DlopenFn real_dlopen() noexcept {
  void* fn = __atomic_load_n(&fracgpu_real_dlopen_fn, __ATOMIC_ACQUIRE);
  if (fn == nullptr) {
    fn = dlsym(RTLD_NEXT, "dlopen");
    __atomic_store_n(&fracgpu_real_dlopen_fn, fn, __ATOMIC_RELEASE);
  }
  return reinterpret_cast<DlopenFn>(fn);
}

LoadedDriver load_real_driver(const ShimConfig& config) noexcept {
  LoadedDriver driver;
  const std::vector<std::string> candidates =
      driver_candidates(driver_search_inputs_from_system(config.real_driver));
  for (const std::string& path : candidates) {
    if (void* handle = try_load(path)) {
      driver.handle = handle;
      driver.path = path;
      FRACGPU_LOG(LogLevel::kInfo, "using CUDA driver %s", path.c_str());
      return driver;
    }
  }
  std::string tried;
  for (const std::string& path : candidates) tried += (tried.empty() ? "" : ", ") + path;
  FRACGPU_LOG(LogLevel::kError, "no CUDA driver found (tried %s); set FRACGPU_REAL_DRIVER",
              tried.c_str());
  return driver;
}

}  // namespace fracgpu::shim
