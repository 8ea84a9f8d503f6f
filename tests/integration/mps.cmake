# Tests added for the MPS mode; included from CMakeLists.txt (target_sources / add_executable).
if(TARGET fracgpu-broker AND TARGET fracgpu_cli AND TARGET fracgpu_spin_client AND TARGET fakecuda-mps-control)
  # broker --mps over the simulated MPS daemon: its life (start, kill -9, quit), tenants
  # as MPS clients with their priority, a high tenant's latency against time slicing,
  # weights. Measures time on the simulated device: RUN_SERIAL.
  fracgpu_broker_integration_test(fracgpu_mps_integration_tests mps_mode_test.cpp SERIAL TIMEOUT 60
    PROGRAMS FRACGPU_SPIN_CLIENT fracgpu_spin_client FRACGPU_MPS_CONTROL fakecuda-mps-control)
endif()
