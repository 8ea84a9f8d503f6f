# Warning flags shared by every fracgpu target (fracgpu_warnings interface library).
add_library(fracgpu_warnings INTERFACE)
target_compile_options(fracgpu_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wformat=2>
  $<$<AND:$<BOOL:${FRACGPU_WERROR}>,$<COMPILE_LANGUAGE:C,CXX>>:-Werror>)
