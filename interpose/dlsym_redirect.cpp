// The dlsym route into NVML. Programs such as nvidia-smi dlopen libnvidia-ml.so.1 and
// look functions up on that handle, which never reaches the shim's exported NVML
// functions. The exported dlsym (a trampoline in exports_x86_64.S) asks this function
// first: for the few NVML names the shim answers (tables/nvml_hooks.def) it returns our
// wrapper; for everything else null, and the trampoline tail-jumps to glibc's dlsym
// so that RTLD_NEXT still resolves relative to the real caller. Cost for other
// lookups: one four-byte compare.
#include <dlfcn.h>

#include <cstring>

extern "C" {
__attribute__((visibility("hidden"))) void* fracgpu_real_dlsym_fn = nullptr;
}

namespace fracgpu::shim {
void* nvml_wrapper_for(void* handle, const char* name);
}

namespace {

using DlsymFn = void* (*)(void*, const char*);

// glibc's dlsym, found with dlvsym so that the lookup cannot come back to us.
DlsymFn glibc_dlsym() {
  void* fn = __atomic_load_n(&fracgpu_real_dlsym_fn, __ATOMIC_ACQUIRE);
  if (fn == nullptr) {
    fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (fn == nullptr) fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    __atomic_store_n(&fracgpu_real_dlsym_fn, fn, __ATOMIC_RELEASE);
  }
  return reinterpret_cast<DlsymFn>(fn);
}

}  // namespace

extern "C" __attribute__((visibility("hidden"))) void* fracgpu_real_dlsym(void* handle,
                                                                          const char* name) {
  return glibc_dlsym()(handle, name);
}

extern "C" __attribute__((visibility("hidden"))) void* fracgpu_dlsym_redirect(
    void* handle, const char* name) noexcept {
  glibc_dlsym();  // leaves fracgpu_real_dlsym_fn set for the trampoline's jump
  if (name == nullptr || std::strncmp(name, "nvml", 4) != 0 || handle == RTLD_NEXT) return nullptr;
  return fracgpu::shim::nvml_wrapper_for(handle, name);
}
