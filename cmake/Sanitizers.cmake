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

# Unity builds (CMAKE_UNITY_BUILD=ON; tools/ci_sanitizers.sh builds the sanitizer job so,
# since most of a file's compile time is its headers). A unity unit is one translation unit,
# so two sources of a target that each define a helper of the same name in an anonymous
# namespace (kMiB, fail(), fake_ops()) cannot share one: each source below is compiled on
# its own. A new clash reads "redefinition of '... {anonymous}::NAME'" (or GCC's
# -Wsubobject-linkage, for a class that uses an anonymous type outside its main file):
# add the file named there. The generated protobuf/gRPC sources define the same file-static
# tables in every file, and glibc_floor.cpp redeclares pthread functions with its own
# symbol visibility: their targets' files stay apart too. Costs nothing outside unity builds.
# FRACGPU_UNITY_SEPARATE_EXTRA (a cache list, same form) adds to the list without an edit:
# tools/ci_sanitizers.sh sets it to the files of the clashes a build meets, then says which.
set(FRACGPU_UNITY_SEPARATE
  broker/cli/tenant_commands.cpp
  broker/cli/top_command.cpp
  broker/core/compute_service.cpp
  fakecuda/src/api_graph.cpp
  fakecuda/src/api_memset.cpp
  fakecuda/src/mem_pool.cpp
  fakecuda/tests/container_access_test.cpp
  fakecuda/tests/graph_memory_test.cpp
  fakecuda/tests/memory_test.cpp
  fakecuda/tests/process_test.cpp
  fakecuda/tests/shareable_handle_test.cpp
  interpose/glibc_floor.cpp
  k8s/device_plugin/plugin_runner.cpp
  tests/broker/books_check_test.cpp
  tests/broker/crash_consistency_test.cpp
  tests/broker/gpu_scheduler_mps_test.cpp
  tests/broker/state_recovery_test.cpp
  tests/broker/swap_books_test.cpp
  tests/broker/swap_reserve_test.cpp
  tests/broker/top_test.cpp
  tests/broker/unresponsive_tenant_test.cpp
  tests/broker/violation_log_test.cpp
  tests/k8s/pod_attribution_test.cpp
  tests/k8s/pod_e2e_test.cpp
  tests/integration/overcommit_broker_death_test.cpp
  tests/integration/overcommit_budget_test.cpp
  tests/integration/overcommit_kill_test.cpp
  tests/integration/overcommit_reserve_test.cpp
  tests/k8s/slice_classes_test.cpp
  tests/unit/capture_tracker_test.cpp
  tests/unit/host_reserve_test.cpp)
set(FRACGPU_UNITY_OFF_TARGETS fracgpu_deviceplugin_proto)

# Source properties belong to a directory: applied, once every directory is known (deferred
# to the end of the top-level CMakeLists.txt), in all of them.
function(fracgpu_apply_unity_exclusions)
  set(pending ${PROJECT_SOURCE_DIR})
  set(dirs "")
  while(pending)
    list(POP_FRONT pending dir)
    list(APPEND dirs ${dir})
    get_property(sub DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    list(APPEND pending ${sub})
  endwhile()
  set(files ${FRACGPU_UNITY_SEPARATE} ${FRACGPU_UNITY_SEPARATE_EXTRA})
  list(TRANSFORM files PREPEND ${PROJECT_SOURCE_DIR}/)
  set_source_files_properties(${files} DIRECTORY ${dirs} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  foreach(target ${FRACGPU_UNITY_OFF_TARGETS})
    if(TARGET ${target})
      set_target_properties(${target} PROPERTIES UNITY_BUILD OFF)
    endif()
  endforeach()
endfunction()
if(CMAKE_UNITY_BUILD)
  set(FRACGPU_UNITY_SEPARATE_EXTRA "" CACHE STRING
      "Sources (relative to the top) compiled apart in a unity build, beyond FRACGPU_UNITY_SEPARATE")
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL fracgpu_apply_unity_exclusions)
endif()
