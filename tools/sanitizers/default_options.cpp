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

// FRACGPU_SANITIZER_* come from cmake/Sanitizers.cmake (protobuf's users compile with
// __SANITIZE_THREAD__ undefined, see fracgpu_third_party_abi there).
#if defined(FRACGPU_SANITIZER_ADDRESS)
extern "C" __attribute__((visibility("default"), used)) const char* __asan_default_options() {
  return "verify_asan_link_order=0";
}
#endif

#if defined(FRACGPU_SANITIZER_THREAD)
extern "C" __attribute__((visibility("default"), used)) const char* __tsan_default_options() {
  return "ignore_noninstrumented_modules=1";
}
#endif
