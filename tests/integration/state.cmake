# Tests added for the state work; included from CMakeLists.txt (target_sources / add_executable).
