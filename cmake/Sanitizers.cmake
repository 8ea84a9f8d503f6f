# FRACGPU_SANITIZE=address;undefined | thread instruments the core libraries, the
# broker, the simulated driver and its tools, the test programs (tests/programs) and the
# test binaries. The preloaded shim itself is never instrumented: a sanitizer runtime
# must be the first library in a process, which a preloaded shim cannot guarantee for
# the programs it is loaded into. A process that loads an instrumented library (the
# simulated libcuda.so.1) must itself be instrumented, so that the runtime precedes libc
# in its symbol search order. tools/sanitizers/default_options.cpp (compiled into every
# instrumented executable) says what that lets the runtimes assume, and
# tools/ci_sanitizers.sh builds and runs the whole suite under both.
add_library(fracgpu_sanitizers INTERFACE)
if(FRACGPU_SANITIZE)
  string(REPLACE ";" "," _fracgpu_san "${FRACGPU_SANITIZE}")
  # GCC documents that -fsanitize=address makes -Wmaybe-uninitialized report false
  # positives (here: inside libstdc++'s std::regex at -O1); the normal -Werror builds keep it.
  target_compile_options(fracgpu_sanitizers INTERFACE -fsanitize=${_fracgpu_san} -fno-omit-frame-pointer
                         -fno-sanitize-recover=all -Wno-maybe-uninitialized)
  # Debian's GCC links with --as-needed by default, except with -fsanitize: restored, so that
  # a sanitizer build needs the same libraries as the image's build (k8s_image_contents).
  target_link_options(fracgpu_sanitizers INTERFACE -fsanitize=${_fracgpu_san} -Wl,--as-needed)
  # The runtimes' defaults for our executables (tools/sanitizers/default_options.cpp says
  # which and why); the environment's *SAN_OPTIONS still override them.
  target_sources(fracgpu_sanitizers INTERFACE
    $<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:${PROJECT_SOURCE_DIR}/tools/sanitizers/default_options.cpp>)
  if("address" IN_LIST FRACGPU_SANITIZE)
    target_compile_definitions(fracgpu_sanitizers INTERFACE FRACGPU_SANITIZER_ADDRESS)
  endif()
  if("undefined" IN_LIST FRACGPU_SANITIZE)
    target_compile_definitions(fracgpu_sanitizers INTERFACE FRACGPU_SANITIZER_UNDEFINED)
  endif()
  if("thread" IN_LIST FRACGPU_SANITIZE)
    target_compile_definitions(fracgpu_sanitizers INTERFACE FRACGPU_SANITIZER_THREAD)
    # GCC's -Wtsan says ThreadSanitizer does not model std::atomic_thread_fence. Our
    # fences (the segments' headers, magic written last) order stores for *other
    # processes* mapping the file, which no sanitizer observes; a fence that ordered
    # accesses between threads of one process would show as a race, not hide one.
    target_compile_options(fracgpu_sanitizers INTERFACE -Wno-tsan)
  endif()
  message(STATUS "fracgpu: sanitizers ${_fracgpu_san}")
endif()

# Debian's protobuf and gRPC are built without sanitizers, but their headers change class
# layouts when they see one: protobuf's MapFieldBase gains two counters under
# __SANITIZE_THREAD__, gRPC's gpr_mu a leak checker under AddressSanitizer. A file that
# includes them must see what the libraries were built with, or inline accessors and the
# library disagree on where a field is (a map field's accessor then reads past the object).
# Linked (PUBLIC) by the generated protobuf/gRPC library; the file stays instrumented.
add_library(fracgpu_third_party_abi INTERFACE)
if(FRACGPU_SANITIZE)
  target_compile_definitions(fracgpu_third_party_abi INTERFACE GRPC_ASAN_SUPPRESSED GRPC_TSAN_SUPPRESSED)
  if("thread" IN_LIST FRACGPU_SANITIZE)
    target_compile_options(fracgpu_third_party_abi INTERFACE -U__SANITIZE_THREAD__)
  endif()
endif()
