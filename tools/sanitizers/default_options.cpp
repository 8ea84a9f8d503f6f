// Defaults of the sanitizer runtimes for fracgpu's instrumented executables (a sanitizer
// build only: cmake/Sanitizers.cmake compiles this into every executable that links
// fracgpu_sanitizers). The runtime reads them before $ASAN_OPTIONS / $TSAN_OPTIONS, which
// still override them, so they hold in every process a test starts, also those that get
// an environment of their own (a pod's container, a tenant's `fracgpu run`). Read once, at
// process start: no cost afterwards.
//
// AddressSanitizer, verify_asan_link_order=0: the preloaded shim (never instrumented)
// comes ahead of the runtime in the library list, which the runtime would refuse. That is
// safe here: the shim interposes none of the functions a sanitizer intercepts (it exports
// the driver API, NVML and dlopen/dlsym, which forward with RTLD_NEXT and so reach the
// runtime's interceptors; tests/unit/shim_binary_test.cpp checks that export list), and
// every process that loads an instrumented library is itself instrumented, so the runtime
// precedes libc in its symbol search order.
//
// ThreadSanitizer, ignore_noninstrumented_modules=1: interceptors called from code that is
// not instrumented (the preloaded shim, by design; Debian's gRPC, abseil, protobuf,
// spdlog) record no memory accesses, because the atomics that order those accesses are
// invisible there and every report would be a false one. Our instrumented code is checked
// in full, and the shim's core is checked instrumented by the unit tests.
// die_after_fork=0: applications fork while threads run (PyTorch's DataLoader, a forked
// IPC consumer), and the shim's child then starts threads of its own (its exporter's
// server, swap and watch threads); ThreadSanitizer would end such a child at its first
// thread. Its runtime then continues in the child without that check, as the process does.

//
// UndefinedBehaviorSanitizer, log_path: GCC 12's libubsan (a runtime of its own beside
// libasan) never applies the log_path of $UBSAN_OPTIONS, so its reports would only reach
// the stderr of the process, which for a test's child may be a file the test deletes.
// A constructor here hands that log_path to libubsan's own __sanitizer_set_report_path
// (found with dlsym in libubsan itself: the plain symbol binds to libasan's copy).

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

// FRACGPU_SANITIZER_* come from cmake/Sanitizers.cmake (protobuf's users compile with
// __SANITIZE_THREAD__ undefined, see fracgpu_third_party_abi there).
#if defined(FRACGPU_SANITIZER_ADDRESS)
extern "C" __attribute__((visibility("default"), used)) const char* __asan_default_options() {
  return "verify_asan_link_order=0";
}
#endif

#if defined(FRACGPU_SANITIZER_THREAD)
extern "C" __attribute__((visibility("default"), used)) const char* __tsan_default_options() {
  return "ignore_noninstrumented_modules=1:die_after_fork=0";
}
#endif

#if defined(FRACGPU_SANITIZER_UNDEFINED)
namespace {

// log_path=... of $UBSAN_OPTIONS (':'-separated), applied to libubsan.
__attribute__((constructor)) void apply_ubsan_log_path() {
  const char* options = std::getenv("UBSAN_OPTIONS");
  const char* at = options == nullptr ? nullptr : std::strstr(options, "log_path=");
  if (at == nullptr || (at != options && at[-1] != ':')) return;
  at += std::strlen("log_path=");
  char path[4096];
  const std::size_t length = std::min(std::strcspn(at, ":"), sizeof(path) - 1);
  std::memcpy(path, at, length);
  path[length] = '\0';
  void* ubsan = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (ubsan == nullptr) return;
  using SetReportPath = void (*)(const char*);
  if (auto set = reinterpret_cast<SetReportPath>(dlsym(ubsan, "__sanitizer_set_report_path")))
    set(path);
  dlclose(ubsan);  // only the reference RTLD_NOLOAD took: libubsan stays, a dependency
}

}  // namespace
#endif
