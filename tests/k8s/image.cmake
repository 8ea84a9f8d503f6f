# Registers k8s_image_contents (tests/k8s/check_image.py, labels k8s): the container image
# of k8s/Dockerfile, checked against this build's `cmake --install`, its binaries' DT_NEEDED
# libraries and the DaemonSet's commands; no container engine, network or root needed.
# Only where everything the image holds is built here.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND AND CMAKE_READELF AND TARGET fracgpu AND TARGET fracgpu-broker AND TARGET fracgpu_cli
   AND TARGET fracgpu-device-plugin)
  set(_image_check_args)
  if(FRACGPU_SANITIZE)
    list(APPEND _image_check_args --sanitized)  # the image is built without sanitizers
  endif()
  add_test(NAME k8s_image_contents
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_image.py
            --repo ${PROJECT_SOURCE_DIR} --build-dir ${CMAKE_BINARY_DIR}
            --cmake ${CMAKE_COMMAND} --readelf ${CMAKE_READELF} ${_image_check_args})
  set_tests_properties(k8s_image_contents PROPERTIES LABELS k8s TIMEOUT 120)
endif()
