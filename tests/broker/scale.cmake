# Tests added for the scale work; included from CMakeLists.txt (target_sources / add_executable).
