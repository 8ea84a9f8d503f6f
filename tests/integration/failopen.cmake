# Tests added for the failopen work; included from CMakeLists.txt (target_sources / add_executable).
if(TARGET fracgpu-broker AND TARGET fracgpu_cli AND TARGET fracgpu_spin_client)
  # Broker SIGKILL / restart and SIGSTOPped tenants, measured on the simulated device.
  # Timing-sensitive: RUN_SERIAL, and all `timing`; under the sanitizers failing open stays
  # covered by gate_liveness_test (unit), stopped tenants by unresponsive_tenant_test (fake
  # time), restarts by BrokerState and the fault storms.
  fracgpu_broker_integration_test(fracgpu_failopen_integration_tests failopen_test.cpp SERIAL TIMEOUT 60
    TIMING "*"
    PROGRAMS FRACGPU_SPIN_CLIENT fracgpu_spin_client)
endif()

