# Latency isolation on the simulated GPU (latency_isolation_test.cpp): a high tenant's
# requests (regular, Poisson, bursts) next to batch kernels of 0.05, 0.2, 1 and 2 ms,
# time-sliced and under --mps, against the wait bound of docs/design.md "High priority".
# Measures wall-clock latencies: RUN_SERIAL, and LatencyIsolation is `timing`; under the
# sanitizers LatencySmoke keeps the paths covered (every arrival pattern served beside a
# batch in both modes, bounds that only catch a hang).
if(TARGET fracgpu-broker AND TARGET fracgpu_cli AND TARGET fracgpu_spin_client AND TARGET fakecuda-mps-control)
  fracgpu_broker_integration_test(fracgpu_latency_integration_tests latency_isolation_test.cpp SERIAL
    TIMEOUT 60
    TIMING "Cases/LatencyIsolation.*"
    PROGRAMS FRACGPU_SPIN_CLIENT fracgpu_spin_client FRACGPU_MPS_CONTROL fakecuda-mps-control)
endif()
