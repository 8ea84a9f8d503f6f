# Tests added for the failopen work; included from CMakeLists.txt (target_sources / add_executable).
if(TARGET fracgpu-broker AND TARGET fracgpu_cli AND TARGET fracgpu_spin_client)
  # Broker SIGKILL / restart and SIGSTOPped tenants, measured on the simulated device.
  # Timing-sensitive: RUN_SERIAL.
  fracgpu_broker_integration_test(fracgpu_failopen_integration_tests failopen_test.cpp SERIAL TIMEOUT 60
    PROGRAMS FRACGPU_SPIN_CLIENT fracgpu_spin_client)
endif()

# The launch gate's liveness rules (doorbell probe, lease, progress), on the shim's core
# alone: no processes, no driver.
add_executable(fracgpu_gate_liveness_tests ${CMAKE_CURRENT_SOURCE_DIR}/gate_liveness_test.cpp)
target_link_libraries(fracgpu_gate_liveness_tests PRIVATE
  fracgpu_shim_core GTest::gtest_main fracgpu_warnings fracgpu_sanitizers)
gtest_discover_tests(fracgpu_gate_liveness_tests PROPERTIES LABELS "unit" DISCOVERY_TIMEOUT 30)
