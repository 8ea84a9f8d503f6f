# Tests added for the MPS mode; included from CMakeLists.txt (target_sources / add_executable).
# The scheduler's MPS-mode bounds and guard lead, and a request loop on an MPS-like device: fake time.
target_sources(fracgpu_broker_unit_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu_scheduler_mps_test.cpp)
