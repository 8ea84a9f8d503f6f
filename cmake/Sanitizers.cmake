# FRACGPU_SANITIZE=address;undefined | thread instruments the core libraries, the
# broker, the simulated driver's tests and the test binaries. The preloaded shim
# itself is never instrumented: a sanitizer runtime must be the first library in a
# process, which a preloaded shim cannot guarantee for the programs it is loaded into.
add_library(fracgpu_sanitizers INTERFACE)
if(FRACGPU_SANITIZE)
  string(REPLACE ";" "," _fracgpu_san "${FRACGPU_SANITIZE}")
  target_compile_options(fracgpu_sanitizers INTERFACE -fsanitize=${_fracgpu_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(fracgpu_sanitizers INTERFACE -fsanitize=${_fracgpu_san})
  message(STATUS "fracgpu: sanitizers ${_fracgpu_san}")
endif()
