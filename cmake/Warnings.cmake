# Warning flags shared by every fracgpu target (fracgpu_warnings interface library).
add_library(fracgpu_warnings INTERFACE)
target_compile_options(fracgpu_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wformat=2>
  $<$<AND:$<BOOL:${FRACGPU_WERROR}>,$<COMPILE_LANGUAGE:C,CXX>>:-Werror>)
# GCC 12 at -O3 warns -Wrestrict inside libstdc++ for `"literal" + std::to_string(n)` and
# the like (GCC bug 105329, "Bogus restrict warning when assigning 1-char string literal
# to std::string", fixed after 12.2): whether it fires depends on what gets inlined, so a
# unity build's grouping decides it, not the code. Off there: -Wno-error=restrict is not
# enough, since GCC 12 makes it an error again after a `#pragma GCC diagnostic pop` (as in
# GoogleTest's headers). GCC 13 and clang (the fuzz build) still check.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(fracgpu_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
endif()
