# ctest script: the fake libcuda.so.1 must export only cu* and fakecuda_* symbols, and
# must not reference any cu* symbol through a dynamic relocation (a PLT/GOT entry):
# with a shim preloaded that exports the same names, such a call would land in the shim.
# Usage: cmake -DLIBRARY=<path> -DREADELF=<readelf> -P check_exports.cmake
execute_process(COMMAND ${READELF} --dyn-syms -W ${LIBRARY} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf --dyn-syms failed on ${LIBRARY}")
endif()
string(REPLACE "\n" ";" lines "${symbols}")
set(exported 0)
foreach(line IN LISTS lines)
  # Defined global symbols: "... GLOBAL DEFAULT <section index> name[@version]".
  if(line MATCHES "GLOBAL +DEFAULT +[0-9]+ +([^ @]+)")
    set(name ${CMAKE_MATCH_1})
    if(NOT name MATCHES "^(cu|fakecuda_)")
      message(FATAL_ERROR "unexpected exported symbol: ${name}")
    endif()
    math(EXPR exported "${exported} + 1")
  endif()
endforeach()
if(exported LESS 250)
  message(FATAL_ERROR "only ${exported} symbols exported")
endif()

execute_process(COMMAND ${READELF} --relocs -W ${LIBRARY} OUTPUT_VARIABLE relocations)
string(REGEX MATCH "[ \t](cu[A-Z][A-Za-z0-9_]*)" self_reference "${relocations}")
if(self_reference)
  message(FATAL_ERROR "dynamic relocation against ${self_reference}: an internal call could reach an interposer")
endif()
message(STATUS "${exported} exported symbols, no dynamic relocations against cu* symbols")
