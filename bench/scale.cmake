# Broker scale benchmarks; included from CMakeLists.txt.

# A real broker at 1,000 tenants: idle CPU, `fracgpu status`, registration of 256
# processes, the admin socket's latency while 2,000 processes exit at once. Not a Google
# Benchmark: it measures another process over seconds (one JSON line).
if(TARGET fakecuda AND TARGET fakenvml AND TARGET fracgpu-broker AND TARGET fracgpu_cli
   AND TARGET fracgpu_broker_client)
  add_executable(fracgpu_broker_scale_bench broker_scale_bench.cpp)
  target_link_libraries(fracgpu_broker_scale_bench PRIVATE fracgpu_broker_core fracgpu_broker_client
                        rt fracgpu_warnings)
  target_compile_definitions(fracgpu_broker_scale_bench PRIVATE
    FRACGPU_BROKER="$<TARGET_FILE:fracgpu-broker>"
    FRACGPU_CLI="$<TARGET_FILE:fracgpu_cli>"
    FRACGPU_FAKECUDA_DIR="$<TARGET_FILE_DIR:fakecuda>"
    FRACGPU_FAKENVML_DIR="$<TARGET_FILE_DIR:fakenvml>")
  add_dependencies(fracgpu_broker_scale_bench fracgpu-broker fracgpu_cli fakecuda fakenvml)
endif()
