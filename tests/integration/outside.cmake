# Memory outside every tenant (issue 27, row 10) end to end: a host job without the shim on
# the simulated GPU, seen through the simulated NVML in status, metrics, admission, lending
# and (--fracgpu-only) the `outside` violation. Included from CMakeLists.txt. RUN_SERIAL: it
# fills the simulated GPU and waits on audit passes; about 10 s.
if(TARGET fracgpu-broker AND TARGET fracgpu_cli)
  fracgpu_broker_integration_test(fracgpu_outside_integration_tests outside_usage_test.cpp
    SERIAL TIMEOUT 90
    PROGRAMS FRACGPU_ALLOC_CLIENT fracgpu-alloc-client
    DEFINES FRACGPU_FAKENVML_DIR="$<TARGET_FILE_DIR:fakenvml>"
    DEPENDS fakenvml)
endif()
