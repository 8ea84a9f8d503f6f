# The ctest label `timing`: tests whose verdict depends on how fast fracgpu runs — a
# measured compute share, utilisation, rate or CPU time, or a latency bound less than
# about ten times what the normal build measures. Under a sanitizer every process runs
# several times slower, and unevenly (each memory access of the simulated device's
# executor is instrumented, ThreadSanitizer defers signals), so there such a verdict says
# nothing about fracgpu: tools/ci_sanitizers.sh runs the sanitizer builds with -LE timing;
# the normal build runs them all. Lower bounds, and bounds that only catch a wait or a hang
# (a second for what takes milliseconds), are not timing. Each registration names, beside
# its `timing` tests, the tests that keep their code paths covered under the sanitizers.
#
# fracgpu_discover_tests(TARGET LABELS <labels> [TIMING <gtest filter>] [PROPERTIES ...])
#   gtest_discover_tests for TARGET with LABELS; the tests matching the TIMING filter
#   ("*" for all, "Suite.Name:Suite.Other" for some) get the label `timing` as well.
#   (gtest_discover_tests flattens a list given in PROPERTIES, so the second label is set
#   by a file ctest includes after the discovered tests, from their TEST_LIST.)
#   In a sanitizer build a target whose tests are all `timing` (TIMING "*") is left out of
#   `all` and registers nothing: the sanitizer job would build it only to run none of it.
#   So is a target none of whose LABELS is in FRACGPU_SANITIZER_LABELS, when that is set
#   (tools/ci_sanitizers.sh sets it for the ThreadSanitizer job, which runs only those labels).
function(fracgpu_discover_tests target)
  cmake_parse_arguments(ARG "" "TIMING" "LABELS;PROPERTIES" ${ARGN})
  if(FRACGPU_SANITIZE AND ARG_TIMING STREQUAL "*")
    set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    return()
  endif()
  if(FRACGPU_SANITIZE AND FRACGPU_SANITIZER_LABELS)
    set(in_scope FALSE)
    foreach(label IN LISTS ARG_LABELS)
      if(label IN_LIST FRACGPU_SANITIZER_LABELS)
        set(in_scope TRUE)
      endif()
    endforeach()
    if(NOT in_scope)
      set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL TRUE)
      return()
    endif()
  endif()
  if(NOT ARG_TIMING)
    gtest_discover_tests(${target} PROPERTIES LABELS "${ARG_LABELS}" ${ARG_PROPERTIES} DISCOVERY_TIMEOUT 30)
    return()
  endif()
  gtest_discover_tests(${target} TEST_FILTER "${ARG_TIMING}" TEST_LIST ${target}_timing_tests
                       PROPERTIES LABELS "${ARG_LABELS}" ${ARG_PROPERTIES} DISCOVERY_TIMEOUT 30)
  set(labels ${ARG_LABELS} timing)
  set(label_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_timing_labels.cmake)
  file(WRITE ${label_file}
       "foreach(test IN LISTS ${target}_timing_tests)\n"
       "  set_tests_properties(\"\${test}\" PROPERTIES LABELS \"${labels}\")\n"
       "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${label_file})
  if(NOT ARG_TIMING STREQUAL "*")
    gtest_discover_tests(${target} TEST_FILTER "-${ARG_TIMING}"
                         PROPERTIES LABELS "${ARG_LABELS}" ${ARG_PROPERTIES} DISCOVERY_TIMEOUT 30)
  endif()
endfunction()
