# fracgpu-bench-client, the benchmark suite's driver-API client (bench/gpu/run.sh): every
# workload kind that needs no framework, on the simulated GPU and on a real one. It dlopens
# libcuda.so.1 (no link-time driver), so `tools/pack_devrun.sh --with fracgpu-bench-client`
# packs it for the GPU machine. Included by bench/gpu/CMakeLists.txt and by tests/bench (the
# smoke test); whichever comes first defines it.
if(NOT TARGET fracgpu_bench_client)
  set(FRACGPU_BENCH_CLIENT_SOURCES ${CMAKE_CURRENT_LIST_DIR}/clients/bench_client.cpp
      ${CMAKE_CURRENT_LIST_DIR}/clients/client.cpp ${CMAKE_CURRENT_LIST_DIR}/clients/latency.cpp)
  add_executable(fracgpu_bench_client ${FRACGPU_BENCH_CLIENT_SOURCES})
  set_target_properties(fracgpu_bench_client PROPERTIES OUTPUT_NAME fracgpu-bench-client
                        RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
  target_include_directories(fracgpu_bench_client PRIVATE ${FRACGPU_CUDA_INCLUDE_DIR})
  target_link_libraries(fracgpu_bench_client PRIVATE ${CMAKE_DL_LIBS})
  if(TARGET fracgpu_warnings)
    target_link_libraries(fracgpu_bench_client PRIVATE fracgpu_warnings)
  endif()
endif()
