# Unit tests of the shim's legacy-IPC core (interpose/core/ipc_*): handle encoding, the
# exporter's server and the opener over a fake driver port, refusals, a gone exporter, fork.
add_executable(fracgpu_ipc_unit_tests ${CMAKE_CURRENT_LIST_DIR}/ipc_sharing_test.cpp)
target_link_libraries(fracgpu_ipc_unit_tests PRIVATE
  fracgpu_shim_core GTest::gtest_main fracgpu_warnings fracgpu_sanitizers)
gtest_discover_tests(fracgpu_ipc_unit_tests PROPERTIES LABELS "unit" DISCOVERY_TIMEOUT 30)

# Unit tests of the application's own VMM memory made swappable (interpose/core/app_vmm.*):
# the handle table and its translation, the swappable rule, and AppVmm with the swap engine
# over a simulated VMM device (a swapped handle's unmap and release, the books).
add_executable(fracgpu_app_vmm_unit_tests ${CMAKE_CURRENT_LIST_DIR}/app_vmm_test.cpp)
target_link_libraries(fracgpu_app_vmm_unit_tests PRIVATE
  fracgpu_shim_core GTest::gtest_main fracgpu_warnings fracgpu_sanitizers)
gtest_discover_tests(fracgpu_app_vmm_unit_tests PROPERTIES LABELS "unit" DISCOVERY_TIMEOUT 30)

# The swap-out's host staging (interpose/core/host_staging.*) over a fake driver port: chunks
# pinned by the workers and copied in order, every failure unwound, kept chunks reused; the
# swap reserve's book (interpose/core/host_reserve.*) and swap-outs into it.
add_executable(fracgpu_host_staging_unit_tests ${CMAKE_CURRENT_LIST_DIR}/host_staging_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/host_reserve_test.cpp)
target_link_libraries(fracgpu_host_staging_unit_tests PRIVATE
  fracgpu_shim_core GTest::gtest_main fracgpu_warnings fracgpu_sanitizers)
gtest_discover_tests(fracgpu_host_staging_unit_tests PROPERTIES LABELS "unit" DISCOVERY_TIMEOUT 30)

# Unit tests of the swappable arena for stream-ordered allocations (interpose/core/async_arena.*)
# over a fake port: stream-order reuse, bounded polling, trim, exact charges, threads.
add_executable(fracgpu_async_arena_unit_tests ${CMAKE_CURRENT_LIST_DIR}/async_arena_test.cpp)
target_link_libraries(fracgpu_async_arena_unit_tests PRIVATE
  fracgpu_shim_core GTest::gtest_main fracgpu_warnings fracgpu_sanitizers)
gtest_discover_tests(fracgpu_async_arena_unit_tests PROPERTIES LABELS "unit" DISCOVERY_TIMEOUT 30)
