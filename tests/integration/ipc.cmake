# Legacy CUDA IPC for a tenant whose memory may move to host (tests/integration/ipc_test.cpp):
# a spawned and a forked consumer, what the consumer is charged, pinning of shared memory,
# and the driver's own IPC for a tenant that may not swap. The shim's IPC core is unit-tested
# from tests/unit/ipc.cmake (included here until tests/unit/CMakeLists.txt includes it).
if(TARGET fracgpu-broker AND TARGET fracgpu_cli AND TARGET fracgpu_ipc_client)
  fracgpu_broker_integration_test(fracgpu_ipc_integration_tests ipc_test.cpp TIMEOUT 90
    PROGRAMS FRACGPU_IPC_CLIENT fracgpu_ipc_client)
endif()
