# Tests added for the failopen work; included from CMakeLists.txt (target_sources / add_executable).
# The scheduler against tenants that stop (SIGSTOP while waiting, mid-slice): fake time.
target_sources(fracgpu_broker_unit_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unresponsive_tenant_test.cpp)
