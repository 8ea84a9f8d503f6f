# Unit tests of the shim's legacy-IPC core (interpose/core/ipc_*): handle encoding, the
# exporter's server and the opener over a fake driver port, refusals, a gone exporter, fork.
add_executable(fracgpu_ipc_unit_tests ${CMAKE_CURRENT_LIST_DIR}/ipc_sharing_test.cpp)
target_link_libraries(fracgpu_ipc_unit_tests PRIVATE
  fracgpu_shim_core GTest::gtest_main fracgpu_warnings fracgpu_sanitizers)
gtest_discover_tests(fracgpu_ipc_unit_tests PROPERTIES LABELS "unit" DISCOVERY_TIMEOUT 30)
