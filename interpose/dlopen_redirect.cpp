// The dlopen route into the driver. Because the shim carries the SONAME libcuda.so.1,
// dlopen("libcuda.so.1") already returns the shim. Other spellings would load the real
// driver behind our back: "libcuda.so" (the unversioned development link),
// "libcuda.so.<driver version>", or an absolute path to the driver. The exported
// dlopen (a trampoline in exports_x86_64.S) asks this function first; it returns the
// shim's own handle for any name whose file part starts with "libcuda.so", and null for
// everything else, in which case the trampoline tail-jumps to glibc's dlopen so that
// the caller's RUNPATH and $ORIGIN still apply. Cost for other libraries: one strrchr
// and one compare per dlopen.
#include <dlfcn.h>

#include <cstring>

#include "core/shim_log.h"
#include "driver_loader.h"

extern "C" {
__attribute__((visibility("hidden"))) void* fracgpu_real_dlopen_fn = nullptr;
}

namespace {

bool names_cuda_driver(const char* file) noexcept {
  if (file == nullptr) return false;
  const char* slash = std::strrchr(file, '/');
  const char* base = slash != nullptr ? slash + 1 : file;
  return std::strncmp(base, "libcuda.so", 10) == 0 && (base[10] == '\0' || base[10] == '.');
}

}  // namespace

extern "C" __attribute__((visibility("hidden"))) void* fracgpu_dlopen_redirect(const char* file,
                                                                               int mode) noexcept {
  using namespace fracgpu;
  shim::DlopenFn real = shim::real_dlopen();  // also leaves fracgpu_real_dlopen_fn set for the jump
  if (!names_cuda_driver(file) || (mode & RTLD_NOLOAD) != 0) return nullptr;
  void* self = real(shim::own_library_path(), RTLD_NOW | (mode & (RTLD_GLOBAL | RTLD_NODELETE)));
  FRACGPU_LOG(LogLevel::kDebug, "dlopen(\"%s\") -> fracgpu shim", file);
  return self;
}
