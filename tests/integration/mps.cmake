# Tests added for the MPS mode; included from CMakeLists.txt (target_sources / add_executable).
if(TARGET fracgpu-broker AND TARGET fracgpu_cli AND TARGET fracgpu_spin_client AND TARGET fakecuda-mps-control)
  # broker --mps over the simulated MPS daemon: its life (start, kill -9, quit), tenants
  # as MPS clients with their priority, a high tenant's latency against time slicing,
  # weights. Measures time on the simulated device: RUN_SERIAL.
  # The high tenant's percentiles against time slicing and the 70/30 split with the device's
  # busy share are `timing` (tests/timing.cmake); the daemon's life, the clients' class
  # priorities and the daemon that cannot start stay covered under the sanitizers, and the
  # MPS scheduling decisions by gpu_scheduler_mps_test (fake time).
  fracgpu_broker_integration_test(fracgpu_mps_integration_tests mps_mode_test.cpp SERIAL TIMEOUT 60
    TIMING "MpsMode.AHighTenantWaitsLessBesideShortKernelsThanTimeSliced:MpsMode.Weights70And30StillSplitTheDevice"
    PROGRAMS FRACGPU_SPIN_CLIENT fracgpu_spin_client FRACGPU_MPS_CONTROL fakecuda-mps-control)
endif()
