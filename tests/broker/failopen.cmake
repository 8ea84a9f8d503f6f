# Tests added for the failopen work; included from CMakeLists.txt (target_sources / add_executable).
