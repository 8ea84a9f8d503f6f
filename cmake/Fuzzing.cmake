# FRACGPU_FUZZ=ON (tests/fuzz/): the libFuzzer build, clang only (Debian's clang and its
# libclang_rt.fuzzer). The normal libraries are left as they are; the fuzzers link
# instrumented copies of them instead (fracgpu_fuzz_library), built from the same source
# lists minus the files no fuzzer reaches (the daemon's main loop, the metrics endpoint),
# which keeps the whole fuzz build within a few minutes on a 2-core CI machine.
# Instrumentation: libFuzzer's coverage, AddressSanitizer (leaks included) and
# UndefinedBehaviorSanitizer, every report fatal; assert() and libstdc++'s cheap checks
# (operator[] bounds, front() of an empty container) are on. FRACGPU_FUZZ_OPTIMIZE is the
# optimisation level, -O1 by default: -O0 compiles in less than half the time, but the
# JSON-heavy targets then run some 40 times slower.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "FRACGPU_FUZZ needs clang (libFuzzer): configure with CC=clang CXX=clang++")
endif()
if(FRACGPU_SANITIZE)
  message(FATAL_ERROR "FRACGPU_FUZZ brings its own sanitizers: leave FRACGPU_SANITIZE empty")
endif()
set(FRACGPU_FUZZ_OPTIMIZE "-O1" CACHE STRING "Optimisation flag of the fuzz build (-O0 builds fastest)")

# Usage requirements of everything in the fuzz build (linked by each copy and fuzzer).
add_library(fracgpu_fuzz_flags INTERFACE)
target_compile_options(fracgpu_fuzz_flags INTERFACE
  ${FRACGPU_FUZZ_OPTIMIZE} -gline-tables-only -fno-omit-frame-pointer
  -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all)
target_compile_definitions(fracgpu_fuzz_flags INTERFACE _GLIBCXX_ASSERTIONS)
target_link_options(fracgpu_fuzz_flags INTERFACE -fsanitize=address,undefined)

# fracgpu_fuzz_library(<name> FROM <target> [EXCLUDE <file name>...] [REPLACE <lib> <copy>...])
# A static library compiled from <target>'s sources (less EXCLUDE) with <target>'s include
# directories, definitions and link libraries, the instrumented flags above instead of
# the build type's, and each library named after REPLACE swapped for its copy.
function(fracgpu_fuzz_library name)
  cmake_parse_arguments(ARG "" "FROM" "EXCLUDE;REPLACE" ${ARGN})
  get_target_property(sources ${ARG_FROM} SOURCES)
  get_target_property(source_dir ${ARG_FROM} SOURCE_DIR)
  set(kept)
  foreach(src IN LISTS sources)
    cmake_path(GET src FILENAME file_name)
    if(NOT file_name IN_LIST ARG_EXCLUDE)
      cmake_path(ABSOLUTE_PATH src BASE_DIRECTORY ${source_dir} OUTPUT_VARIABLE absolute)
      list(APPEND kept ${absolute})
    endif()
  endforeach()
  add_library(${name} STATIC ${kept})
  get_target_property(includes ${ARG_FROM} INCLUDE_DIRECTORIES)
  if(includes)
    target_include_directories(${name} PUBLIC ${includes})
  endif()
  get_target_property(definitions ${ARG_FROM} COMPILE_DEFINITIONS)
  if(definitions)
    target_compile_definitions(${name} PUBLIC ${definitions})
  endif()
  get_target_property(libraries ${ARG_FROM} LINK_LIBRARIES)
  list(REMOVE_ITEM libraries fracgpu_sanitizers fracgpu_warnings)
  list(LENGTH ARG_REPLACE count)
  if(count GREATER 0)
    math(EXPR last "${count} - 1")
    foreach(i RANGE 0 ${last} 2)
      math(EXPR j "${i} + 1")
      list(GET ARG_REPLACE ${i} original)
      list(GET ARG_REPLACE ${j} copy)
      list(TRANSFORM libraries REPLACE "^${original}$" ${copy})
    endforeach()
  endif()
  target_link_libraries(${name} PUBLIC ${libraries} fracgpu_fuzz_flags)
endfunction()

# fracgpu_add_fuzzer(<name> SOURCES <file>... LIBS <lib>...): the libFuzzer binary <name>
# (bin/<name>), and a ctest test <name>_corpus (label fuzz) that runs every seed of
# tests/fuzz/corpus/<name minus "_fuzz"> once: the seeds must keep passing.
function(fracgpu_add_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} fracgpu_fuzz_flags fracgpu_warnings)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  string(REGEX REPLACE "_fuzz$" "" corpus ${name})
  set(corpus_dir ${CMAKE_CURRENT_SOURCE_DIR}/corpus/${corpus})
  if(NOT IS_DIRECTORY ${corpus_dir})
    message(FATAL_ERROR "fuzzer ${name} has no seed corpus ${corpus_dir}")
  endif()
  add_test(NAME ${name}_corpus COMMAND ${name} -runs=0 ${corpus_dir})
  set_tests_properties(${name}_corpus PROPERTIES LABELS fuzz TIMEOUT 120)
  add_dependencies(fracgpu_fuzzers ${name})
endfunction()
add_custom_target(fracgpu_fuzzers)
